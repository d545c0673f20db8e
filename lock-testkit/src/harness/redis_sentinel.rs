//! A throwaway Redis Sentinel group: a primary with two replicas, watched by three sentinels,
//! every one its own process on free loopback ports, so tests can kill the primary and watch
//! the sentinels promote a replica.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::binaries::{self, REDIS_SERVER};
use super::command::CommandSpec;
use super::process::Readiness;
use super::resp::{self, Reply};
use super::{dirs, logs, ports, HarnessError, RedisServer, ServerKind, ServerProcess, TestDeployment};

const KIND: ServerKind = ServerKind::Redis;

/// The name the sentinels monitor the primary under.
const MASTER_NAME: &str = "distlock-primary";

/// How many replicas the primary has, and how many sentinels watch them.
const REPLICAS: usize = 2;
const SENTINELS: usize = 3;

/// How many sentinels must agree that the primary is down before one fails it over.
const QUORUM: usize = 2;

/// How long the primary may not answer before a sentinel counts it as down, in ms.
const DOWN_AFTER_MS: u32 = 1000;

/// How long a failover may take before another sentinel may try again, in ms.
const FAILOVER_TIMEOUT_MS: u32 = 3000;

/// How long a sentinel may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a new group may take until every sentinel knows both replicas and the other
/// sentinels (they announce themselves every 2 s) and every replica is linked.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The pause between two looks at every server while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How many lines of each server's log go into a [`HarnessError::NotConverged`].
const LOG_LINES_PER_NODE: usize = 6;

/// One `redis-server --sentinel` of a [`RedisSentinelGroup`], with its own port, dir and
/// writable `sentinel.conf` (sentinels rewrite it as they learn; a restart reads it back).
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct RedisSentinel {
    process: ServerProcess,
}

impl RedisSentinel {
    fn start(binary: &Path, primary_port: u16) -> Result<Self, HarnessError> {
        ports::retry_on_port_in_use(|| {
            let port = ports::free_port()?;
            let dir = dirs::create(KIND)?;
            let config = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 dir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} {QUORUM}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = dir.path().display(),
            );
            fs::write(&config, text)
                .map_err(|source| HarnessError::io(format!("writing {config:?}"), source))?;
            let command = CommandSpec::new(binary).arg(&config).arg("--sentinel").current_dir(dir.path());
            let readiness = Readiness { probe: Box::new(move || ping(port)), timeout: READY_TIMEOUT };
            ServerProcess::start(KIND, dir, port, command, readiness)
        })
        .map(|process| RedisSentinel { process })
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The sentinel's process, for fault injection.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    fn is_live(&self) -> bool {
        self.process.is_running() && !self.process.is_paused()
    }
}

/// A private Redis Sentinel deployment on loopback: a primary and two replicas (each a
/// [`RedisServer`] without persistence or password) watched by three [`RedisSentinel`]s under
/// the name `distlock-primary`, quorum 2.
///
/// A sentinel counts the primary as down after 1000 ms without an answer (failover timeout
/// 3000 ms), so after a kill the sentinels name a promoted replica about 2.5 s later. The
/// primary changes with failovers: ask [`current_primary_port`](Self::current_primary_port).
/// A restarted data node starts as it first did: the first primary comes back as an empty
/// primary that accepts writes for the 3 to 4 s until the sentinels turn it into a replica of
/// the current one (a real deployment without persistence does the same).
#[derive(Debug)]
#[must_use = "the servers stop when this is dropped"]
pub struct RedisSentinelGroup {
    // Dropped first, so no sentinel fails over a primary that is merely being stopped.
    sentinels: Vec<RedisSentinel>,
    data_nodes: Vec<RedisServer>,
}

