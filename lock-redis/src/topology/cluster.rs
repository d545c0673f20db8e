//! A Redis Cluster's slot map: which primary serves the slot of a lock's keys, one connection
//! pool per primary, refreshed from `CLUSTER SLOTS` when the cluster says the map is out of date.
//!
//! redis-rs's `ClusterConnection` routes commands the same way, but owns its connections: it
//! has no pool a blocking program can share between threads, no follow-up on the connection of
//! an unanswered request (the undo of a timed-out acquisition), and no single deadline over a
//! pipeline's replies (renewal batches). So the backend keeps its own per-node pools (the same
//! pools the single-node backend uses) and this map; what it relies on from the cluster is the
//! protocol: `CLUSTER SLOTS`, and the `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` replies
//! (handled by the caller's retry, `topology/mod.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::{Client, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};

use super::address::NodeTemplate;
use super::Node;
use crate::connection::{ConnectionManager, PoolSettings};

/// Slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The shortest time between two refreshes of the map that a redirect or a failure asks for:
/// a burst of `MOVED` replies after a failover costs one `CLUSTER SLOTS`, not one each.
const MIN_REFRESH_GAP: Duration = Duration::from_millis(100);

/// The name of the thread that refreshes a slot map in the background (Linux shows 15 bytes).
const REFRESH_THREAD_NAME: &str = "distlock-rslots";

/// The primaries of a cluster and the slots each serves.
pub(crate) struct ClusterNodes {
    seeds: Vec<ConnectionInfo>,
    template: NodeTemplate,
    settings: PoolSettings,
    map: RwLock<SlotMap>,
    /// Held while refreshing; when the last refresh finished.
    refreshed: Mutex<Option<Instant>>,
    /// Set when a reply or a failure suggested the map is out of date.
    stale: AtomicBool,
    /// Set while a background refresh runs.
    refreshing: AtomicBool,
    /// Where the next refresh starts in its list of candidates.
    rotation: AtomicUsize,
}

#[derive(Default)]
struct SlotMap {
    /// The index in `nodes` of each slot's primary (`None`: unknown, or no primary).
    owners: Vec<Option<usize>>,
    nodes: Vec<Arc<Node>>,
}

impl SlotMap {
    fn owner(&self, slot: u16) -> Option<Arc<Node>> {
        let index = (*self.owners.get(usize::from(slot))?)?;
        self.nodes.get(index).cloned()
    }

    /// The node at `address`, added (with a new pool) if the map does not know it.
    fn node_at(&mut self, address: &str, make: impl FnOnce() -> Arc<Node>) -> usize {
        if let Some(index) = self.nodes.iter().position(|node| node.address == address) {
            return index;
        }
        self.nodes.push(make());
        self.nodes.len() - 1
    }
}

impl ClusterNodes {
    /// A map that is filled on first use (or by [`refresh`](Self::refresh)).
    pub(crate) fn new(seeds: Vec<ConnectionInfo>, template: NodeTemplate, settings: PoolSettings) -> Self {
        Self {
            seeds,
            template,
            settings,
            map: RwLock::new(SlotMap::default()),
            refreshed: Mutex::new(None),
            stale: AtomicBool::new(true),
            refreshing: AtomicBool::new(false),
            rotation: AtomicUsize::new(0),
        }
    }

