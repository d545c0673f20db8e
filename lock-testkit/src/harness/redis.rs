//! Throwaway `redis-server`s: standalone, replica, or several independent nodes for Redlock;
//! also the data nodes of [`RedisCluster`](super::RedisCluster) and
//! [`RedisSentinelGroup`](super::RedisSentinelGroup).

use std::path::Path;
use std::time::Duration;

use super::binaries::{self, REDIS_SERVER};
use super::command::CommandSpec;
use super::process::Readiness;
use super::resp::{Connection, Reply, PROBE_TIMEOUT};
use super::{dirs, ports, HarnessError, ServerKind, ServerProcess, TestCa, TestDeployment, TestServer};

const KIND: ServerKind = ServerKind::Redis;

/// How long a Redis server may take to answer `PING` (and, for a replica, to sync).
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A cluster node's `cluster-node-timeout`, in ms: how long a node may be unreachable before
/// its peers count it as failing. Short, so that a failover takes seconds; long enough that a
/// busy two-core machine does not fail nodes over on its own.
const CLUSTER_NODE_TIMEOUT_MS: u32 = 1000;

/// How to start a [`RedisServer`]. Every option defaults to what
/// [`RedisServer::start`] uses.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    password: Option<String>,
    primary: Option<Primary>,
    /// A replica is ready once it answers `PING`, without waiting for its replication link.
    /// For deployments whose failovers re-point replicas: a restart (which repeats
    /// `--replicaof` with the first primary) must not wait for a primary that may be gone.
    /// The deployment waits for the links itself when it starts.
    ready_without_link: bool,
    /// Cluster mode (`--cluster-enabled yes`), with this cluster bus port.
    cluster_bus_port: Option<u16>,
    /// TLS only, with the shared [`TestCa`]'s server certificate.
    tls: Option<ClientCertificates>,
}

/// Whether a TLS server asks clients for a certificate (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientCertificates {
    /// `optional`: a client may present one (checked against the CA if it does).
    Optional,
    /// `yes`: a client without one is refused.
    Required,
}

/// The server a replica copies.
#[derive(Debug, Clone)]
struct Primary {
    port: u16,
    password: Option<String>,
}

impl RedisOptions {
    /// The defaults: no password, not a replica.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires clients to authenticate with `password` (`requirepass`), so tests can check
    /// that a wrong one is rejected. [`RedisServer::url`] then carries it. Defaults to none.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Serves TLS only (`--port 0 --tls-port PORT`), with the server certificate of
    /// [`TestCa::shared`] (valid for `127.0.0.1` only); clients may present a certificate of
    /// that CA (`--tls-auth-clients optional`). [`RedisServer::url`] is then
    /// `rediss://127.0.0.1:PORT/?cacert=<the CA's file>`. For standalone servers: the harness's
    /// replicas, cluster nodes and sentinels speak plaintext. Defaults to plaintext only.
    pub fn tls(mut self) -> Self {
        self.tls = Some(ClientCertificates::Optional);
        self
    }

    /// As [`tls`](Self::tls), refusing clients that present no certificate of the test CA
    /// (`--tls-auth-clients yes`).
    pub fn tls_requiring_client_certificates(mut self) -> Self {
        self.tls = Some(ClientCertificates::Required);
        self
    }
}

/// A private `redis-server` on a free loopback port, without persistence (`--save ""`,
/// `--appendonly no`): a [`kill9`](ServerProcess::kill9) and restart loses every key.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct RedisServer {
    process: ServerProcess,
    password: Option<String>,
    /// The CA whose certificate the server presents, for a TLS-only server.
    tls: Option<&'static TestCa>,
}

