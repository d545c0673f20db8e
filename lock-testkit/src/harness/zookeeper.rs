//! Throwaway ZooKeeper servers: one standalone node, or an ensemble whose nodes can be killed.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::binaries::{self, JAVA, NETTY_CODEC_JAR, SLF4J_SIMPLE_JAR, ZOOKEEPER_JAR};
use super::command::CommandSpec;
use super::process::Readiness;
use super::{
    dirs, ports, tls_client, HarnessError, ServerKind, ServerProcess, TestCa, TestDeployment, TestServer,
};

const KIND: ServerKind = ServerKind::ZooKeeper;

/// How long a JVM may take to start ZooKeeper; several starting at once on two cores is slow.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a new ensemble may take to elect its first leader.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Connect and read timeout of each four-letter-word request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// ZooKeeper's tick, in ms: sessions, syncs and elections are multiples of it. Short, so that
/// elections and session expiries take a second or two rather than tens of seconds.
const TICK_MS: u32 = 200;

/// The JVM's options: a small heap, fast startup, and no `/tmp/hsperfdata_*` left behind.
const JVM_OPTIONS: [&str; 7] = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
];

const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// The connection factory that serves TLS (the default NIO one cannot).
const NETTY_FACTORY: &str = "org.apache.zookeeper.server.NettyServerCnxnFactory";

/// A TLS-only node's key and certificate chain, in one PEM file (ZooKeeper's PEM key store).
const KEY_STORE: &str = "server-keystore.pem";

/// Whether a TLS-only node asks clients for a certificate (`ssl.clientAuth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    /// `want`: a client may present one (checked against the CA if it does).
    Want,
    /// `need`: a client without one is refused.
    Need,
}

/// What a ZooKeeper node says it is (`srvr`'s `Mode:` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZooKeeperMode {
    /// A single node without an ensemble.
    Standalone,
    /// The ensemble's leader.
    Leader,
    /// A voting member following the leader.
    Follower,
    /// A non-voting member.
    Observer,
}

/// A private ZooKeeper node on free loopback ports: standalone from
/// [`ZooKeeperServer::start`], or one member of a [`ZooKeeperEnsemble`].
///
/// Four-letter words are all enabled (`ruok`, `srvr`, `stat`, …), the admin server is off,
/// the tick is 200 ms and the maximum session timeout 60 s.
///
/// A TLS-only node ([`start_tls`](Self::start_tls)) has a `secureClientPort` and no plaintext
/// client port; its four-letter words are answered over TLS.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct ZooKeeperServer {
    process: ServerProcess,
    /// The CA whose certificate a TLS-only node presents.
    tls: Option<&'static TestCa>,
}

