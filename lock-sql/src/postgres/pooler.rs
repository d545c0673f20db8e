//! [`Pooler`]: the connection pooler (PgBouncer, pgcat, RDS Proxy, Supavisor) a client reaches
//! PostgreSQL through, as the `pooler=` URL parameter or [`PostgresLockBuilder::pooler`] says,
//! and the probe `build` runs to refuse what certainly cannot work.
//!
//! What each mode changes (the crate docs' "Behind a pooler" has the user's view):
//! - every pooler: statements are sent unnamed (parsed with their parameters in one round trip),
//!   never as named prepared statements: a pooler below PgBouncer 1.21 does not track those, and
//!   another client's `s0` on a shared server connection fails ours ("prepared statement "s0"
//!   already exists");
//! - transaction pooling: a server session lasts one transaction, so nothing may live in one
//!   across transactions — the advisory kind (a session lock) is refused, and the lock table's
//!   waiters get no `LISTEN` wake-ups (a `LISTEN` would land on a server connection others get
//!   next) and re-check on their own at a quick pace instead;
//! - statement pooling: no transactions at all — refused.
//!
//! [`PostgresLockBuilder::pooler`]: crate::postgres::PostgresLockBuilder::pooler

use std::fmt;
use std::str::FromStr;

use lock_core::{Error, Result};

use super::connection::{CallFailure, PgConnection};
use super::pool::PgPool;
use super::PostgresLockKind;

/// The URL parameter that names the pooler.
pub(crate) const PARAMETER: &str = "pooler";

/// What stands between the client and PostgreSQL, as PgBouncer names its `pool_mode`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Pooler {
    /// A direct connection (or one a proxy keeps for the client's whole session): statements
    /// are prepared once per connection. The default.
    #[default]
    None,
    /// Session pooling: a server connection is the client's until it disconnects, then reset
    /// (PgBouncer's `server_reset_query = DISCARD ALL`, its default, must stay: it drops the
    /// session's advisory locks and settings). Every kind works.
    Session,
    /// Transaction pooling: a server connection is the client's for one transaction. The lock
    /// table and the row lock work; the advisory lock is refused at `build`.
    Transaction,
    /// Statement pooling: no transactions. Refused at `build`.
    Statement,
}