    /// The primary serving `slot`, refreshing the map first if it is known to be out of date.
    ///
    /// # Errors
    /// No node answered `CLUSTER SLOTS`, or the cluster has no primary for the slot.
    pub(crate) fn node_for(self: &Arc<Self>, slot: u16) -> RedisResult<Arc<Node>> {
        if self.stale.load(Ordering::Relaxed) {
            self.refresh_in_background();
        }
        if let Some(node) = self.map.read().owner(slot) {
            return Ok(node);
        }
        self.refresh()?;
        self.map.read().owner(slot).ok_or_else(|| {
            RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                "no primary serves the slot",
                slot.to_string(),
            ))
        })
    }

    /// A plain connection to `node`, outside its pool (test probes).
    #[cfg(feature = "testkit")]
    pub(crate) fn open_node(&self, node: &Node, settings: &PoolSettings) -> RedisResult<redis::Connection> {
        let info = node.info.clone().ok_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "a cluster node without an address"))
        })?;
        ConnectionManager::open(&Client::open(info)?, settings)
    }

    /// The known primaries, in map order.
    pub(crate) fn primaries(&self) -> Vec<Arc<Node>> {
        let map = self.map.read();
        let mut seen: Vec<usize> = map.owners.iter().flatten().copied().collect();
        seen.sort_unstable();
        seen.dedup();
        seen.into_iter().map(|index| Arc::clone(&map.nodes[index])).collect()
    }

    /// Takes a `MOVED` reply: `slot` is served by `address` now, and the rest of the map may
    /// have changed too (refreshed on the next lookup, at most every [`MIN_REFRESH_GAP`]).
    pub(crate) fn moved(&self, slot: u16, address: &str) {
        if let Some((host, port)) = split_address(address) {
            let info = self.template.at(host, port);
            let mut map = self.map.write();
            let index = map.node_at(&info.addr().to_string(), || self.new_node(info.clone()));
            if let Some(owner) = map.owners.get_mut(usize::from(slot)) {
                *owner = Some(index);
            }
        }
        self.mark_stale();
    }

    /// The map may be out of date (a node failed, the cluster was down): refresh it on the next
    /// lookup.
    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Refreshes the map on a thread of its own (one at a time, at most every
    /// [`MIN_REFRESH_GAP`], within the same budget as a caller's refresh): a caller goes on
    /// with the map it has — a redirect corrects it for its slot — so no call waits for nodes
    /// that may not answer (a refresh asks them in turn). The budget matters all the same: a
    /// caller that needs the map (a slot it does not know) waits for this refresh's lock.
    fn refresh_in_background(self: &Arc<Self>) {
        let recent = self
            .refreshed
            .try_lock()
            .is_some_and(|last| last.is_some_and(|at| at.elapsed() < MIN_REFRESH_GAP));
        if recent || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let cluster = Arc::clone(self);
        let spawned = thread::Builder::new().name(REFRESH_THREAD_NAME.into()).spawn(move || {
            let last = *cluster.refreshed.lock();
            if last.is_none_or(|at| at.elapsed() >= MIN_REFRESH_GAP) {
                if let Err(error) = cluster.refresh_within(cluster.refresh_budget()) {
                    tracing::debug!(%error, "refreshing the cluster's slot map failed; the next lookup tries again");
                }
            }
            cluster.refreshing.store(false, Ordering::Release);
        });
        if let Err(error) = spawned {
            tracing::debug!(%error, "cannot start a slot-map refresh thread");
            self.refreshing.store(false, Ordering::Release);
        }
    }

    /// Asks the known primaries, then the seeds, for `CLUSTER SLOTS`; the first answer becomes
    /// the map. Bounded by one connect plus one read timeout in all, the wait for a refresh
    /// already under way included, so a caller's lookup stays bounded however many nodes are
    /// silent.
    ///
    /// # Errors
    /// The last node's failure, when none answered; a timeout when a refresh under way on
    /// another thread held the map past the budget.
    pub(crate) fn refresh(&self) -> RedisResult<()> {
        self.refresh_within(self.refresh_budget())
    }

    /// The longest a refresh may take: one connect plus one read timeout.
    fn refresh_budget(&self) -> Duration {
        self.settings.connect_timeout + self.settings.read_timeout
    }

    /// [`refresh`](Self::refresh) within `budget`: the wait for another thread's refresh and
    /// every candidate's connect and read come out of it (a candidate gets the timeouts left,
    /// at most its own), so one slow or silent node cannot stretch a refresh, nor a refresh
    /// the calls that wait for it. Each refresh starts at the next candidate of the list, so a
    /// node that stays silent is not always asked first.
    fn refresh_within(&self, budget: Duration) -> RedisResult<()> {
        let deadline = Instant::now() + budget;
        let Some(mut refreshed) = self.refreshed.try_lock_until(deadline) else {
            return Err(RedisError::from((
                ErrorKind::Io,
                "a refresh of the cluster's slot map under way did not finish in time",
            )));
        };
        // Another thread refreshed (or tried) while this one waited for the lock.
        if refreshed.is_some_and(|at| at.elapsed() < MIN_REFRESH_GAP) && !self.map.read().nodes.is_empty() {
            return Ok(());
        }
        // Cleared first: a failure reported while this refresh runs marks the map again.
        self.stale.store(false, Ordering::Relaxed);
        let mut candidates = self.candidates();
        let first = self.rotation.fetch_add(1, Ordering::Relaxed) % candidates.len().max(1);
        candidates.rotate_left(first);
        let mut last_error = None;
        for info in candidates {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let settings = PoolSettings {
                connect_timeout: self.settings.connect_timeout.min(left),
                read_timeout: self.settings.read_timeout.min(left),
                write_timeout: self.settings.write_timeout.min(left),
                ..self.settings
            };
            match slots_from(&info, &settings) {
                Ok(ranges) => {
                    self.install(&ranges, &info);
                    *refreshed = Some(Instant::now());
                    return Ok(());
                }
                Err(error) => {
                    tracing::debug!(%error, node = %info.addr(), "CLUSTER SLOTS failed; asking the next node");
                    last_error = Some(error);
                }
            }
        }
        *refreshed = Some(Instant::now());
        self.mark_stale();
        Err(last_error.unwrap_or_else(|| {
            RedisError::from((ErrorKind::Io, "no cluster node answered CLUSTER SLOTS in time"))
        }))
    }

    /// The known primaries, then the seeds: whom to ask for the map.
    fn candidates(&self) -> Vec<ConnectionInfo> {
        let mut candidates: Vec<ConnectionInfo> =
            self.primaries().iter().filter_map(|node| node.info.clone()).collect();
        candidates.extend(self.seeds.iter().cloned());
        candidates
    }

    /// The node at `address` (`host:port`, as a redirect names it), with a pool of its own if
    /// the map does not know it yet.
    pub(crate) fn node_at(&self, address: &str) -> Option<Arc<Node>> {
        let (host, port) = split_address(address)?;
        let info = self.template.at(host, port);
        let mut map = self.map.write();
        let index = map.node_at(&info.addr().to_string(), || self.new_node(info.clone()));
        Some(Arc::clone(&map.nodes[index]))
    }

    /// Makes `ranges` the map; `asked` is the node they came from (already mapped), for ranges
    /// whose primary is "the node asked".
    fn install(&self, ranges: &[SlotRange], asked: &ConnectionInfo) {
        let mut map = self.map.write();
        let mut owners = vec![None; usize::from(SLOTS)];
        let mut nodes = Vec::new();
        for range in ranges {
            let info = match &range.primary {
                Endpoint::At(host, port) => self.template.at(host, *port),
                Endpoint::Asked => asked.clone(),
            };
            let address = info.addr().to_string();
            // Keep the pools of nodes that stay primaries.
            let index = match nodes.iter().position(|node: &Arc<Node>| node.address == address) {
                Some(index) => index,
                None => {
                    let node = map
                        .nodes
                        .iter()
                        .find(|node| node.address == address)
                        .cloned()
                        .unwrap_or_else(|| self.new_node(info));
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            for slot in range.start..=range.end.min(SLOTS - 1) {
                owners[usize::from(slot)] = Some(index);
            }
        }
        *map = SlotMap { owners, nodes };
    }

    fn new_node(&self, info: ConnectionInfo) -> Arc<Node> {
        Arc::new(Node::direct(info, self.settings))
    }
}

/// `CLUSTER SLOTS` of the node at `info`, within `settings`' timeouts.
fn slots_from(info: &ConnectionInfo, settings: &PoolSettings) -> RedisResult<Vec<SlotRange>> {
    let client = Client::open(info.clone())?;
    let mut connection = ConnectionManager::open(&client, settings)?;
    let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut connection)?;
    parse_slots(&reply)
}

/// The slot of `key`: CRC16 (XMODEM) of its hash tag, or of the whole key without one, as
/// Redis Cluster computes it.
pub(crate) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&byte| byte == b'{')
        .and_then(|open| {
            let close = bytes[open + 1..].iter().position(|&byte| byte == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % SLOTS
}

/// One range of `CLUSTER SLOTS`: its slots and their primary.
#[derive(Debug, PartialEq, Eq)]
struct SlotRange {
    start: u16,
    end: u16,
    primary: Endpoint,
}

/// Where a range's primary is, as `CLUSTER SLOTS` says.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint {
    /// At this announced address (the address map still to be applied).
    At(String, u16),
    /// The node that was asked (an empty host).
    Asked,
}

/// Parses `CLUSTER SLOTS` (`[[start, end, [host, port, id, …], replicas…], …]`). An empty host
/// is the node that was asked; a range whose primary's endpoint is unknown (`NULL` or `?`, with
/// `cluster-preferred-endpoint-type unknown-endpoint`) is left out: its slots stay unrouted.
fn parse_slots(reply: &Value) -> RedisResult<Vec<SlotRange>> {
    let malformed = || RedisError::from((ErrorKind::Parse, "malformed CLUSTER SLOTS reply"));
    let Value::Array(ranges) = reply else { return Err(malformed()) };
    let mut parsed = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(items) = range else { return Err(malformed()) };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return Err(malformed());
        };
        let host = match primary.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            Some(Value::Nil) => continue,
            _ => return Err(malformed()),
        };
        let Some(Value::Int(port)) = primary.get(1) else { return Err(malformed()) };
        let port = u16::try_from(*port).map_err(|_| malformed())?;
        let primary = match host.as_str() {
            "?" => continue,
            "" => Endpoint::Asked,
            _ => Endpoint::At(host, port),
        };
        parsed.push(SlotRange {
            start: u16::try_from(*start).map_err(|_| malformed())?,
            end: u16::try_from(*end).map_err(|_| malformed())?,
            primary,
        });
    }
    Ok(parsed)
}

