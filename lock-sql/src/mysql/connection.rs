//! Connections: the `mysql` crate's own pool, with socket-level connect, read and write
//! timeouts (so every call is bounded), text statements sent in one round trip, and a rule for
//! connections that fell out of step with the server.
//!
//! After a timeout or an I/O error a reply may still be on its way: such a connection must never
//! serve another statement. The crate's pool offers no way to drop a connection it manages
//! (`PooledConn::unwrap` leaks the pool's slot), so the socket is shut down and the connection
//! marked for a reset on return: the reset fails, and the pool forgets the connection, freeing
//! its slot.

use std::os::fd::AsRawFd as _;
use std::time::Duration;

use lock_core::Result;
use mysql::prelude::Queryable as _;
use mysql::{Error as MySqlError, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, PooledConn, Row};

use super::error::{self, MyFailure};

/// Timeouts and limits of a pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MySettings {
    pub(crate) max_connections: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// The results of one multi-statement exchange: per statement, its affected rows and rows.
pub(crate) struct Results {
    pub(crate) sets: Vec<(u64, Vec<Row>)>,
}

impl Results {
    /// The last statement's first row's first column.
    pub(crate) fn last_value<T: mysql::prelude::FromValue>(&self) -> Option<T> {
        self.sets.last()?.1.first()?.get::<Option<T>, _>(0).flatten()
    }

    /// The first column of the first row any statement returned.
    pub(crate) fn first_value<T: mysql::prelude::FromValue>(&self) -> Option<T> {
        self.sets.iter().find_map(|(_, rows)| rows.first())?.get::<Option<T>, _>(0).flatten()
    }

    /// The affected rows of statement `index`.
    pub(crate) fn affected(&self, index: usize) -> u64 {
        self.sets.get(index).map_or(0, |set| set.0)
    }
}

/// One pooled connection.
pub(crate) struct MyConnection {
    inner: PooledConn,
}

impl MyConnection {
    /// Runs `sql` (one or more statements) and collects every result set. A failure that is not
    /// a complete server reply poisons the connection (see the module docs).
    pub(crate) fn run(&mut self, operation: &'static str, sql: &str) -> Result<Results> {
        self.try_run(sql).map_err(|error| error::map(operation, error))
    }

    /// Like [`run`](Self::run), with the driver error kept (to tell contention and a dead
    /// session from other failures).
    pub(crate) fn try_run(&mut self, sql: &str) -> std::result::Result<Results, MySqlError> {
        let outcome = (|| {
            let mut result = self.inner.query_iter(sql)?;
            let mut sets = Vec::new();
            while let Some(set) = result.iter() {
                let affected = set.affected_rows();
                let rows = set.collect::<std::result::Result<Vec<Row>, _>>()?;
                sets.push((affected, rows));
            }
            Ok(Results { sets })
        })();
        if let Err(error) = &outcome {
            if !matches!(error, MySqlError::MySqlError(_)) {
                self.poison();
            }
        }
        outcome
    }

    /// Makes sure the pool drops this connection instead of reusing it: the session ends, and
    /// with it every lock and transaction it held.
    pub(crate) fn poison(&mut self) {
        let socket = self.inner.as_raw_fd();
        let _ = nix::sys::socket::shutdown(socket, nix::sys::socket::Shutdown::Both);
        // The pool checks a returned connection only by resetting it; the reset fails on the shut
        // socket, and the pool forgets the connection.
        self.inner.reset_connection(true);
    }
}

/// A pool of connections to one server.
#[derive(Clone)]
pub(crate) struct MyPool {
    pool: Pool,
    settings: MySettings,
}

impl MyPool {
    pub(crate) fn new(opts: Opts, settings: MySettings) -> Result<Self> {
        let max = usize::try_from(settings.max_connections).unwrap_or(usize::MAX);
        let constraints = PoolConstraints::new(0, max)
            .ok_or_else(|| lock_core::Error::invalid_config("max_connections must be at least 1"))?;
        let opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(settings.connect_timeout))
            .read_timeout(Some(settings.io_timeout))
            .write_timeout(Some(settings.io_timeout))
            // Row locks: a locking read of an absent key takes no gap lock under READ COMMITTED
            // (under REPEATABLE READ it would block unrelated inserts and deadlock).
            .init(vec!["SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"])
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(constraints)
                    // Lock-table statements leave no session state; session holds reset their
                    // connection on return when their state is unknown.
                    .with_reset_connection(false)
                    // No ping per checkout: a dead connection fails its statement instead.
                    .with_check_health(false),
            );
        let pool = Pool::new(opts).map_err(|error| error::map("connect", error))?;
        Ok(Self { pool, settings })
    }

    /// A connection, within the connect timeout.
    ///
    /// # Errors
    /// [`lock_core::Error::Timeout`] when every connection is in use; the connect error otherwise.
    pub(crate) fn get(&self) -> Result<MyConnection> {
        match self.pool.try_get_conn(self.settings.connect_timeout) {
            Ok(inner) => Ok(MyConnection { inner }),
            Err(MySqlError::DriverError(mysql::DriverError::Timeout)) => Err(MyFailure::PoolExhausted {
                timeout: self.settings.connect_timeout,
                max: self.settings.max_connections,
            }
            .into()),
            Err(error) => Err(error::map("connect", error)),
        }
    }

    pub(crate) fn settings(&self) -> MySettings {
        self.settings
    }
}
