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

/// PB01 and PB02 (`docs/scenarios.md`): each PostgreSQL kind through the harness's PgBouncer.
mod pgbouncer {
    use lock_sql::postgres::PostgresLockKind::{Advisory, Row, Table};
    use lock_sql::testkit::pooler::{pb01, pb02};
    use lock_testkit::run_backend_scenario;

    /// The libtest path of a test of this module: holder processes re-run it.
    macro_rules! this_test {
        ($name:ident) => {
            concat!("pgbouncer::", stringify!($name))
        };
    }

    #[test]
    fn pb01_pg_table_through_transaction_pooling() {
        run_backend_scenario(
            vec![pb01(Table, this_test!(pb01_pg_table_through_transaction_pooling))],
            "PB01",
        );
    }

    #[test]
    fn pb01_pg_row_through_transaction_pooling() {
        run_backend_scenario(vec![pb01(Row, this_test!(pb01_pg_row_through_transaction_pooling))], "PB01");
    }

    #[test]
    fn pb01_pg_advisory_is_refused_through_transaction_pooling() {
        let test = this_test!(pb01_pg_advisory_is_refused_through_transaction_pooling);
        run_backend_scenario(vec![pb01(Advisory, test)], "PB01");
    }

    #[test]
    fn pb02_pg_table_through_session_pooling() {
        run_backend_scenario(vec![pb02(Table, this_test!(pb02_pg_table_through_session_pooling))], "PB02");
    }

    #[test]
    fn pb02_pg_row_through_session_pooling() {
        run_backend_scenario(vec![pb02(Row, this_test!(pb02_pg_row_through_session_pooling))], "PB02");
    }

    /// Undeclared pooling: `build` finds what certainly breaks. On a PgBouncer of its own, with
    /// nothing else on it, so that two connections do share a server session.
    #[test]
    fn pb01_undeclared_pooling_is_found_and_refused_at_build() {
        use lock_core::Error;
        use lock_sql::postgres::{Pooler, PostgresBackend, PostgresLockKind};
        use lock_testkit::harness::{PgBouncer, PoolMode};

        let pgbouncer = PgBouncer::start().expect("a PgBouncer in front of the shared PostgreSQL");
        let build = |mode: PoolMode, kind: PostgresLockKind| {
            PostgresBackend::builder(pgbouncer.url(mode)).kind(kind).restart_delay(false).build()
        };
        for kind in [Table, Row, Advisory] {
            let built = build(PoolMode::Transaction, kind);
            assert!(
                matches!(&built, Err(Error::InvalidConfig { reason }) if reason.contains("share one server session")),
                "{kind:?} through undeclared transaction pooling: {built:?}"
            );
            let built = build(PoolMode::Statement, kind);
            assert!(
                matches!(&built, Err(Error::InvalidConfig { reason }) if reason.contains("statement pooling")),
                "{kind:?} through undeclared statement pooling: {built:?}"
            );
            // Declared, refused before connecting: an address nothing listens on.
            let declared =
                PostgresBackend::builder("postgres://u@127.0.0.1:1/db").kind(kind).pooler(Pooler::Statement);
            assert!(matches!(declared.build(), Err(Error::InvalidConfig { .. })));
            assert!(build(PoolMode::Session, kind).is_ok(), "{kind:?} through undeclared session pooling");
        }
    }

    #[test]
    fn pb02_pg_advisory_through_session_pooling() {
        run_backend_scenario(
            vec![pb02(Advisory, this_test!(pb02_pg_advisory_through_session_pooling))],
            "PB02",
        );
    }
}
