//! Throwaway etcd servers: one node, optionally with auth enabled; also the members of an
//! [`EtcdCluster`](super::EtcdCluster). Probed over etcd's HTTP gateway with plain std sockets,
//! so the harness needs no etcd client crate.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::binaries::{self, ETCD, ETCDCTL};
use super::command::CommandSpec;
use super::process::Readiness;
use super::{dirs, ports, HarnessError, ServerKind, ServerProcess, TestDeployment, TestServer};

pub(crate) const KIND: ServerKind = ServerKind::Etcd;

/// How long etcd may take to answer `/health`; a cluster member needs a leader for that, and
/// several members starting at once on two cores are slow.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connect and read timeout of each HTTP request; etcd's `/health` itself waits up to 1 s for
/// a read through raft.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long each `etcdctl` setup step (adding the root user, enabling auth) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The file in a server's dir that receives the output of the `etcdctl` setup steps.
const SETUP_LOG: &str = "setup.log";

/// A single node's raft timing: etcd's defaults. A single node never holds another election
/// after it bootstraps, so a starved machine cannot make it lose its leadership; the short
/// election timeout keeps the minimum lease TTL at 2 s.
const SINGLE_NODE_TIMING: Timing = Timing { heartbeat_ms: 100, election_ms: 1000 };

/// The user that [`EtcdOptions::auth`] creates; etcd's auth needs a `root` user (with the
/// `root` role, which `etcdctl auth enable` grants).
const ROOT_USER: &str = "root";

/// The root user's password: URL-safe, so [`EtcdServer::url`] carries it unescaped.
const ROOT_PASSWORD: &str = "distlock-etcd-root";

/// A raft heartbeat interval and election timeout (`--heartbeat-interval`,
/// `--election-timeout`), in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    pub heartbeat_ms: u64,
    pub election_ms: u64,
}

impl Timing {
    /// The shortest lease TTL the server grants: etcd raises shorter ones to
    /// `ceil(((3 × election ticks) / 2) × heartbeat)` in whole seconds (`etcdserver/server.go`,
    /// `MinLeaseTTL`), where election ticks = election timeout / heartbeat, rounded down.
    pub const fn min_lease_ttl(self) -> Duration {
        let election_ticks = self.election_ms / self.heartbeat_ms;
        let min_ms = (3 * election_ticks / 2) * self.heartbeat_ms;
        Duration::from_secs(min_ms.div_ceil(1000))
    }
}

/// How to start an [`EtcdServer`]. Every option defaults to what [`EtcdServer::start`] uses.
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    auth: bool,
    /// `--auth-token-ttl`, in whole seconds.
    auth_token_ttl_secs: Option<u64>,
}

impl EtcdOptions {
    /// The defaults: no auth, etcd's token TTL.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enables auth once the server runs: `etcdctl user add root:<password>` and
    /// `etcdctl auth enable`, so tests can check that anonymous clients are refused.
    /// [`EtcdServer::url`] then carries the credentials and [`EtcdServer::etcdctl`] passes
    /// `--user`. Defaults to off.
    pub fn auth(mut self) -> Self {
        self.auth = true;
        self
    }

    /// How long an authenticated client's token lives without use (`--auth-token-ttl`, for
    /// etcd's default `simple` tokens: every use restarts it), in whole seconds, rounded up, at
    /// least 1 s. Short, e.g. 2 s, so tests can check that a client renews its token. Defaults
    /// to etcd's 300 s.
    pub fn auth_token_ttl(mut self, ttl: Duration) -> Self {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        self.auth_token_ttl_secs = Some(secs.max(1));
        self
    }
}

/// A private etcd on free loopback ports (client and peer) in its own dir, standalone from
/// [`EtcdServer::start`] or one member of an [`EtcdCluster`](super::EtcdCluster).
///
/// Writes are not fsynced (`--unsafe-no-fsync`): they survive a
/// [`kill9`](ServerProcess::kill9) (the kernel still has them) but not a machine crash. The log
/// (etcd's zap JSON lines) is `server.log` in its dir. The dir takes about 125 MB of disk while
/// the server lives: etcd preallocates its 64 MB WAL segments (the current one and the next),
/// and 3.4 has no flag to make them smaller.
///
/// A standalone server runs etcd's default raft timing (100 ms heartbeat, 1 s election timeout),
/// so lease TTLs under [`MIN_LEASE_TTL`](Self::MIN_LEASE_TTL) (2 s) are raised to it.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct EtcdServer {
    process: ServerProcess,
    /// Whether auth is enabled (with the root user and [`ROOT_PASSWORD`]).
    auth: bool,
    etcdctl: PathBuf,
}

