//! Throwaway MariaDB servers: `mariadb-install-db` into a temp dir, then `mariadbd`; in
//! plaintext, or TLS-only ([`MariaDbServer::start_tls`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql::prelude::Queryable as _;
use mysql::{Conn, OptsBuilder, SslOpts};
use nix::unistd::Uid;

use super::binaries::{self, MARIADBD, MARIADB_INSTALL_DB};
use super::command::CommandSpec;
use super::process::Readiness;
use super::tls::{url_path, TestCa};
use super::{dirs, ports, HarnessError, ServerKind, ServerProcess, TestDeployment, TestServer};

const KIND: ServerKind = ServerKind::MariaDb;

/// How long `mariadbd` may take to accept a login (InnoDB recovery after a kill included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `mariadb-install-db` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Connect and read timeout of each readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Server options shared by `mariadb-install-db` (which passes them on to its bootstrap
/// server) and `mariadbd`, so both agree on the InnoDB files.
const INNODB_OPTIONS: [&str; 4] = [
    // The default redo log is 96 MiB per server; tests need a sliver.
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=32M",
    // Native AIO contexts are a scarce system-wide resource (aio-max-nr) in containers.
    "--innodb-use-native-aio=0",
    "--innodb-flush-log-at-trx-commit=2",
];

/// A private MariaDB server on a free loopback port, with database
/// [`DATABASE`](Self::DATABASE) and a password-protected user [`USER`](Self::USER) that has
/// every privilege on it.
///
/// Grants are real (no `--skip-grant-tables`), so a wrong password is rejected. `root` has no
/// password and may log in over TCP from 127.0.0.1 ([`root_url`](Self::root_url)), for
/// administration such as killing other users' connections.
///
/// A server from [`start_tls`](Self::start_tls) speaks TLS only, with [`TestCa::shared`]'s
/// server certificate (for `127.0.0.1` only): `require_secure_transport=ON` refuses every
/// plaintext TCP login; its [`url`](Self::url) says `ssl-mode=VERIFY_IDENTITY` and names the
/// CA.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct MariaDbServer {
    process: ServerProcess,
    /// The CA certificate to trust, for a TLS-only server.
    ca: Option<PathBuf>,
}

impl MariaDbServer {
    /// The server's `max_connections`: room for a client holding 1,000 session locks (a
    /// connection each) while the 1,000 sessions of the one before are still ending, beside the
    /// rest of a test binary (with 1,200, a second 1,000-hold run's connects timed out).
    pub const MAX_CONNECTIONS: u32 = 2_500;
    /// The user that [`url`](Self::url) logs in as.
    pub const USER: &'static str = "distlock";
    /// [`USER`](Self::USER)'s password.
    pub const PASSWORD: &'static str = "distlock";
    /// The database created for tests.
    pub const DATABASE: &'static str = "distlock";
    /// A TLS-only server's user that must present a client certificate signed by the test CA
    /// (`REQUIRE X509`; no password), with every privilege on [`DATABASE`](Self::DATABASE).
    pub const CERT_USER: &'static str = TestCa::CLIENT_NAME;

