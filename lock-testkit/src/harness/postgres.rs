//! Throwaway PostgreSQL servers: `initdb` into a temp dir, then `postgres` on a free port; in
//! plaintext, or TLS-only ([`PostgresServer::start_tls`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{chown, Uid, User};
use postgres::config::SslMode;
use postgres::{Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::binaries;
use super::command::{CommandSpec, RunAs};
use super::process::Readiness;
use super::tls::{url_path, TestCa};
use super::{dirs, ports, HarnessError, ServerKind, ServerProcess, TestDeployment, TestServer};

const KIND: ServerKind = ServerKind::Postgres;

/// How long `postgres` may take to accept a login.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long `initdb` may take.
const INITDB_TIMEOUT: Duration = Duration::from_secs(120);

/// Connect timeout of each readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Accounts to run PostgreSQL (and PgBouncer) as when the tests run as root, which both refuse.
const UNPRIVILEGED_ACCOUNTS: [&str; 2] = ["postgres", "nobody"];

/// A private PostgreSQL server on a free loopback port, with database
/// [`DATABASE`](Self::DATABASE) and a password-protected superuser [`USER`](Self::USER).
///
/// TCP logins need the password (`scram-sha-256`), so tests can check that a wrong one is
/// rejected. Durability is off (`fsync`, `synchronous_commit`, `full_page_writes`) since the
/// data is thrown away ([`start_durable`](Self::start_durable) keeps `synchronous_commit`); `max_connections` is [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS).
///
/// A server from [`start_tls`](Self::start_tls) speaks TLS only, with [`TestCa::shared`]'s
/// server certificate (for `127.0.0.1` only): `pg_hba.conf` lets TCP logins in over TLS
/// (`hostssl`) and rejects every plaintext one (`hostnossl … reject`); its [`url`](Self::url)
/// says `sslmode=verify-full` and names the CA.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct PostgresServer {
    process: ServerProcess,
    /// The CA certificate to trust, for a TLS-only server.
    ca: Option<PathBuf>,
}

/// A TLS-only server's `pg_hba.conf`: the certificate user by certificate, everyone else by
/// password over TLS, plaintext TCP refused; local (socket) logins trusted, as `initdb` had it.
const TLS_HBA: &str = "\
local     all  all              trust
hostssl   all  distlock-client  127.0.0.1/32  cert
hostssl   all  all              127.0.0.1/32  scram-sha-256
hostnossl all  all              0.0.0.0/0     reject
";

impl PostgresServer {
    /// The server's `max_connections`: room for a client holding 1,000 session locks (a
    /// connection each) while the 1,000 sessions of the one before are still ending, beside the
    /// rest of a test binary (with 1,200, a second 1,000-hold run's connects timed out).
    pub const MAX_CONNECTIONS: u32 = 2_500;
    /// The superuser that [`url`](Self::url) logs in as.
    pub const USER: &'static str = "distlock";
    /// [`USER`](Self::USER)'s password.
    pub const PASSWORD: &'static str = "distlock";
    /// The database created for tests.
    pub const DATABASE: &'static str = "distlock";
    /// A TLS-only server's superuser that logs in with [`TestCa::shared`]'s client certificate
    /// (`cert` authentication: no password; the certificate's name is the user's).
    pub const CERT_USER: &'static str = TestCa::CLIENT_NAME;