impl ZooKeeperServer {
    /// Starts a standalone server, waiting until it serves requests.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `java` or ZooKeeper's jar;
    /// [`HarnessError::Exited`] or [`HarnessError::NotReady`] (with the log's tail) if it does
    /// not come up; [`HarnessError::Io`] for temp dir, file and process failures.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_standalone(None)
    }

    /// Starts a standalone TLS-only server: a `secureClientPort` (Netty) with the server
    /// certificate of [`TestCa::shared`] (valid for `127.0.0.1` only), no plaintext client port;
    /// clients may present a certificate of that CA (`ssl.clientAuth=want`). Ready when `srvr`,
    /// asked over TLS trusting only the test CA, reports a mode.
    ///
    /// # Errors
    ///
    /// As for [`ZooKeeperServer::start`], and [`HarnessError::MissingBinary`] without Netty's
    /// codec jar (`libnetty-java`).
    pub fn start_tls() -> Result<Self, HarnessError> {
        Self::start_standalone(Some(ClientAuth::Want))
    }

    /// As [`start_tls`](Self::start_tls), refusing clients that present no certificate of the
    /// test CA (`ssl.clientAuth=need`).
    ///
    /// # Errors
    ///
    /// As for [`ZooKeeperServer::start_tls`].
    pub fn start_tls_requiring_client_certificates() -> Result<Self, HarnessError> {
        Self::start_standalone(Some(ClientAuth::Need))
    }

    fn start_standalone(client_auth: Option<ClientAuth>) -> Result<Self, HarnessError> {
        let mut launcher = Launcher::find()?;
        let tls = match client_auth {
            Some(auth) => {
                launcher = launcher.with_netty()?;
                Some((TestCa::shared()?, auth))
            }
            None => None,
        };
        let ca = tls.map(|(ca, _)| ca);
        ports::retry_on_port_in_use(|| {
            let port = ports::free_port()?;
            let node = Node { client_port: port, id: None, servers: "", tls };
            let readiness =
                Readiness { probe: Box::new(move || probe_serving(port, ca)), timeout: READY_TIMEOUT };
            let dir = dirs::create(KIND)?;
            let command = launcher.command(dir.path(), &node)?;
            ServerProcess::start(KIND, dir, port, command, readiness)
        })
        .map(|process| ZooKeeperServer { process, tls: ca })
    }

    /// `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// The server as a lock-zk URL: `zk://127.0.0.1:PORT`, or for a TLS-only server
    /// `zk+tls://127.0.0.1:PORT/?cacert=<the test CA's file>`.
    pub fn url(&self) -> String {
        match self.tls {
            Some(ca) => format!("zk+tls://{}/?{}", self.connect_string(), ca.cacert_query()),
            None => format!("zk://{}", self.connect_string()),
        }
    }

    /// The test CA whose certificate a TLS-only server presents; `None` for a plaintext one.
    pub fn tls_ca(&self) -> Option<&'static TestCa> {
        self.tls
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// What the node says it is, or `None` if it does not answer or is not serving (down,
    /// paused, or without a quorum).
    pub fn mode(&self) -> Option<ZooKeeperMode> {
        let status = self.four_letter_word("srvr").ok()?;
        match status.lines().find_map(|line| line.strip_prefix("Mode: "))?.trim() {
            "standalone" => Some(ZooKeeperMode::Standalone),
            "leader" => Some(ZooKeeperMode::Leader),
            "follower" => Some(ZooKeeperMode::Follower),
            "observer" => Some(ZooKeeperMode::Observer),
            _ => None,
        }
    }

    /// Sends a four-letter word (`srvr`, `wchp`, `cons`, …) and returns the whole answer (over
    /// TLS to a TLS-only server).
    ///
    /// # Errors
    /// When the node cannot be reached or does not answer within a second.
    pub fn four_letter_word(&self, word: &str) -> Result<String, String> {
        four_letter_word(self.port(), word, self.tls)
    }

    /// The node's process, for fault injection. After a [`restart`](ServerProcess::restart)
    /// an ensemble member answers `ruok` but may not have rejoined yet; see
    /// [`ZooKeeperEnsemble::wait_for_leader`].
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestDeployment for ZooKeeperServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        ZooKeeperServer::start()
    }

    /// The connect string, or for a TLS-only server its [`url`](ZooKeeperServer::url).
    fn address(&self) -> String {
        match self.tls {
            Some(_) => self.url(),
            None => self.connect_string(),
        }
    }
}

impl TestServer for ZooKeeperServer {
    fn process(&self) -> &ServerProcess {
        ZooKeeperServer::process(self)
    }
}

/// A private ZooKeeper ensemble on loopback, each node its own process with its own ports
/// (client, quorum, election) and dir, so tests can kill, pause or restart single nodes.
#[derive(Debug)]
#[must_use = "the servers stop when this is dropped"]
pub struct ZooKeeperEnsemble {
    nodes: Vec<ZooKeeperServer>,
}

impl ZooKeeperEnsemble {
    /// Starts `size` nodes (use an odd number, e.g. 3) and waits until every one serves as
    /// leader or follower.
    ///
    /// # Errors
    ///
    /// As for [`ZooKeeperServer::start`], plus [`HarnessError::NoLeader`] if the election
    /// does not complete in time.
    ///
    /// # Panics
    ///
    /// If `size` is 0.
    pub fn start(size: usize) -> Result<Self, HarnessError> {
        assert!(size > 0, "a ZooKeeper ensemble needs at least one node");
        let launcher = Launcher::find()?;
        ports::retry_on_port_in_use(|| Self::start_once(&launcher, size))
    }