    /// Runs `mariadb-install-db`, starts `mariadbd` and creates the database and user.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without MariaDB; [`HarnessError::Setup`] if installing
    /// the system tables or creating the database or user fails; [`HarnessError::Exited`] or
    /// [`HarnessError::NotReady`] (with the log's tail) if the server does not come up;
    /// [`HarnessError::Io`] for temp dir and process failures.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(None)
    }

    /// Like [`start`](Self::start), a TLS-only server (see the type's docs), which also has
    /// the user [`CERT_USER`](Self::CERT_USER). It is ready once a login over TLS, verifying
    /// its certificate against the test CA, succeeds.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`HarnessError::Io`] when the test CA cannot be made.
    pub fn start_tls() -> Result<Self, HarnessError> {
        Self::start_with(Some(TestCa::shared()?))
    }

    fn start_with(ca: Option<&'static TestCa>) -> Result<Self, HarnessError> {
        let install_db = binaries::find(&MARIADB_INSTALL_DB)?;
        let mariadbd = binaries::find(&MARIADBD)?;
        ports::retry_on_port_in_use(|| Self::start_once(&install_db, &mariadbd, ca))
    }

    fn start_once(
        install_db: &Path,
        mariadbd: &Path,
        ca: Option<&'static TestCa>,
    ) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let data = dir.path().join("data");
        // mariadbd refuses to run as root unless told to, and then keeps root's files.
        let as_root = Uid::effective().is_root().then_some("--user=root");

        // `--no-defaults` must come first: no /etc/mysql config may leak in. The bootstrap
        // server's temp tables go to its own dir: in the shared /tmp, concurrent installs removed
        // each other's (`Unknown table 'mysql.tmp_user_sys'`, 4 of 12 parallel installs here).
        CommandSpec::new(install_db)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", dir.path().display()))
            // Passwordless root over TCP instead of unix_socket authentication only.
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .args(as_root)
            .args(INNODB_OPTIONS)
            .current_dir(dir.path())
            .run(KIND, "mariadb-install-db", &dir.path().join("install.log"), INSTALL_TIMEOUT)?;

        let mut tls_options = Vec::new();
        if let Some(ca) = ca {
            // mariadbd runs as the current account (root with `--user=root`).
            let files = ca.install_server_files(dir.path(), None)?;
            tls_options.push(format!("--ssl-cert={}", files.cert.display()));
            tls_options.push(format!("--ssl-key={}", files.key.display()));
            tls_options.push(format!("--ssl-ca={}", files.ca.display()));
            tls_options.push("--require-secure-transport=ON".to_owned());
        }

        let port = ports::free_port()?;
        let command = CommandSpec::new(mariadbd)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("mariadbd.sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("mariadbd.pid").display()))
            .arg(format!("--tmpdir={}", dir.path().display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .arg(format!("--max-connections={}", Self::MAX_CONNECTIONS))
            .args(as_root)
            .args(INNODB_OPTIONS)
            .args(&tls_options)
            .current_dir(dir.path());
        let ca_cert = ca.map(TestCa::ca_cert);
        let probe_ca = ca_cert.clone();
        let readiness =
            Readiness { probe: Box::new(move || probe(port, probe_ca.as_deref())), timeout: READY_TIMEOUT };
        let process = ServerProcess::start(KIND, dir, port, command, readiness)?;

        let mut root = connect(port, "root", None, ca_cert.as_deref())
            .map_err(|error| setup_error("connecting as root", &error))?;
        let (user, password, database) = (Self::USER, Self::PASSWORD, Self::DATABASE);
        let mut setup = vec![
            format!("CREATE DATABASE {database}"),
            // '%' matches every client host; with --skip-name-resolve that is 127.0.0.1.
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"),
            format!("GRANT ALL PRIVILEGES ON {database}.* TO '{user}'@'%'"),
        ];
        if ca.is_some() {
            let cert_user = Self::CERT_USER;
            setup.push(format!("CREATE USER '{cert_user}'@'%' REQUIRE X509"));
            setup.push(format!("GRANT ALL PRIVILEGES ON {database}.* TO '{cert_user}'@'%'"));
        }
        for statement in setup {
            root.query_drop(&statement).map_err(|error| setup_error(&statement, &error))?;
        }
        Ok(MariaDbServer { process, ca: ca_cert })
    }

    /// `mysql://distlock:distlock@127.0.0.1:PORT/distlock`; for a TLS-only server followed by
    /// `?ssl-mode=VERIFY_IDENTITY&ssl-ca=CA` (the MySQL client's parameters, which lock-sql
    /// takes; the `mysql` driver itself does not).
    pub fn url(&self) -> String {
        let url =
            format!("mysql://{}:{}@127.0.0.1:{}/{}", Self::USER, Self::PASSWORD, self.port(), Self::DATABASE);
        url + &self.tls_parameters()
    }

    /// `mysql://root@127.0.0.1:PORT/distlock`: the passwordless superuser (with the TLS
    /// parameters of [`url`](Self::url) for a TLS-only server).
    pub fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{}{}", self.port(), Self::DATABASE, self.tls_parameters())
    }

    /// A TLS-only server's URL for [`CERT_USER`](Self::CERT_USER), with `ssl-cert` and `ssl-key`
    /// naming the test CA's client certificate; `None` for a plaintext server.
    pub fn cert_url(&self) -> Option<String> {
        self.ca.as_ref()?;
        let ca = TestCa::shared().ok()?;
        Some(format!(
            "mysql://{}@127.0.0.1:{}/{}{}&ssl-cert={}&ssl-key={}",
            Self::CERT_USER,
            self.port(),
            Self::DATABASE,
            self.tls_parameters(),
            url_path(&ca.client_cert()),
            url_path(&ca.client_key()),
        ))
    }

    /// `?ssl-mode=VERIFY_IDENTITY&ssl-ca=CA` for a TLS-only server, else nothing.
    fn tls_parameters(&self) -> String {
        self.ca
            .as_ref()
            .map_or_else(String::new, |ca| format!("?ssl-mode=VERIFY_IDENTITY&ssl-ca={}", url_path(ca)))
    }

    /// Whether the server speaks TLS only ([`start_tls`](Self::start_tls)).
    pub fn is_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The server's process, for fault injection.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestDeployment for MariaDbServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        MariaDbServer::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

impl TestServer for MariaDbServer {
    fn process(&self) -> &ServerProcess {
        MariaDbServer::process(self)
    }
}

/// A real login over TCP (over TLS, checking the server's certificate and name against `ca`,
/// for a TLS-only server).
fn probe(port: u16, ca: Option<&Path>) -> Result<(), String> {
    let mut root = connect(port, "root", None, ca).map_err(|error| error.to_string())?;
    root.query_drop("SELECT 1").map_err(|error| error.to_string())
}

fn connect(port: u16, user: &str, password: Option<&str>, ca: Option<&Path>) -> Result<Conn, mysql::Error> {
    if ca.is_some() {
        // The driver builds its rustls config on the process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let ssl = ca.map(|ca| SslOpts::default().with_root_cert_path(Some(ca.to_path_buf())));
    let options = OptsBuilder::new()
        .ssl_opts(ssl)
        .ip_or_hostname(Some("127.0.0.1"))
        .tcp_port(port)
        .user(Some(user))
        .pass(password)
        // Stay on TCP; by default the client switches to the server's unix socket.
        .prefer_socket(false)
        .tcp_connect_timeout(Some(PROBE_TIMEOUT))
        .read_timeout(Some(PROBE_TIMEOUT));
    Conn::new(options)
}

fn setup_error(step: &str, error: &mysql::Error) -> HarnessError {
    HarnessError::Setup { kind: KIND, step: step.to_owned(), detail: error.to_string() }
}
