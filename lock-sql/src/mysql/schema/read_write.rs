//! The row kind's read-write locks (a locking read of the name's row in the read-write table)
//! and the fence sequence the row and advisory kinds draw from.

use std::time::Duration;

use super::*;

impl Tables {
    /// Read-write lock (row kind): the transaction and the locking read of the name's row in the
    /// read-write table (`LOCK IN SHARE MODE` for a read: MariaDB has no `FOR SHARE`, MySQL 8
    /// takes both), with the fence and the µs waited; no row when the row is absent. Waits as
    /// [`lock_row`](Self::lock_row).
    pub(crate) fn lock_rw_row(
        &self,
        name: &str,
        write: bool,
        wait: Option<Duration>,
        idle_secs: u64,
    ) -> String {
        let Self { rw, fence, .. } = self;
        let mode = if write { "FOR UPDATE" } else { "LOCK IN SHARE MODE" };
        let select = match wait {
            None => format!("SELECT NEXTVAL({fence}), 0 FROM {rw} WHERE name = {name} {mode} NOWAIT"),
            Some(wait) => format!(
                "SET STATEMENT innodb_lock_wait_timeout = {}, max_statement_time = {} FOR \
                 SELECT NEXTVAL({fence}), {WAITED} FROM {rw} WHERE name = {name} {mode}",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                seconds(wait)
            ),
        };
        let limit = crate::mysql::session::set_idle_limit(idle_secs);
        format!("{START_CLOCK}; START TRANSACTION; {select}; {limit}")
    }

    /// Inserts the name's read-write row if absent (as [`insert_row`](Self::insert_row)).
    pub(crate) fn insert_rw_row(&self, name: &str) -> String {
        format!(
            "SET STATEMENT innodb_lock_wait_timeout = 1, max_statement_time = {} FOR \
             INSERT IGNORE INTO {} (name) VALUES ({name})",
            seconds(INSERT_WAIT),
            self.rw
        )
    }

    /// A fence from the sequence.
    pub(crate) fn next_fence(&self) -> String {
        format!("SELECT NEXTVAL({})", self.fence)
    }
}
