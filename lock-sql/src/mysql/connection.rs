//! [`MyConnection`]: one connection out of the pool, with socket-level connect, read and write
//! timeouts (so every call is bounded), text statements sent in one round trip, and a rule for
//! connections that fell out of step with the server.
//!
//! After a timeout or an I/O error a reply may still be on its way: such a connection is marked
//! broken and never serves another statement — the next call fails at once, without I/O — and it
//! is closed, not pooled, when dropped. It is not closed at the failure itself: a session hold's
//! connection stays open until the hold is released or dropped, so a check that timed out does
//! not end the session (and free the lock) before the holder counts the lock lost; the server's
//! idle limit ends it if nobody does.

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use lock_core::Result;
use mysql::prelude::Queryable as _;
use mysql::{Conn, Error as MySqlError, Row};

use super::error;
use super::pool::Shared;
use crate::restart_delay::SessionsAge;

/// The results of one multi-statement exchange: per statement, its affected rows and rows.
pub(crate) struct Results {
    pub(crate) sets: Vec<(u64, Vec<Row>)>,
}

impl Results {
    /// The last statement's first row's first column.
    pub(crate) fn last_value<T: mysql::prelude::FromValue>(&self) -> Option<T> {
        self.sets.last()?.1.first()?.get::<Option<T>, _>(0).flatten()
    }

    /// The first row any statement returned.
    pub(crate) fn first_row(&self) -> Option<&Row> {
        self.sets.iter().find_map(|(_, rows)| rows.first())
    }

    /// The affected rows of statement `index`.
    pub(crate) fn affected(&self, index: usize) -> u64 {
        self.sets.get(index).map_or(0, |set| set.0)
    }
}

/// One connection out of the pool; back into it when dropped, unless broken.
pub(crate) struct MyConnection {
    /// `None` only while dropping.
    conn: Option<Conn>,
    pool: Arc<Shared>,
    /// Out of step with the server (see the module docs), and why.
    broken: Option<Broken>,
    /// The age of the server's sessions, once a session lock asked ([`crate::restart_delay`]);
    /// kept with the connection in the pool.
    pub(crate) sessions_age: SessionsAge,
}

/// Why a connection serves no more statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    /// A call got no complete reply in time: the session may still be there.
    NoAnswer,
    /// The connection closed under a call, or was shut down here: the session is gone.
    SessionEnded,
}

impl MyConnection {
    pub(crate) fn new(conn: Conn, pool: Arc<Shared>, sessions_age: SessionsAge) -> Self {
        Self { conn: Some(conn), pool, broken: None, sessions_age }
    }

    fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("present until dropped")
    }

    /// Runs `sql` (one or more statements) and collects every result set.
    ///
    /// # Errors
    /// The driver's error, mapped; a broken connection fails at once.
    pub(crate) fn run(&mut self, operation: &'static str, sql: &str) -> Result<Results> {
        self.try_run(sql).map_err(|error| error::map(operation, error))
    }

    /// Like [`run`](Self::run), with the driver error kept (to tell contention and a dead
    /// session from other failures). A failure that is not a complete server reply breaks the
    /// connection (see the module docs).
    ///
    /// # Errors
    /// The driver's error; a timed-out I/O error at once on a broken connection.
    pub(crate) fn try_run(&mut self, sql: &str) -> std::result::Result<Results, MySqlError> {
        match self.broken {
            None => {}
            Some(Broken::NoAnswer) => {
                return Err(MySqlError::IoError(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "an earlier call on this connection got no complete reply",
                )))
            }
            Some(Broken::SessionEnded) => {
                return Err(MySqlError::IoError(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the connection closed under an earlier call",
                )))
            }
        }
        let outcome = (|| {
            let mut result = self.conn().query_iter(sql)?;
            let mut sets = Vec::new();
            while let Some(set) = result.iter() {
                let affected = set.affected_rows();
                let rows = set.collect::<std::result::Result<Vec<Row>, _>>()?;
                sets.push((affected, rows));
            }
            Ok(Results { sets })
        })();
        if let Err(error) = &outcome {
            if error::session_ended(error) {
                self.broken = Some(Broken::SessionEnded);
            } else if !matches!(error, MySqlError::MySqlError(_)) {
                self.broken = Some(Broken::NoAnswer);
            }
        }
        outcome
    }

    /// Like [`try_run`](Self::try_run) for a statement that waits in the server's lock queue for
    /// up to `wait`: the socket's read timeout is the wait plus the I/O timeout for this call.
    ///
    /// # Errors
    /// As [`try_run`](Self::try_run).
    pub(crate) fn try_run_waiting(
        &mut self,
        sql: &str,
        wait: Duration,
    ) -> std::result::Result<Results, MySqlError> {
        let io_timeout = self.pool.io_timeout();
        if self.broken.is_none() && self.set_read_timeout(wait + io_timeout).is_err() {
            self.broken = Some(Broken::NoAnswer);
        }
        let outcome = self.try_run(sql);
        if self.broken.is_none() && self.set_read_timeout(io_timeout).is_err() {
            self.broken = Some(Broken::NoAnswer);
        }
        outcome
    }

    /// Sets the socket's read timeout (see [`set_socket_timeout`]).
    fn set_read_timeout(&mut self, timeout: Duration) -> nix::Result<()> {
        set_socket_timeout(self.conn(), Direction::Read, timeout)
    }

    /// Whether this connection, idle in the pool until now, is still open: its socket has
    /// nothing to read (an idle session gets nothing unasked), or it answers a `PING`. A server
    /// that ended the session (a restart, a `KILL`, `wait_timeout`) has closed the socket, which
    /// then reads as end of file: a `poll`, no round trip, tells.
    #[allow(unsafe_code)]
    pub(crate) fn still_open(&mut self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        let conn = self.conn();
        // SAFETY: the descriptor is `conn`'s socket, which stays open while `conn` is borrowed
        // here, and the borrow ends with this block.
        let quiet = {
            let fd = unsafe { BorrowedFd::borrow_raw(conn.as_raw_fd()) };
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(0))
        };
        quiet || conn.ping().is_ok()
    }

    /// Why the connection serves no more statements, if it does not (see the module docs).
    pub(crate) fn broken(&self) -> Option<Broken> {
        self.broken
    }

    /// Ends the session now: the socket is shut down (the server sees the connection close and
    /// releases every lock and transaction the session held), and the pool drops the connection.
    pub(crate) fn poison(&mut self) {
        if let Some(conn) = &self.conn {
            let _ = nix::sys::socket::shutdown(conn.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
        self.broken = Some(Broken::SessionEnded);
    }

    /// The server's id of this connection (`CONNECTION_ID()`).
    pub(crate) fn id(&mut self) -> u32 {
        self.conn().connection_id()
    }

    /// This end's TCP port (`None` over a Unix socket): with the id, it tells this connection's
    /// session from another server's session of the same id (`HOST` in the process list).
    pub(crate) fn local_port(&mut self) -> Option<u16> {
        let address =
            nix::sys::socket::getsockname::<nix::sys::socket::SockaddrStorage>(self.conn().as_raw_fd());
        let address = address.ok()?;
        address.as_sockaddr_in().map(|v4| v4.port()).or_else(|| address.as_sockaddr_in6().map(|v6| v6.port()))
    }
}

impl Drop for MyConnection {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if self.broken.is_some() {
            // Closed, never pooled: dropping the driver's connection closes the socket.
            drop(conn);
            self.pool.forget_one();
        } else {
            self.pool.put_back(conn, self.sessions_age);
        }
    }
}

/// Which of a socket's timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Direction {
    Read,
    Write,
}

/// Sets one of `conn`'s socket timeouts (`SO_RCVTIMEO`/`SO_SNDTIMEO`, which the driver sets from
/// its options when it connects and has no setter for).
///
/// # Errors
/// The `setsockopt` error.
#[allow(unsafe_code)]
pub(crate) fn set_socket_timeout(conn: &Conn, direction: Direction, timeout: Duration) -> nix::Result<()> {
    // SAFETY: the descriptor is `conn`'s socket, which stays open while `conn` is borrowed
    // here, and the borrow ends with this function.
    let fd = unsafe { BorrowedFd::borrow_raw(conn.as_raw_fd()) };
    let time = nix::sys::time::TimeVal::new(
        i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        i64::from(timeout.subsec_micros()),
    );
    match direction {
        Direction::Read => {
            nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &time)
        }
        Direction::Write => nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::SendTimeout, &time),
    }
}