impl EtcdServer {
    /// The shortest lease TTL a standalone server grants: shorter ones are raised to it.
    /// Members of an [`EtcdCluster`](super::EtcdCluster) have the cluster's
    /// [`MIN_LEASE_TTL`](super::EtcdCluster::MIN_LEASE_TTL).
    pub const MIN_LEASE_TTL: Duration = SINGLE_NODE_TIMING.min_lease_ttl();

    /// The user [`EtcdOptions::auth`] creates.
    pub const ROOT_USER: &'static str = ROOT_USER;

    /// The password of [`ROOT_USER`](Self::ROOT_USER).
    pub const ROOT_PASSWORD: &'static str = ROOT_PASSWORD;

    /// Starts a server without auth, waiting until it serves requests.
    ///
    /// # Errors
    ///
    /// As for [`EtcdServer::start_with`].
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(EtcdOptions::new())
    }

    /// Starts a server with auth enabled ([`EtcdOptions::auth`]).
    ///
    /// # Errors
    ///
    /// As for [`EtcdServer::start_with`].
    pub fn start_with_auth() -> Result<Self, HarnessError> {
        Self::start_with(EtcdOptions::new().auth())
    }

    /// Starts a server with `options`, ready when `GET /health` on its client port answers
    /// `{"health":"true"}` (it has elected itself and serves reads), then enables auth if asked.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `etcd` or `etcdctl`; [`HarnessError::Exited`] or
    /// [`HarnessError::NotReady`] (with the log's tail) if it does not come up;
    /// [`HarnessError::Setup`] if an `etcdctl` step enabling auth fails; [`HarnessError::Io`]
    /// for temp dir and process failures.
    pub fn start_with(options: EtcdOptions) -> Result<Self, HarnessError> {
        let binary = binaries::find(&ETCD)?;
        let etcdctl = binaries::find(&ETCDCTL)?;
        let server = ports::retry_on_port_in_use(|| {
            let [client_port, peer_port] = ports::free_ports::<2>()?;
            let initial_cluster = format!("{NAME}={}", peer_url(peer_port));
            let member = Member {
                name: NAME,
                client_port,
                peer_port,
                initial_cluster: &initial_cluster,
                cluster_token: &cluster_token(peer_port),
                timing: SINGLE_NODE_TIMING,
                auth_token_ttl_secs: options.auth_token_ttl_secs,
            };
            let server = Self::spawn_member(&binary, &etcdctl, &member)?;
            server.process.wait_ready()?;
            Ok(server)
        })?;
        if options.auth {
            server.enable_auth()?;
        }
        Ok(EtcdServer { auth: options.auth, ..server })
    }

    /// Spawns one member without waiting for it (a cluster's members need each other to become
    /// ready); see [`ServerProcess::wait_ready`].
    pub(crate) fn spawn_member(
        binary: &Path,
        etcdctl: &Path,
        member: &Member<'_>,
    ) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let command = member.command(binary, dir.path());
        let port = member.client_port;
        let readiness = Readiness { probe: Box::new(move || probe_health(port)), timeout: READY_TIMEOUT };
        let process = ServerProcess::spawn(KIND, dir, port, command, readiness)?;
        Ok(EtcdServer { process, auth: false, etcdctl: etcdctl.to_owned() })
    }

    /// Adds the root user and enables auth. On failure the dir stays, for the setup log.
    fn enable_auth(&self) -> Result<(), HarnessError> {
        let log = self.process.dir().join(SETUP_LOG);
        let etcdctl = CommandSpec::new(&self.etcdctl).arg(format!("--endpoints={}", self.endpoint()));
        let user = format!("{ROOT_USER}:{ROOT_PASSWORD}");
        // `auth enable` also creates the `root` role and grants it to the root user.
        let steps: [(&str, &[&str]); 2] = [
            ("etcdctl user add root", &["user", "add", &user]),
            ("etcdctl auth enable", &["auth", "enable"]),
        ];
        for (step, args) in steps {
            etcdctl
                .clone()
                .args(args.iter().copied())
                .run(KIND, step, &log, SETUP_TIMEOUT)
                .inspect_err(|_| self.process.keep_dir_after_drop())?;
        }
        Ok(())
    }

    /// `127.0.0.1:PORT`: the client endpoint, as etcd clients take it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The server as a distlock URL: `etcd://127.0.0.1:PORT`, or with auth
    /// `etcd://root:<password>@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        match self.credentials() {
            Some((user, password)) => format!("etcd://{user}:{password}@{}", self.endpoint()),
            None => format!("etcd://{}", self.endpoint()),
        }
    }

    /// The user and password clients must authenticate with, if auth is enabled.
    pub fn credentials(&self) -> Option<(&'static str, &'static str)> {
        self.auth.then_some((ROOT_USER, ROOT_PASSWORD))
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// `etcdctl` (API v3) aimed at this server (`--endpoints`), with `--user` if auth is
    /// enabled; add the command, e.g. `.args(["put", "k", "v"])`. Runs as an ordinary child of
    /// the test: short-lived, it is not tied to the harness's cleanup.
    pub fn etcdctl(&self) -> Command {
        etcdctl_command(&self.etcdctl, &self.endpoint(), self.auth)
    }

    /// The installed `etcdctl`.
    pub(crate) fn etcdctl_binary(&self) -> &Path {
        &self.etcdctl
    }

    /// The server's process, for fault injection. A [`restart`](ServerProcess::restart) keeps
    /// the data dir and ports; it returns once the server answers `/health` again, which for a
    /// cluster member means it sees a leader.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// What the server says about itself and its leader, or why it does not answer.
    pub(crate) fn status(&self) -> Result<MemberStatus, String> {
        status(self.port())
    }
}