    fn start_once(launcher: &Launcher, size: usize) -> Result<Self, HarnessError> {
        let ports = (0..size).map(|_| ports::free_ports::<3>()).collect::<Result<Vec<_>, _>>()?;
        let mut servers = String::new();
        for (id, [_, quorum, election]) in (1..).zip(&ports) {
            // Writing to a String cannot fail.
            let _ = writeln!(servers, "server.{id}=127.0.0.1:{quorum}:{election}");
        }
        // Start every JVM before waiting for any: a node only elects once a quorum runs.
        let mut nodes = Vec::with_capacity(size);
        for (id, &[client_port, ..]) in (1..).zip(&ports) {
            let node = Node { client_port, id: Some(id), servers: &servers, tls: None };
            let readiness =
                Readiness { probe: Box::new(move || probe_alive(client_port)), timeout: READY_TIMEOUT };
            let dir = dirs::create(KIND)?;
            let command = launcher.command(dir.path(), &node)?;
            let process = ServerProcess::spawn(KIND, dir, client_port, command, readiness)?;
            nodes.push(ZooKeeperServer { process, tls: None });
        }
        for node in &nodes {
            node.process.wait_ready()?;
        }
        let ensemble = ZooKeeperEnsemble { nodes };
        let elected = ensemble.wait_for_modes(ELECTION_TIMEOUT, |modes| {
            modes.iter().all(|mode| matches!(mode, Some(ZooKeeperMode::Leader | ZooKeeperMode::Follower)))
        });
        let Err(error) = elected else {
            return Ok(ensemble);
        };
        for node in &ensemble.nodes {
            node.process.keep_dir_after_drop();
        }
        // A taken quorum or election port shows only in the log: that node runs but never joins.
        match ensemble.nodes.iter().find(|node| node.process.log_shows_port_in_use()) {
            Some(node) => Err(HarnessError::PortInUse {
                kind: KIND,
                port: node.port(),
                log: node.process.log_path().to_owned(),
                tail: node.process.log_tail(),
            }),
            None => Err(error),
        }
    }