impl Pooler {
    /// The name in the `pooler=` URL parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Session => "session",
            Pooler::Transaction => "transaction",
            Pooler::Statement => "statement",
        }
    }

    /// Whether statements are sent unnamed (every pooler: see the module docs).
    pub(crate) fn unnamed_statements(self) -> bool {
        self != Pooler::None
    }

    /// Whether a `LISTEN` connection keeps its session (not through transaction pooling).
    pub(crate) fn can_listen(self) -> bool {
        self != Pooler::Transaction
    }

    /// Refuses the combinations that cannot work, before anything connects.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]: statement pooling; the advisory kind through transaction
    /// pooling.
    pub(crate) fn check(self, kind: PostgresLockKind) -> Result<()> {
        match (self, kind) {
            (Pooler::Statement, _) => Err(statement_pooling()),
            (Pooler::Transaction, PostgresLockKind::Advisory) => Err(Error::invalid_config(
                "pg-advisory cannot work through transaction pooling (pooler=transaction): an \
                 advisory lock belongs to a server session, which the pooler hands to another \
                 client after each transaction, so two clients could both hold it; use pg-table \
                 or pg-row there, or connect pg-advisory directly or through session pooling",
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Pooler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Pooler {
    type Err = Error;

    /// `none`, `session`, `transaction` or `statement` (PgBouncer's `pool_mode` names).
    fn from_str(text: &str) -> Result<Self> {
        match text {
            "none" => Ok(Pooler::None),
            "session" => Ok(Pooler::Session),
            "transaction" => Ok(Pooler::Transaction),
            "statement" => Ok(Pooler::Statement),
            other => Err(Error::invalid_config(format!(
                "pooler={other}: expected none, session, transaction or statement"
            ))),
        }
    }
}

/// The error for statement pooling, declared or met.
pub(crate) fn statement_pooling() -> Error {
    Error::invalid_config(
        "statement pooling (pooler=statement, PgBouncer's pool_mode=statement) allows no \
         transactions, and every PostgreSQL kind needs them (the row lock holds one open, the lock \
         table and the elections commit several statements together): connect through session or \
         transaction pooling, or directly",
    )
}

/// The error for connections that share server sessions (transaction pooling) where the
/// settings declared none, or session pooling.
pub(crate) fn shared_sessions(declared: Option<Pooler>, kind: PostgresLockKind) -> Error {
    let advice = if kind == PostgresLockKind::Advisory {
        "pg-advisory cannot work there (its lock belongs to a server session); use pg-table or pg-row \
         with pooler=transaction, or connect directly"
    } else {
        "add pooler=transaction to the URL (or call .pooler(Pooler::Transaction))"
    };
    let declared = match declared {
        Some(Pooler::Session) => " although pooler=session was declared",
        _ => "",
    };
    Error::invalid_config(format!(
        "two connections of this client share one server session{declared}: a pooler in \
         transaction mode (PgBouncer's pool_mode=transaction?) stands in front of PostgreSQL; {advice}"
    ))
}

/// `url` without its `pooler=` parameter, and the parameter's value: a `postgres://…?…` URL or
/// libpq `key=value` pairs.
///
/// # Errors
/// [`Error::InvalidConfig`]: an unknown value, a malformed `key=value` string.
pub(crate) fn take_from_url(url: &str) -> Result<(String, Option<Pooler>)> {
    if !url.contains("://") {
        let mut pooler = None;
        let mut kept = Vec::new();
        for pair in crate::tls::key_value_pairs(url)? {
            if pair.key == PARAMETER {
                pooler = Some(pair.value.parse()?);
            } else {
                kept.push(pair.text);
            }
        }
        return Ok((kept.join(" "), pooler));
    }
    let (rest, taken) = lock_core::take_query_parameters(url, |key| key == PARAMETER)?;
    let pooler = taken.last().map(|(_, value)| value.parse()).transpose()?;
    Ok((rest, pooler))
}

/// What `build`'s probe learned of the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerFacts {
    /// `server_version_num` (e.g. 150019).
    pub(crate) version: u32,
}

/// `build`'s probe on its first connection `first`: the server's version, and unless
/// `pooler=none` was declared, whether a pooler stands between that certainly breaks these
/// locks:
/// - statement pooling (a `BEGIN` refused; tried where a pooler was declared, or the server
///   answers on another port than the URL names) is refused;
/// - transaction pooling the settings did not declare (a second connection, or the first one's
///   next transaction, on another client's server session: `pg_backend_pid()` tells) is
///   refused — named statements and session locks would break;
/// - otherwise, a server on another port than the URL's is a warning: probes miss pooling
///   under load. Declaring `pooler=none` skips the probe (one more connection at `build`).
///
/// # Errors
/// As any statement; [`Error::InvalidConfig`] for the poolers above.
pub(crate) fn probe(
    pool: &PgPool,
    first: &PgConnection,
    config: &tokio_postgres::Config,
    declared: Option<Pooler>,
    kind: PostgresLockKind,
) -> Result<ServerFacts> {
    let (version, port, session) = identify(first)?;
    let facts = ServerFacts { version };
    if declared == Some(Pooler::None) {
        return Ok(facts);
    }
    let url_ports = match config.get_ports() {
        [] => &[5432][..],
        ports => ports,
    };
    let over_tcp = config.get_hosts().iter().all(|host| matches!(host, tokio_postgres::config::Host::Tcp(_)));
    // The server has no port when it was reached over a Unix socket: by a pooler on its host, if
    // this client connected over TCP.
    let proxied = match port {
        Some(port) => !url_ports.contains(&port),
        None => over_tcp,
    };
    if proxied || declared.is_some() {
        match begin_and_commit(first) {
            Ok(()) => {}
            Err(failure) if refuses_transactions(&failure) => return Err(statement_pooling()),
            // PgBouncer sends its FATAL and closes the connection, and the driver may see the
            // close first: once more on a connection of its own, where a refusal or a close
            // again is statement pooling (not a server that died twice on a `BEGIN`).
            Err(failure) if failure.session_ended() => {
                let again = pool.open_unpooled(None)?;
                match begin_and_commit(&again) {
                    Ok(()) => {}
                    Err(failure) if refuses_transactions(&failure) || failure.session_ended() => {
                        return Err(statement_pooling())
                    }
                    Err(failure) => return Err(failure.into_error("probe for a pooler")),
                }
            }
            Err(failure) => return Err(failure.into_error("probe for a pooler")),
        }
    }
    // Undeclared, every kind is probed whatever the ports say: a pooler may listen on the
    // server's port (another host's), and a miss there means two advisory holders, or named
    // statements bound on another client's server session — where one of the same name and
    // parameter types would run that client's statement in place of ours.
    if declared == Some(Pooler::Transaction) {
        return Ok(facts);
    }
    // A second connection, and the first one's next transaction, on the first one's server
    // session: certainly shared. A pool too busy to answer proves nothing (the warning below).
    let shared = pool.open_unpooled(None).and_then(|second| {
        let (_, _, other) = identify(&second)?;
        let (_, _, again) = identify(first)?;
        Ok(other == session || again != session)
    });
    match shared {
        Ok(true) => return Err(shared_sessions(declared, kind)),
        Ok(false) => {}
        Err(error) => tracing::debug!(%error, "could not probe whether a pooler shares server sessions"),
    }
    if declared.is_none() && proxied {
        tracing::warn!(
            server_port = port,
            url_ports = ?url_ports,
            "postgres answers on another port than the URL names (or over a Unix socket, to a \
             client on TCP): if a pooler (PgBouncer) stands between, declare it with pooler=session \
             or pooler=transaction (pooler=none silences this)"
        );
    }
    Ok(facts)
}

/// `BEGIN` and `COMMIT` on `connection`: what statement pooling refuses.
fn begin_and_commit(connection: &PgConnection) -> std::result::Result<(), CallFailure> {
    connection.run_for("probe for a pooler", connection.io_timeout(), |client| async move {
        client.batch_execute("BEGIN").await?;
        client.batch_execute("COMMIT").await
    })
}

/// Whether `failure` is a pooler's refusal of a transaction block, as its FATAL says.
fn refuses_transactions(failure: &CallFailure) -> bool {
    matches!(failure, CallFailure::Driver(error) if is_statement_mode_refusal(error))
}

/// A server session, as `build`'s probe tells them apart: the server process and when its
/// server started (a pid alone may repeat on another server behind a load balancer).
type Session = (i32, Option<std::time::SystemTime>);

/// The server's version, its port (`None` over a Unix socket) and the server session serving
/// `connection` now; unnamed, as every statement behind a pooler.
fn identify(connection: &PgConnection) -> Result<(u32, Option<u16>, Session)> {
    const SQL: &str = "SELECT current_setting('server_version_num')::int, inet_server_port(), \
                       pg_backend_pid(), pg_postmaster_start_time()";
    let row = connection
        .run("read the server version", |client| async move { client.query_typed(SQL, &[]).await })?;
    let row = row.first().ok_or_else(|| Error::backend(super::error::BACKEND, "no row for SELECT"))?;
    let version: i32 = row.get(0);
    let port: Option<i32> = row.get(1);
    let session = (row.get(2), row.try_get(3).ok());
    Ok((u32::try_from(version).unwrap_or(0), port.and_then(|port| u16::try_from(port).ok()), session))
}

/// PgBouncer's answer to a `BEGIN` under statement pooling (a `FATAL`, and the connection
/// closes).
const STATEMENT_MODE_REFUSAL: &str = "transaction blocks not allowed in statement pooling mode";

/// Whether `error` is a pooler's refusal of a transaction block (statement pooling).
pub(crate) fn is_statement_mode_refusal(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| db.message().contains(STATEMENT_MODE_REFUSAL))
}

/// Whether `error` is the symptom of named prepared statements meeting a pooler that shares
/// server sessions: another client's statement of the same name (`42P05`), or ours gone with
/// the server session it was prepared on (`26000`).
pub(crate) fn is_shared_session_symptom(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    error.code().is_some_and(|code| {
        *code == SqlState::DUPLICATE_PSTATEMENT || *code == SqlState::INVALID_SQL_STATEMENT_NAME
    })
}

/// A driver error that shows a pooler sharing server sessions (see
/// [`is_shared_session_symptom`]), with what to do about it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{failure} (a connection pooler in front of PostgreSQL seems to share server sessions between \
     clients — PgBouncer in transaction or statement mode? Declare it with pooler=transaction; \
     statement pooling cannot work)"
)]
pub(crate) struct SharedSession {
    /// Shown in the message, not as a source: a chain would print it twice.
    pub(crate) failure: Box<dyn std::error::Error + Send + Sync>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_leaves_both_url_forms_and_the_rest_stays() {
        let (url, pooler) =
            take_from_url("postgres://u:p@h:6432/db?sslmode=require&pooler=transaction&application_name=a#f")
                .unwrap();
        assert_eq!(url, "postgres://u:p@h:6432/db?sslmode=require&application_name=a#f");
        assert_eq!(pooler, Some(Pooler::Transaction));
        let (url, pooler) = take_from_url("postgres://h/db?pooler=session").unwrap();
        assert_eq!((url.as_str(), pooler), ("postgres://h/db", Some(Pooler::Session)));
        let (url, pooler) = take_from_url("host=h pooler=statement dbname=d").unwrap();
        assert_eq!((url.as_str(), pooler), ("host=h dbname=d", Some(Pooler::Statement)));
        assert_eq!(take_from_url("postgres://h/db").unwrap().1, None);
        let unknown = take_from_url("postgres://h/db?pooler=pgbouncer").unwrap_err();
        assert!(matches!(&unknown, Error::InvalidConfig { reason } if reason.contains("pooler=pgbouncer")));
    }

    #[test]
    fn statement_pooling_and_transaction_pooled_advisory_locks_are_refused() {
        for kind in [PostgresLockKind::Table, PostgresLockKind::Row, PostgresLockKind::Advisory] {
            assert!(Pooler::Statement.check(kind).is_err());
            assert!(Pooler::Session.check(kind).is_ok());
            assert!(Pooler::None.check(kind).is_ok());
        }
        assert!(Pooler::Transaction.check(PostgresLockKind::Table).is_ok());
        assert!(Pooler::Transaction.check(PostgresLockKind::Row).is_ok());
        let refused = Pooler::Transaction.check(PostgresLockKind::Advisory).unwrap_err();
        assert!(
            matches!(&refused, Error::InvalidConfig { reason }
                if reason.contains("transaction pooling") && reason.contains("pg-table or pg-row")),
            "{refused}"
        );
    }
}