    /// Runs `initdb`, starts `postgres` (as an unprivileged account when run as root) and
    /// creates [`DATABASE`](Self::DATABASE).
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without PostgreSQL; [`HarnessError::Setup`] if `initdb`
    /// or creating the database fails, or there is no account to run as;
    /// [`HarnessError::Exited`] or [`HarnessError::NotReady`] (with the log's tail) if the
    /// server does not come up; [`HarnessError::Io`] for temp dir and process failures.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(None, false)
    }

    /// Like [`start`](Self::start), with `synchronous_commit` on: a commit is acknowledged once
    /// its WAL is written, so it survives a kill of the server's processes (with `fsync` still
    /// off, not a crash of the machine). For tests that restart the server and count on what it
    /// committed.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_durable() -> Result<Self, HarnessError> {
        Self::start_with(None, true)
    }

    /// Like [`start`](Self::start), a TLS-only server (see the type's docs), which also has
    /// the login [`CERT_USER`](Self::CERT_USER). It is ready once a login over TLS, verifying
    /// its certificate against the test CA, succeeds.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`HarnessError::Io`] when the test CA cannot be made.
    pub fn start_tls() -> Result<Self, HarnessError> {
        Self::start_with(Some(TestCa::shared()?), false)
    }

    fn start_with(ca: Option<&'static TestCa>, durable: bool) -> Result<Self, HarnessError> {
        let initdb = binaries::find_postgres("initdb")?;
        let postgres = binaries::sibling(&initdb, "postgres", "postgresql")?;
        let account = unprivileged_account(KIND)?;
        ports::retry_on_port_in_use(|| Self::start_once(&initdb, &postgres, account, ca, durable))
    }

    fn start_once(
        initdb: &Path,
        postgres: &Path,
        account: Option<RunAs>,
        ca: Option<&'static TestCa>,
        durable: bool,
    ) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let data = dir.path().join("data");
        let password_file = dir.path().join("password");
        fs::write(&password_file, Self::PASSWORD)
            .map_err(|source| HarnessError::io("writing PostgreSQL's password file", source))?;
        if let Some(account) = account {
            // The temp dir is root's and private; the server's account must own it.
            for path in [dir.path(), &password_file] {
                chown(path, Some(account.uid), Some(account.gid)).map_err(|errno| {
                    HarnessError::io(format!("handing {path:?} to uid {}", account.uid), errno.into())
                })?;
            }
        }

        CommandSpec::new(initdb)
            .arg("--pgdata")
            .arg(&data)
            .args(["--username", Self::USER])
            .arg("--pwfile")
            .arg(&password_file)
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .args(["--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            .current_dir(dir.path())
            .run_as(account)
            .run(KIND, "initdb", &dir.path().join("initdb.log"), INITDB_TIMEOUT)?;

        let mut tls_settings = Vec::new();
        if let Some(ca) = ca {
            let files = ca.install_server_files(dir.path(), account)?;
            // Overwritten in place: the file keeps its owner, the server's account.
            let hba = data.join("pg_hba.conf");
            fs::write(&hba, TLS_HBA)
                .map_err(|source| HarnessError::io(format!("writing {hba:?}"), source))?;
            tls_settings.push(("ssl", "on".to_owned()));
            for (name, path) in
                [("ssl_cert_file", &files.cert), ("ssl_key_file", &files.key), ("ssl_ca_file", &files.ca)]
            {
                tls_settings.push((name, path.display().to_string()));
            }
        }

        let port = ports::free_port()?;
        let setting =
            |name: &str, value: &dyn std::fmt::Display| ["-c".to_owned(), format!("{name}={value}")];
        let command = CommandSpec::new(postgres)
            .arg("-D")
            .arg(&data)
            .args(["-p".to_owned(), port.to_string()])
            .args(setting("listen_addresses", &"127.0.0.1"))
            .args(setting("unix_socket_directories", &dir.path().display()))
            .args(setting("max_connections", &Self::MAX_CONNECTIONS))
            .args(setting("shared_buffers", &"32MB"))
            .args(setting("fsync", &"off"))
            .args(setting("synchronous_commit", if durable { &"on" } else { &"off" }))
            .args(setting("full_page_writes", &"off"))
            .args(tls_settings.iter().flat_map(|(name, value)| setting(name, value)))
            .current_dir(dir.path())
            .run_as(account);
        let tls = ca.map(|ca| ca.rustls_client_config().map(MakeRustlsConnect::new)).transpose()?;
        let probe_tls = tls.clone();
        let readiness =
            Readiness { probe: Box::new(move || probe(port, probe_tls.as_ref())), timeout: READY_TIMEOUT };
        let process = ServerProcess::start(KIND, dir, port, command, readiness)?;

        let mut admin =
            connect(port, "postgres", tls.as_ref()).map_err(|error| setup_error("connecting", &error))?;
        let mut setup = vec![format!("CREATE DATABASE {}", Self::DATABASE)];
        if ca.is_some() {
            setup.push(format!("CREATE ROLE \"{}\" LOGIN SUPERUSER", Self::CERT_USER));
        }
        for statement in setup {
            admin.batch_execute(&statement).map_err(|error| setup_error(&statement, &error))?;
        }
        Ok(PostgresServer { process, ca: ca.map(TestCa::ca_cert) })
    }

    /// `postgres://distlock:distlock@127.0.0.1:PORT/distlock`; for a TLS-only server followed
    /// by `?sslmode=verify-full&sslrootcert=CA` (libpq's parameters, which lock-sql takes).
    pub fn url(&self) -> String {
        let url = format!(
            "postgres://{}:{}@127.0.0.1:{}/{}",
            Self::USER,
            Self::PASSWORD,
            self.port(),
            Self::DATABASE
        );
        url + &self.tls_parameters()
    }

    /// A TLS-only server's URL for [`CERT_USER`](Self::CERT_USER), with `sslcert` and `sslkey`
    /// naming the test CA's client certificate; `None` for a plaintext server.
    pub fn cert_url(&self) -> Option<String> {
        self.ca.as_ref()?;
        let ca = TestCa::shared().ok()?;
        Some(format!(
            "postgres://{}@127.0.0.1:{}/{}{}&sslcert={}&sslkey={}",
            Self::CERT_USER,
            self.port(),
            Self::DATABASE,
            self.tls_parameters(),
            url_path(&ca.client_cert()),
            url_path(&ca.client_key()),
        ))
    }

    /// `?sslmode=verify-full&sslrootcert=CA` for a TLS-only server, else nothing.
    fn tls_parameters(&self) -> String {
        self.ca
            .as_ref()
            .map_or_else(String::new, |ca| format!("?sslmode=verify-full&sslrootcert={}", url_path(ca)))
    }

    /// Whether the server speaks TLS only ([`start_tls`](Self::start_tls)).
    pub fn is_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The server's process (the postmaster), for fault injection. Its controls act on the
    /// backends too.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestDeployment for PostgresServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        PostgresServer::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

impl TestServer for PostgresServer {
    fn process(&self) -> &ServerProcess {
        PostgresServer::process(self)
    }
}

/// The account to run `kind`'s server as: none (the current one) unless running as root, which
/// PostgreSQL and PgBouncer both refuse.
pub(crate) fn unprivileged_account(kind: ServerKind) -> Result<Option<RunAs>, HarnessError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    UNPRIVILEGED_ACCOUNTS
        .iter()
        .find_map(|name| User::from_name(name).ok().flatten())
        .map(|user| Some(RunAs { uid: user.uid, gid: user.gid }))
        .ok_or_else(|| HarnessError::Setup {
            kind,
            step: "choosing an account".into(),
            detail: format!(
                "{kind} refuses to run as root and none of the accounts {UNPRIVILEGED_ACCOUNTS:?} exists"
            ),
        })
}

/// A real login with the password over TCP (over TLS with `tls`, which checks the server's
/// certificate against the test CA, for a TLS-only server).
fn probe(port: u16, tls: Option<&MakeRustlsConnect>) -> Result<(), String> {
    let mut client = connect(port, "postgres", tls).map_err(|error| error.to_string())?;
    client.simple_query("SELECT 1").map_err(|error| error.to_string())?;
    Ok(())
}

fn connect(port: u16, database: &str, tls: Option<&MakeRustlsConnect>) -> Result<Client, postgres::Error> {
    let mut config = Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(PostgresServer::USER)
        .password(PostgresServer::PASSWORD)
        .dbname(database)
        .connect_timeout(PROBE_TIMEOUT);
    match tls {
        None => config.connect(NoTls),
        Some(tls) => config.ssl_mode(SslMode::Require).connect(tls.clone()),
    }
}

fn setup_error(step: &str, error: &postgres::Error) -> HarnessError {
    HarnessError::Setup { kind: KIND, step: step.to_owned(), detail: error.to_string() }
}