/// `host:port` (or `[v6]:port`) split.
fn split_address(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_like_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(slot_of("foo{}{bar}"), crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % SLOTS);
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    }

    #[test]
    fn cluster_slots_replies_parse() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
        ]);
        let ranges = parse_slots(&reply).unwrap();
        assert_eq!(
            ranges[0],
            SlotRange { start: 0, end: 5460, primary: Endpoint::At("127.0.0.1".into(), 7000) }
        );
        assert_eq!(ranges[1].primary, Endpoint::Asked);
        assert!(parse_slots(&Value::Int(1)).is_err());
        let unknown = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(9),
            Value::Array(vec![Value::Nil, Value::Int(7000)]),
        ])]);
        assert!(parse_slots(&unknown).unwrap().is_empty(), "an unknown endpoint routes nothing");
    }

    /// A lookup that needs the map waits for a background refresh under way no longer than its
    /// own budget, and the background refresh has the same budget: nodes that accept and never
    /// answer cost each caller one budget, not one read timeout per silent node.
    #[test]
    fn a_lookup_behind_a_refresh_of_silent_nodes_stays_within_its_budget() {
        // The kernel's backlog accepts the connections; nobody ever reads or answers.
        let silent: Vec<std::net::TcpListener> =
            (0..8).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addresses: Vec<String> = silent.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        let url = format!("redis+cluster://{}/", addresses.join(","));
        let Ok(super::super::address::Target::Cluster { seeds, nodes }) =
            super::super::address::Target::parse(&url, None)
        else {
            panic!("{url} is a cluster URL");
        };
        let step = Duration::from_millis(200);
        let settings =
            PoolSettings { max_size: 1, connect_timeout: step, read_timeout: step, write_timeout: step };
        let cluster = Arc::new(ClusterNodes::new(seeds, nodes, settings));
        cluster.refresh_in_background();
        let until = Instant::now() + Duration::from_secs(10);
        while !cluster.refreshed.is_locked() {
            assert!(Instant::now() < until, "the background refresh never started");
            thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        assert!(cluster.node_for(0).is_err(), "no silent node tells the map");
        let took = started.elapsed();
        let budget = cluster.refresh_budget();
        // Slack for a loaded machine; before the fix this took a read timeout per silent node.
        assert!(took < budget + Duration::from_millis(500), "the lookup took {took:?} (budget {budget:?})");
    }

    #[test]
    fn moved_addresses_split() {
        assert_eq!(split_address("127.0.0.1:7000"), Some(("127.0.0.1", 7000)));
        assert_eq!(split_address("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(split_address("nohost"), None);
    }
}
