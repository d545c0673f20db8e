//! Throwaway PgBouncer poolers in front of a PostgreSQL server: one database alias per pool
//! mode, so tests can check a backend against each mode.

use std::fmt;
use std::fs;
use std::path::Path;
use std::time::Duration;

use nix::unistd::chown;
use postgres::{Config, NoTls};

use super::binaries;
use super::command::{CommandSpec, RunAs};
use super::postgres::unprivileged_account;
use super::process::Readiness;
use super::{
    dirs, ports, shared, HarnessError, PostgresServer, ServerKind, ServerProcess, TestDeployment, TestServer,
};

const KIND: ServerKind = ServerKind::PgBouncer;

/// How long `pgbouncer` may take to pass a login through to PostgreSQL.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connect timeout of each readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The session alias's pool: session pooling pins a server connection to each client
/// connection, so this bounds how many clients can be connected through it at once (within
/// PostgreSQL's [`MAX_CONNECTIONS`](PostgresServer::MAX_CONNECTIONS)).
const SESSION_POOL_SIZE: u32 = 400;

/// The transaction and statement aliases' pool: each pg-row holder, and each waiter in the
/// server's queue, pins a server connection for as long as it holds or waits, and a grant needs
/// one more for a moment (its fence's flush); tests run several scenarios at once.
const TRANSACTION_POOL_SIZE: u32 = 100;

/// How PgBouncer hands a server connection to a client; each mode is a database alias of the
/// same PostgreSQL database ([`PgBouncer::url`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolMode {
    /// A server connection per client connection, for the client's whole session
    /// (`pool_mode=session`): session state, advisory locks and `LISTEN` work.
    Session,
    /// A server connection per transaction (`pool_mode=transaction`): session state leaks
    /// between clients, and named prepared statements break.
    Transaction,
    /// A server connection per statement (`pool_mode=statement`): multi-statement
    /// transactions are refused.
    Statement,
}

impl PoolMode {
    /// Every mode, in a fixed order.
    pub const ALL: [PoolMode; 3] = [PoolMode::Session, PoolMode::Transaction, PoolMode::Statement];

    /// The database alias (and `pool_mode` value): `session`, `transaction` or `statement`.
    pub fn alias(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.alias())
    }
}

/// A private PgBouncer on a free loopback port in front of a plaintext PostgreSQL server on
/// 127.0.0.1, with one database alias per [`PoolMode`], each logging in to
/// [`PostgresServer::DATABASE`] as [`PostgresServer::USER`].
///
/// Clients may give any password (`auth_type = any`): PgBouncer logs in to PostgreSQL with the
/// aliases' own credentials. It speaks plaintext only, on TCP only.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct PgBouncer {
    process: ServerProcess,
    server_port: u16,
}

impl PgBouncer {
    /// Starts a PgBouncer in front of [`shared::postgres()`]'s server.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Shared`] if the shared PostgreSQL does not start;
    /// [`HarnessError::External`] if `DISTLOCK_POSTGRES_URL` names it (PgBouncer needs the
    /// harness's credentials); otherwise as [`start_in_front_of`](Self::start_in_front_of).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_in_front_of(shared::postgres()?.server()?.port())
    }

    /// Starts `pgbouncer` (as an unprivileged account when run as root) in front of the
    /// plaintext PostgreSQL server on `127.0.0.1:server_port`, which must have the login
    /// [`PostgresServer::USER`] (password [`PostgresServer::PASSWORD`]) and the database
    /// [`PostgresServer::DATABASE`], as a [`PostgresServer`] does. It is ready once a login
    /// through the `transaction` alias runs a query on that server.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without PgBouncer; [`HarnessError::Setup`] if there is
    /// no account to run as; [`HarnessError::Exited`] or [`HarnessError::NotReady`] (with the
    /// log's tail) if it does not come up or cannot reach the server; [`HarnessError::Io`]
    /// for temp dir and process failures.
    pub fn start_in_front_of(server_port: u16) -> Result<Self, HarnessError> {
        let pgbouncer = binaries::find(&binaries::PGBOUNCER)?;
        let account = unprivileged_account(KIND)?;
        ports::retry_on_port_in_use(|| Self::start_once(&pgbouncer, account, server_port))
    }

    fn start_once(pgbouncer: &Path, account: Option<RunAs>, server_port: u16) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let port = ports::free_port()?;
        let ini = dir.path().join("pgbouncer.ini");
        fs::write(&ini, config(dir.path(), port, server_port))
            .map_err(|source| HarnessError::io("writing pgbouncer.ini", source))?;
        if let Some(account) = account {
            // The temp dir is root's and private; pgbouncer's account writes its logfile there.
            for path in [dir.path(), &ini] {
                chown(path, Some(account.uid), Some(account.gid)).map_err(|errno| {
                    HarnessError::io(format!("handing {path:?} to uid {}", account.uid), errno.into())
                })?;
            }
        }

        // In the foreground (no `-d`), so the ServerProcess owns pgbouncer itself.
        let command = CommandSpec::new(pgbouncer).arg(&ini).current_dir(dir.path()).run_as(account);
        let readiness = Readiness { probe: Box::new(move || probe(port)), timeout: READY_TIMEOUT };
        let process = ServerProcess::start(KIND, dir, port, command, readiness)?;
        Ok(PgBouncer { process, server_port })
    }

    /// `postgres://distlock:distlock@127.0.0.1:PORT/ALIAS`, the alias named after `mode`.
    pub fn url(&self, mode: PoolMode) -> String {
        self.base_url() + mode.alias()
    }

    /// `postgres://distlock:distlock@127.0.0.1:PORT/`, without a database: append a
    /// [`PoolMode::alias`]. This is the [`address`](TestDeployment::address).
    pub fn base_url(&self) -> String {
        format!("postgres://{}:{}@127.0.0.1:{}/", PostgresServer::USER, PostgresServer::PASSWORD, self.port())
    }

    /// The port on 127.0.0.1 clients connect to.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The port on 127.0.0.1 of the PostgreSQL server behind it.
    pub fn server_port(&self) -> u16 {
        self.server_port
    }

    /// PgBouncer's process, for fault injection; the PostgreSQL server behind it is not
    /// affected.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestDeployment for PgBouncer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        PgBouncer::start()
    }

    fn address(&self) -> String {
        self.base_url()
    }
}