    /// Every node's address, comma-separated: `127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn connect_string(&self) -> String {
        self.nodes.iter().map(ZooKeeperServer::connect_string).collect::<Vec<_>>().join(",")
    }

    /// The nodes, in the order of their ids (node `i` has `myid` `i + 1`).
    pub fn nodes(&self) -> &[ZooKeeperServer] {
        &self.nodes
    }

    /// The index of the node that says it leads, if one does now.
    pub fn leader(&self) -> Option<usize> {
        self.nodes.iter().position(|node| node.mode() == Some(ZooKeeperMode::Leader))
    }

    /// Waits until some node says it leads and returns its index. After killing the leader,
    /// this finds its successor: a dead node answers nothing.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoLeader`], with every node's mode, if no leader appears in `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, HarnessError> {
        let modes = self.wait_for_modes(timeout, |modes| modes.contains(&Some(ZooKeeperMode::Leader)))?;
        // The condition just held, so the position exists.
        Ok(modes.iter().position(|mode| *mode == Some(ZooKeeperMode::Leader)).unwrap_or_default())
    }

    /// Polls every node's mode until `done` accepts them; returns those modes.
    fn wait_for_modes(
        &self,
        timeout: Duration,
        done: impl Fn(&[Option<ZooKeeperMode>]) -> bool,
    ) -> Result<Vec<Option<ZooKeeperMode>>, HarnessError> {
        let started = Instant::now();
        loop {
            let modes: Vec<_> = self.nodes.iter().map(ZooKeeperServer::mode).collect();
            if done(&modes) {
                return Ok(modes);
            }
            if started.elapsed() >= timeout {
                let modes = modes
                    .iter()
                    .map(|mode| mode.map_or_else(|| "not serving".to_owned(), |mode| format!("{mode:?}")))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(HarnessError::NoLeader {
                    waited: started.elapsed(),
                    modes: format!("[{modes}]"),
                    logs: self.nodes.iter().map(|node| node.process.log_path().to_owned()).collect(),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One node's place: its client port and, in an ensemble, its id and the member list; for a
/// TLS-only node, the CA and whether it asks for client certificates.
struct Node<'a> {
    client_port: u16,
    id: Option<u32>,
    servers: &'a str,
    tls: Option<(&'static TestCa, ClientAuth)>,
}

/// The installed `java` and class path that run ZooKeeper.
struct Launcher {
    java: PathBuf,
    class_path: String,
}

impl Launcher {
    fn find() -> Result<Self, HarnessError> {
        let java = binaries::find(&JAVA)?;
        // The jar's manifest lists its dependencies, all from Debian packages.
        let mut class_path = binaries::find(&ZOOKEEPER_JAR)?.display().to_string();
        // Optional: without an SLF4J backend ZooKeeper runs but logs nothing.
        if let Ok(logger) = binaries::find(&SLF4J_SIMPLE_JAR) {
            class_path = format!("{class_path}:{}", logger.display());
        }
        Ok(Launcher { java, class_path })
    }

    /// The same launcher with Netty's codecs on the class path (a TLS port's needs).
    fn with_netty(mut self) -> Result<Self, HarnessError> {
        let codec = binaries::find(&NETTY_CODEC_JAR)?;
        self.class_path = format!("{}:{}", self.class_path, codec.display());
        Ok(self)
    }

    /// Writes `node`'s config (and `myid`) into `dir` and returns the command that runs it.
    fn command(&self, dir: &Path, node: &Node<'_>) -> Result<CommandSpec, HarnessError> {
        let data = dir.join("data");
        let config = dir.join("zoo.cfg");
        let write = |path: &Path, text: String| {
            fs::write(path, text).map_err(|source| HarnessError::io(format!("writing {path:?}"), source))
        };
        fs::create_dir(&data).map_err(|source| HarnessError::io(format!("creating {data:?}"), source))?;
        if let Some(id) = node.id {
            write(&data.join("myid"), format!("{id}\n"))?;
        }
        let listen = match node.tls {
            None => format!("clientPort={port}\nclientPortAddress=127.0.0.1\n", port = node.client_port),
            Some((ca, client_auth)) => {
                let files = ca.install_server_files(dir, None)?;
                // ZooKeeper's PEM key store is one file: the private key, then the chain.
                let read = |path: &Path| {
                    fs::read_to_string(path)
                        .map_err(|source| HarnessError::io(format!("reading {path:?}"), source))
                };
                let key_store = dir.join(KEY_STORE);
                write(&key_store, format!("{}{}", read(&files.key)?, read(&files.cert)?))?;
                fs::set_permissions(&key_store, fs::Permissions::from_mode(0o600)).map_err(|source| {
                    HarnessError::io(format!("setting the mode of {key_store:?}"), source)
                })?;
                let client_auth = match client_auth {
                    ClientAuth::Want => "want",
                    ClientAuth::Need => "need",
                };
                format!(
                    "secureClientPort={port}\n\
                     secureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory={NETTY_FACTORY}\n\
                     ssl.keyStore.location={key_store}\n\
                     ssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={trust_store}\n\
                     ssl.trustStore.type=PEM\n\
                     ssl.clientAuth={client_auth}\n",
                    port = node.client_port,
                    key_store = key_store.display(),
                    trust_store = files.ca.display(),
                )
            }
        };
        write(
            &config,
            format!(
                "tickTime={TICK_MS}\n\
                 initLimit=25\n\
                 syncLimit=10\n\
                 dataDir={data}\n\
                 {listen}\
                 maxClientCnxns=0\n\
                 maxSessionTimeout=60000\n\
                 admin.enableServer=false\n\
                 4lw.commands.whitelist=*\n\
                 # Transaction logs are preallocated 64 MiB at a time by default.\n\
                 preAllocSize=1024\n\
                 forceSync=no\n\
                 {servers}",
                data = data.display(),
                servers = node.servers,
            ),
        )?;
        Ok(CommandSpec::new(&self.java)
            .args(JVM_OPTIONS)
            .arg("-cp")
            .arg(&self.class_path)
            .arg(MAIN_CLASS)
            .arg(config)
            .current_dir(dir))
    }
}

/// Ready when `ruok` answers `imok`: the JVM runs, whether or not it has joined a quorum.
fn probe_alive(port: u16) -> Result<(), String> {
    match four_letter_word(port, "ruok", None)?.as_str() {
        "imok" => Ok(()),
        other => Err(format!("ruok answered {other:?}")),
    }
}

/// Ready when `srvr` reports a mode, which it does only while serving requests (asked over TLS,
/// trusting only `tls`, for a TLS-only node).
fn probe_serving(port: u16, tls: Option<&TestCa>) -> Result<(), String> {
    let status = four_letter_word(port, "srvr", tls)?;
    if status.contains("Mode: ") {
        Ok(())
    } else {
        Err(format!("srvr answered {:?}", status.trim()))
    }
}

/// Sends a four-letter word (`ruok`, `srvr`, …) and returns the whole answer; over TLS trusting
/// only `tls`'s CA (a TLS-only node answers them on its secure port too).
fn four_letter_word(port: u16, word: &str, tls: Option<&TestCa>) -> Result<String, String> {
    if let Some(ca) = tls {
        let mut stream = tls_client::connect(port, PROBE_TIMEOUT, ca)?;
        stream.write_all(word.as_bytes()).and_then(|()| stream.flush()).map_err(|e| e.to_string())?;
        // The server answers and closes.
        let answer = tls_client::read_to_close(&mut stream).map_err(|e| e.to_string())?;
        return String::from_utf8(answer).map_err(|_| format!("{word} answered something not UTF-8"));
    }
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    stream.write_all(word.as_bytes()).map_err(|e| e.to_string())?;
    // The server answers and closes; our side is done talking.
    let _ = stream.shutdown(Shutdown::Write);
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer)
}