impl TestDeployment for EtcdServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        EtcdServer::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

impl TestServer for EtcdServer {
    fn process(&self) -> &ServerProcess {
        EtcdServer::process(self)
    }
}

/// A standalone server's member name.
const NAME: &str = "n1";

/// One member's place: its name, ports and the cluster it bootstraps with.
pub(crate) struct Member<'a> {
    pub name: &'a str,
    pub client_port: u16,
    pub peer_port: u16,
    /// `--initial-cluster`: every member's `name=peer URL`, comma-separated.
    pub initial_cluster: &'a str,
    /// `--initial-cluster-token`: unique per cluster, so members of two test clusters never
    /// join each other even if one reaches a port the other used.
    pub cluster_token: &'a str,
    pub timing: Timing,
    pub auth_token_ttl_secs: Option<u64>,
}

impl Member<'_> {
    /// The command that runs this member with its data in `dir/data`. Every URL flag is given:
    /// the defaults bind the standard ports 2379 and 2380. A restart repeats the bootstrap
    /// flags, which etcd ignores once the data dir holds a member.
    fn command(&self, binary: &Path, dir: &Path) -> CommandSpec {
        let client_url = client_url(self.client_port);
        let peer_url = peer_url(self.peer_port);
        let mut command = CommandSpec::new(binary)
            .args(["--name", self.name])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", self.cluster_token])
            .args(["--heartbeat-interval", &self.timing.heartbeat_ms.to_string()])
            .args(["--election-timeout", &self.timing.election_ms.to_string()])
            // Nothing here must survive a machine crash, and fsyncs stall a loaded machine.
            .arg("--unsafe-no-fsync")
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .current_dir(dir);
        if let Some(secs) = self.auth_token_ttl_secs {
            command = command.args(["--auth-token-ttl", &secs.to_string()]);
        }
        command
    }
}

/// `http://127.0.0.1:PORT`, a member's client URL.
fn client_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// `http://127.0.0.1:PORT`, a member's peer URL.
pub(crate) fn peer_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// An `--initial-cluster-token` no other test cluster has: this process and a port it holds.
pub(crate) fn cluster_token(peer_port: u16) -> String {
    format!("distlock-{}-{peer_port}", std::process::id())
}