impl RedisServer {
    /// Starts a server with default options.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; otherwise see
    /// [`RedisServer::start_with`].
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions::new())
    }

    /// Starts a TLS-only server with default options otherwise ([`RedisOptions::tls`]).
    ///
    /// # Errors
    ///
    /// As for [`RedisServer::start_with`].
    pub fn start_tls() -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions::new().tls())
    }

    /// Starts a server with `options`, waiting until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; [`HarnessError::Exited`] or
    /// [`HarnessError::NotReady`] (with the log's tail) if it does not come up;
    /// [`HarnessError::Io`] if the temp dir or process cannot be created.
    pub fn start_with(options: RedisOptions) -> Result<Self, HarnessError> {
        let binary = binaries::find(&REDIS_SERVER)?;
        ports::retry_on_port_in_use(|| Self::start_once(&binary, &options, ports::free_port()?))
    }

    /// Starts a replica of `primary` (`--replicaof`), with the primary's password if it has
    /// one, and waits until the replication link is up, so writes to the primary reach it.
    ///
    /// # Errors
    ///
    /// As for [`RedisServer::start_with`].
    pub fn start_replica_of(primary: &RedisServer) -> Result<Self, HarnessError> {
        Self::start_with(Self::replica_options(primary))
    }

    /// Starts a replica of `primary` that is ready (at start and after a restart) once it
    /// answers `PING`; see [`RedisOptions::ready_without_link`].
    pub(crate) fn start_unlinked_replica_of(primary: &RedisServer) -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions { ready_without_link: true, ..Self::replica_options(primary) })
    }

    fn replica_options(primary: &RedisServer) -> RedisOptions {
        RedisOptions {
            password: primary.password.clone(),
            primary: Some(Primary { port: primary.port(), password: primary.password.clone() }),
            ..RedisOptions::new()
        }
    }

    /// Starts an empty cluster node (`--cluster-enabled yes`, config in `nodes.conf` in its
    /// dir, so a restart rejoins the cluster) on free client and bus ports, ready once it
    /// answers `PING`. [`RedisCluster`](super::RedisCluster) joins the nodes into a cluster.
    pub(crate) fn start_cluster_node() -> Result<Self, HarnessError> {
        let binary = binaries::find(&REDIS_SERVER)?;
        ports::retry_on_port_in_use(|| {
            // The default bus port, client port + 10000, may be taken or past 65535.
            let [port, bus_port] = ports::free_ports::<2>()?;
            let options = RedisOptions { cluster_bus_port: Some(bus_port), ..RedisOptions::new() };
            Self::start_once(&binary, &options, port)
        })
    }

    /// Starts `count` independent servers, as Redlock needs.
    ///
    /// # Errors
    ///
    /// As for [`RedisServer::start`]; servers started before a failure are stopped.
    pub fn start_many(count: usize) -> Result<Vec<Self>, HarnessError> {
        (0..count).map(|_| Self::start()).collect()
    }

    fn start_once(binary: &Path, options: &RedisOptions, port: u16) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let tls = options.tls.map(|_| TestCa::shared()).transpose()?;
        let port_text = port.to_string();
        let listen: &[&str] = match tls {
            None => &["--port", &port_text],
            // No plaintext port at all.
            Some(_) => &["--port", "0", "--tls-port", &port_text],
        };
        let mut command = CommandSpec::new(binary)
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Redis 7 waits 5 s by default before a diskless full sync to a new replica.
            .args(["--repl-diskless-sync-delay", "0"])
            .current_dir(dir.path());
        if let Some(password) = &options.password {
            command = command.args(["--requirepass", password]);
        }
        if let Some(primary) = &options.primary {
            command = command.args(["--replicaof", "127.0.0.1", &primary.port.to_string()]);
            if let Some(password) = &primary.password {
                command = command.args(["--masterauth", password]);
            }
        }
        if let (Some(ca), Some(clients)) = (tls, options.tls) {
            let files = ca.install_server_files(dir.path(), None)?;
            let auth_clients = match clients {
                ClientCertificates::Optional => "optional",
                ClientCertificates::Required => "yes",
            };
            command = command
                .arg("--tls-cert-file")
                .arg(&files.cert)
                .arg("--tls-key-file")
                .arg(&files.key)
                .arg("--tls-ca-cert-file")
                .arg(&files.ca)
                .args(["--tls-auth-clients", auth_clients]);
        }
        if let Some(bus_port) = options.cluster_bus_port {
            command = command
                .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                .args(["--cluster-port", &bus_port.to_string()])
                .args(["--cluster-node-timeout", &CLUSTER_NODE_TIMEOUT_MS.to_string()])
                // A replica may always take over, however long its link has been down.
                .args(["--cluster-replica-validity-factor", "0"]);
        }
        let probe_password = options.password.clone();
        let is_replica = options.primary.is_some() && !options.ready_without_link;
        let readiness = Readiness {
            probe: Box::new(move || probe(port, probe_password.as_deref(), is_replica, tls)),
            timeout: READY_TIMEOUT,
        };
        let process = ServerProcess::start(KIND, dir, port, command, readiness)?;
        Ok(RedisServer { process, password: options.password.clone(), tls })
    }

    /// `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/` with a password; for a
    /// TLS-only server `rediss://…/?cacert=<the test CA's file>`.
    pub fn url(&self) -> String {
        let userinfo = match &self.password {
            Some(password) => format!(":{}@", escape_userinfo(password)),
            None => String::new(),
        };
        match self.tls {
            Some(ca) => format!("rediss://{userinfo}127.0.0.1:{}/?{}", self.port(), ca.cacert_query()),
            None => format!("redis://{userinfo}127.0.0.1:{}/", self.port()),
        }
    }

    /// The test CA whose certificate a TLS-only server presents; `None` for a plaintext one.
    pub fn tls_ca(&self) -> Option<&'static TestCa> {
        self.tls
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The password clients must send, if the server was started with one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's process, for fault injection.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestDeployment for RedisServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        RedisServer::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

impl TestServer for RedisServer {
    fn process(&self) -> &ServerProcess {
        RedisServer::process(self)
    }
}

/// Ready when `PING` answers `PONG` (over TLS, trusting only the test CA, for a TLS-only
/// server) and, for a replica, the link to the primary is up.
fn probe(port: u16, password: Option<&str>, is_replica: bool, tls: Option<&TestCa>) -> Result<(), String> {
    let mut connection = match tls {
        Some(ca) => Connection::open_tls(port, PROBE_TIMEOUT, ca)?,
        None => Connection::open(port, PROBE_TIMEOUT)?,
    };
    if let Some(password) = password {
        connection.call(&["AUTH", password])?.expect_simple(&[]).map_err(|e| format!("AUTH answered {e}"))?;
    }
    match connection.call(&["PING"])? {
        Reply::Simple(pong) if pong == "PONG" => {}
        other => return Err(format!("PING answered {other:?}")),
    }
    if is_replica {
        let info = connection.request(&["INFO", "replication"])?.into_text()?;
        if !info.contains("master_link_status:up") {
            return Err("replica not yet linked to its primary".into());
        }
    }
    Ok(())
}

/// Percent-encodes everything but unreserved characters, for a password inside a URL.
fn escape_userinfo(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn a_taken_port_is_reported_as_port_in_use() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let binary = binaries::find(&REDIS_SERVER).unwrap();
        let error = RedisServer::start_once(&binary, &RedisOptions::new(), port).unwrap_err();
        assert!(error.is_port_in_use(), "{error:?}");
    }

    #[test]
    fn passwords_are_escaped_in_urls() {
        assert_eq!(escape_userinfo("plain-1.2_3~"), "plain-1.2_3~");
        assert_eq!(escape_userinfo("a@b:c/d%"), "a%40b%3Ac%2Fd%25");
    }
}