impl RedisSentinelGroup {
    /// Starts the primary, its two replicas and three sentinels, and waits until every
    /// sentinel's `SENTINEL MASTER distlock-primary` reports the primary with 2 replicas and
    /// 2 other sentinels, and both replicas' links are up.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; as for [`RedisServer::start`]
    /// if a server does not come up; [`HarnessError::NotConverged`] with every server's view
    /// and log tail if the sentinels do not settle (the dirs are then kept).
    pub fn start() -> Result<Self, HarnessError> {
        let binary = binaries::find(&REDIS_SERVER)?;
        let mut data_nodes = vec![RedisServer::start()?];
        for _ in 0..REPLICAS {
            data_nodes.push(RedisServer::start_unlinked_replica_of(&data_nodes[0])?);
        }
        let sentinels = (0..SENTINELS)
            .map(|_| RedisSentinel::start(&binary, data_nodes[0].port()))
            .collect::<Result<_, _>>()?;
        let group = RedisSentinelGroup { sentinels, data_nodes };
        if let Err(error) = group.wait_for("Redis Sentinel group settled", SETTLE_TIMEOUT, Self::settled) {
            for process in group.processes() {
                process.keep_dir_after_drop();
            }
            return Err(error);
        }
        Ok(group)
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/distlock-primary`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> =
            self.sentinels.iter().map(|sentinel| format!("127.0.0.1:{}", sentinel.port())).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The name the sentinels know the primary by: `distlock-primary`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The three sentinels.
    pub fn sentinels(&self) -> &[RedisSentinel] {
        &self.sentinels
    }

    /// The primary and its replicas, in the order they were started: the first was the first
    /// primary. Roles change with failovers.
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data_nodes
    }

    /// The data node on `port`, if it is one of this group's.
    pub fn data_node(&self, port: u16) -> Option<&RedisServer> {
        self.data_nodes.iter().find(|node| node.port() == port)
    }

    /// The primary's port, as the first running, unpaused sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` names it. A sentinel names the old primary until
    /// the failover is done.
    ///
    /// # Errors
    ///
    /// [`HarnessError::UnexpectedState`] if no sentinel answers.
    pub fn current_primary_port(&self) -> Result<u16, HarnessError> {
        let mut failures = Vec::new();
        for sentinel in self.sentinels.iter().filter(|sentinel| sentinel.is_live()) {
            match primary_named_by(sentinel.port()) {
                Ok(port) => return Ok(port),
                Err(why) => failures.push(format!("port {}: {why}", sentinel.port())),
            }
        }
        Err(HarnessError::UnexpectedState {
            detail: format!("no sentinel named the primary: [{}]", failures.join("; ")),
        })
    }

    /// Waits until every running, unpaused sentinel names the same primary, not `old_port`,
    /// and that server says it is a primary; returns its port. For failover tests: kill or
    /// pause the primary on `old_port`, then wait for a sentinel to promote a replica.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotConverged`] with every server's view and log tail after `timeout`.
    pub fn wait_for_new_primary(&self, old_port: u16, timeout: Duration) -> Result<u16, HarnessError> {
        let goal = format!("sentinels naming a primary other than {old_port}");
        self.wait_for(&goal, timeout, |group| {
            let mut named = None;
            for sentinel in group.sentinels.iter().filter(|sentinel| sentinel.is_live()) {
                let port = primary_named_by(sentinel.port())
                    .map_err(|why| format!("sentinel {} does not answer: {why}", sentinel.port()))?;
                if port == old_port {
                    return Err(format!("sentinel {} still names {old_port}", sentinel.port()));
                }
                match named {
                    Some(other) if other != port => return Err(format!("sentinels name {other} and {port}")),
                    _ => named = Some(port),
                }
            }
            let port = named.ok_or("no sentinel runs")?;
            match role(port)?.as_str() {
                "master" => Ok(port),
                other => Err(format!("{port} is named but is still a {other}")),
            }
        })
    }

    /// The check for a new group: every sentinel sees the first primary, up, with both
    /// replicas and the other sentinels, and both replicas are linked.
    fn settled(&self) -> Result<(), String> {
        let primary = self.data_nodes[0].port();
        for sentinel in &self.sentinels {
            let fields = master_fields(sentinel.port())?;
            let field = |name: &str| {
                fields.iter().find(|(key, _)| key == name).map_or("", |(_, value)| value.as_str())
            };
            let expected = [
                ("port", primary.to_string()),
                ("flags", "master".into()),
                ("num-slaves", REPLICAS.to_string()),
                ("num-other-sentinels", (SENTINELS - 1).to_string()),
            ];
            if let Some((name, value)) = expected.iter().find(|(name, value)| field(name) != value) {
                return Err(format!(
                    "sentinel {} says {name} is {:?}, not {value}",
                    sentinel.port(),
                    field(name)
                ));
            }
        }
        for replica in &self.data_nodes[1..] {
            let info = resp::request(replica.port(), &["INFO", "replication"])
                .and_then(|reply| reply.into_text())?;
            if !info.contains("master_link_status:up") {
                return Err(format!("replica {} is not linked to its primary yet", replica.port()));
            }
        }
        Ok(())
    }

    /// Polls `check` until it holds, or fails after `timeout` with its last reason, every
    /// server's view and the tails of their logs.
    fn wait_for<T>(
        &self,
        goal: &str,
        timeout: Duration,
        check: impl Fn(&Self) -> Result<T, String>,
    ) -> Result<T, HarnessError> {
        let started = Instant::now();
        loop {
            let why = match check(self) {
                Ok(outcome) => return Ok(outcome),
                Err(why) => why,
            };
            if started.elapsed() >= timeout {
                return Err(HarnessError::NotConverged {
                    goal: goal.to_owned(),
                    waited: started.elapsed(),
                    state: self.describe(&why),
                });
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn processes(&self) -> impl Iterator<Item = &ServerProcess> {
        self.sentinels
            .iter()
            .map(RedisSentinel::process)
            .chain(self.data_nodes.iter().map(RedisServer::process))
    }

    /// `why`, then what each server says and its log tail, for a [`HarnessError::NotConverged`].
    fn describe(&self, why: &str) -> String {
        let mut text = why.to_owned();
        for process in self.processes() {
            let port = process.port();
            let is_sentinel = self.sentinels.iter().any(|sentinel| sentinel.port() == port);
            let state = if process.is_paused() {
                "paused".to_owned()
            } else if !process.is_running() {
                "not running".to_owned()
            } else if is_sentinel {
                match master_fields(port) {
                    Ok(fields) => {
                        let wanted =
                            ["ip", "port", "flags", "num-slaves", "num-other-sentinels", "failover-state"];
                        let shown: Vec<String> = fields
                            .iter()
                            .filter(|(key, _)| wanted.contains(&key.as_str()))
                            .map(|(key, value)| format!("{key}={value}"))
                            .collect();
                        format!("sentinel: {}", shown.join(" "))
                    }
                    Err(why) => format!("sentinel, no answer: {why}"),
                }
            } else {
                role(port).map_or_else(|why| format!("no answer: {why}"), |role| format!("role {role}"))
            };
            text +=
                &logs::node_report(&format!("port {port}"), &state, process.log_path(), LOG_LINES_PER_NODE);
        }
        text
    }
}

impl TestDeployment for RedisSentinelGroup {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        RedisSentinelGroup::start()
    }

    fn address(&self) -> String {
        self.url()
    }
}

/// Ready when `PING` answers `PONG`.
fn ping(port: u16) -> Result<(), String> {
    match resp::request(port, &["PING"])? {
        Reply::Simple(pong) if pong == "PONG" => Ok(()),
        other => Err(format!("PING answered {other:?}")),
    }
}

/// `SENTINEL MASTER distlock-primary` as name-value pairs.
fn master_fields(sentinel: u16) -> Result<Vec<(String, String)>, String> {
    let items = resp::request(sentinel, &["SENTINEL", "MASTER", MASTER_NAME])?.into_array()?;
    let texts = items.into_iter().map(Reply::into_text).collect::<Result<Vec<_>, _>>()?;
    Ok(texts.chunks_exact(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect())
}

/// The primary's port according to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
fn primary_named_by(sentinel: u16) -> Result<u16, String> {
    let address =
        resp::request(sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?.into_array()?;
    match address.into_iter().nth(1).map(Reply::into_text) {
        Some(Ok(port)) => port.parse().map_err(|_| format!("not a port: {port:?}")),
        Some(Err(why)) => Err(why),
        None => Err("the sentinel knows no primary".into()),
    }
}

/// What a data node says it is: `master` or `slave` (the first element of `ROLE`).
fn role(port: u16) -> Result<String, String> {
    let role = resp::request(port, &["ROLE"])?.into_array()?;
    role.into_iter().next().ok_or_else(|| "empty ROLE reply".to_owned())?.into_text()
}