impl TestServer for PgBouncer {
    fn process(&self) -> &ServerProcess {
        PgBouncer::process(self)
    }
}

/// `pgbouncer.ini` for a pooler on `port` in front of PostgreSQL on `server_port`, logging
/// into `dir`.
fn config(dir: &Path, port: u16, server_port: u16) -> String {
    let server = format!(
        "host=127.0.0.1 port={server_port} dbname={} user={} password={}",
        PostgresServer::DATABASE,
        PostgresServer::USER,
        PostgresServer::PASSWORD
    );
    let databases: String = PoolMode::ALL
        .iter()
        .map(|mode| {
            // Session pooling pins a server connection per client: the default 20 would cap
            // the connected clients at 20.
            let pool_size = match mode {
                PoolMode::Session => format!(" pool_size={SESSION_POOL_SIZE}"),
                PoolMode::Transaction | PoolMode::Statement => String::new(),
            };
            format!("{mode} = {server} pool_mode={mode}{pool_size}\n")
        })
        .collect();
    // `unix_socket_dir` empty: TCP only. `server_reset_query` runs in session mode only
    // (`server_reset_query_always = 0`, PgBouncer's default). `ignore_startup_parameters`:
    // drivers send these, and PgBouncer refuses a login with a parameter it does not know.
    // `server_login_retry = 1`: a failed server login (PostgreSQL still starting, or
    // restarted by a test) blocks the pool for only a second. The log also goes to stderr,
    // i.e. `server.log`.
    format!(
        "\
[databases]
{databases}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
max_client_conn = 2000
default_pool_size = {TRANSACTION_POOL_SIZE}
server_reset_query = DISCARD ALL
server_reset_query_always = 0
ignore_startup_parameters = extra_float_digits,options
server_login_retry = 1
query_wait_timeout = 30
logfile = {}
",
        dir.join("pgbouncer.log").display()
    )
}

/// A real login through the `transaction` alias, which reaches PostgreSQL; simple protocol
/// only, as transaction pooling breaks named prepared statements.
fn probe(port: u16) -> Result<(), String> {
    let mut client = Config::new()
        .host("127.0.0.1")
        .port(port)
        .user(PostgresServer::USER)
        .password(PostgresServer::PASSWORD)
        .dbname(PoolMode::Transaction.alias())
        .connect_timeout(PROBE_TIMEOUT)
        .connect(NoTls)
        .map_err(|error| error.to_string())?;
    client.simple_query("SELECT 1").map_err(|error| error.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use postgres::{Client, SimpleQueryMessage};

    use super::*;

    fn connect(base: &str, mode: PoolMode) -> Client {
        Client::connect(&format!("{base}{mode}"), NoTls).unwrap_or_else(|error| panic!("{mode}: {error}"))
    }

    /// The backend pid serving `client`'s next statement.
    fn backend_pid(client: &mut Client) -> String {
        let messages = client.simple_query("SELECT pg_backend_pid()").expect("SELECT pg_backend_pid()");
        messages
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .expect("a row")
    }

    #[test]
    fn each_alias_pools_in_its_mode() {
        let pgbouncer = shared::pgbouncer().expect("the shared PgBouncer");
        let base = pgbouncer.address();
        assert!(base.ends_with('/'), "{base}");

        // Transaction pooling: an idle server connection serves the next client's transaction
        // (last used first), even while the first client stays connected.
        let (mut first, mut second) =
            (connect(base, PoolMode::Transaction), connect(base, PoolMode::Transaction));
        assert_eq!(backend_pid(&mut first), backend_pid(&mut second));

        // Session pooling: each connected client has a server connection of its own.
        let (mut first, mut second) = (connect(base, PoolMode::Session), connect(base, PoolMode::Session));
        assert_ne!(backend_pid(&mut first), backend_pid(&mut second));

        // Statement pooling: PgBouncer closes a client whose statement opens a transaction. It
        // sends a FATAL first, which the client reads or not depending on whether the close
        // overtakes it; its log says why either way.
        let mut statement = connect(base, PoolMode::Statement);
        statement.simple_query("SELECT 1").expect("a single statement");
        let error = statement.simple_query("BEGIN").expect_err("a transaction block");
        let refusal = "transaction blocks not allowed in statement pooling mode";
        let told = error.as_db_error().is_some_and(|db| db.message().contains(refusal));
        assert!(error.is_closed() || told, "{error:?}");
        let log = fs::read_to_string(pgbouncer.process().expect("a started PgBouncer").log_path())
            .expect("PgBouncer's log");
        assert!(log.contains(refusal), "{log}");
    }
}
