//! [`PostgresLease`]: what one acquisition keeps.

use super::pool::PooledPg;
use crate::lease::sql_lease;
use crate::session_connection::EndSession;

sql_lease!(
    /// One acquisition: its name and fencing token, and either the owner token written in the
    /// lock table or the connection whose session holds the row or advisory lock.
    PostgresLease,
    PooledPg,
    i64
);

/// How a PostgreSQL lease holds its lock (advisory keys are `bigint`s).
pub(crate) type Hold = crate::lease::Hold<PooledPg, i64>;

impl EndSession for PooledPg {
    /// Closed instead of pooled: the server ends the session, and its locks with it.
    fn end_session(&mut self) {
        self.discard();
    }
}
