//! Q01–Q03 of `docs/scenarios.md` on both databases (their bodies ship in the crate's testkit, which
//! `distlock compare` runs too).

use lock_sql::testkit::scenarios::{q01, q02, q03};
use lock_testkit::run_backend_scenario;

macro_rules! sql_scenarios {
    ($module:ident, $kind:ident) => {
        mod $module {
            use super::*;
            use lock_sql::$module::$kind;

            #[test]
            fn q01_lock_table_on_the_database_clock() {
                run_backend_scenario(vec![q01($kind::Table)], "Q01");
            }

            #[test]
            fn q02_row_lock_held_by_an_open_transaction() {
                run_backend_scenario(vec![q02($kind::Row)], "Q02");
            }

            #[test]
            fn q03_advisory_lock_bound_to_the_session() {
                run_backend_scenario(vec![q03($kind::Advisory)], "Q03");
            }
        }
    };
}

sql_scenarios!(postgres, PostgresLockKind);
sql_scenarios!(mysql, MySqlLockKind);