/// `etcdctl` for `endpoints` (comma-separated), as the root user if `auth`.
pub(crate) fn etcdctl_command(binary: &Path, endpoints: &str, auth: bool) -> Command {
    let mut command = Command::new(binary);
    command.env("ETCDCTL_API", "3").arg(format!("--endpoints={endpoints}"));
    if auth {
        command.arg(format!("--user={ROOT_USER}:{ROOT_PASSWORD}"));
    }
    command
}

/// Ready when `GET /health` answers `{"health":"true"}`: the member sees a leader and a read
/// through raft succeeded. Needs no credentials, with auth enabled too.
fn probe_health(port: u16) -> Result<(), String> {
    let (code, body) = http(port, "GET", "/health", "")?;
    let health: serde_json::Value =
        serde_json::from_str(&body).map_err(|_| format!("/health answered HTTP {code}: {body:?}"))?;
    match health.get("health").and_then(serde_json::Value::as_str) {
        Some("true") => Ok(()),
        _ => Err(format!("/health answered HTTP {code}: {}", body.trim())),
    }
}

/// A member's own id and the id of the leader it follows (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberStatus {
    pub member_id: u64,
    pub leader: u64,
}

/// Asks a member for its status: `POST /v3/maintenance/status` with `{}` (the gateway's JSON
/// carries 64-bit ids as strings). Needs no credentials.
fn status(port: u16) -> Result<MemberStatus, String> {
    let (code, body) = http(port, "POST", "/v3/maintenance/status", "{}")?;
    let status: serde_json::Value = serde_json::from_str(&body)
        .ok()
        .filter(|_| code == 200)
        .ok_or_else(|| format!("status answered HTTP {code}: {}", body.trim()))?;
    let id = |value: &serde_json::Value| match value {
        serde_json::Value::String(text) => text.parse().ok(),
        other => other.as_u64(),
    };
    let member_id = id(&status["header"]["member_id"])
        .ok_or_else(|| format!("status without a member id: {}", body.trim()))?;
    // The gateway leaves out zero values: no leader.
    let leader = status.get("leader").and_then(id).unwrap_or(0);
    Ok(MemberStatus { member_id, leader })
}

/// One HTTP/1.0 request to a member's client port (its gRPC gateway); returns the status code
/// and the body. HTTP/1.0, so the answer is never chunked and ends when the server closes.
/// Hand-written, like the other kinds' probes: the harness needs two requests, not an HTTP
/// client crate.
fn http(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| format!("{method} {path}: {e}"))?;
    let (head, body) =
        response.split_once("\r\n\r\n").ok_or_else(|| format!("{method} {path}: incomplete answer"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no HTTP status in {head:?}"))?;
    Ok((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn min_lease_ttl_follows_etcd_s_rounding() {
        // etcd's defaults: 15 ticks of 100 ms, rounded up to whole seconds.
        assert_eq!(SINGLE_NODE_TIMING.min_lease_ttl(), Duration::from_secs(2));
        assert_eq!(Timing { heartbeat_ms: 250, election_ms: 2500 }.min_lease_ttl(), Duration::from_secs(4));
        assert_eq!(Timing { heartbeat_ms: 200, election_ms: 2000 }.min_lease_ttl(), Duration::from_secs(3));
    }

    #[test]
    fn token_ttls_are_whole_seconds_rounded_up() {
        let secs = |ttl| EtcdOptions::new().auth_token_ttl(ttl).auth_token_ttl_secs;
        assert_eq!(secs(Duration::from_millis(1500)), Some(2));
        assert_eq!(secs(Duration::from_secs(2)), Some(2));
        assert_eq!(secs(Duration::ZERO), Some(1));
    }

    #[test]
    fn a_taken_port_is_reported_as_port_in_use() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client_port = taken.local_addr().unwrap().port();
        let peer_port = ports::free_port().unwrap();
        let initial_cluster = format!("{NAME}={}", peer_url(peer_port));
        let member = Member {
            name: NAME,
            client_port,
            peer_port,
            initial_cluster: &initial_cluster,
            cluster_token: &cluster_token(peer_port),
            timing: SINGLE_NODE_TIMING,
            auth_token_ttl_secs: None,
        };
        let binary = binaries::find(&ETCD).unwrap();
        let server = EtcdServer::spawn_member(&binary, &binary, &member).unwrap();
        let error = server.process.wait_ready().unwrap_err();
        assert!(error.is_port_in_use(), "{error:?}");
    }
}
