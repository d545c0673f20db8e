//! [`MySqlLease`]: what one acquisition keeps.

use super::connection::MyConnection;
use crate::lease::sql_lease;
use crate::session_connection::EndSession;

sql_lease!(
    /// One acquisition: its name and fencing token, and either the owner token written in the
    /// lock table or the connection whose session holds the row or advisory lock.
    MySqlLease,
    MyConnection,
    String
);

/// How a MySQL lease holds its lock (owner tokens and `GET_LOCK` names as hex literals).
pub(crate) type Hold = crate::lease::Hold<MyConnection, String>;

impl EndSession for MyConnection {
    /// The socket is shut down: the server ends the session, and its locks with it.
    fn end_session(&mut self) {
        self.poison();
    }
}
