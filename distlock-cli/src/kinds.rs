//! The table of backend kinds: each row names a kind, the Cargo feature that builds it in, and
//! how to make its target — on the harness's throwaway servers or on a user's own.
//!
//! Adding a backend kind is one row here (and its `open` function in a module of `kinds/`).

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use distlock::{DistributedLock, HoldKind, Result};
use lock_testkit::negative::BrokenRecipe;
use lock_testkit::suite::{ScenarioResult, SuiteTarget};
use lock_testkit::workload::{
    self, RoundTripProbe, Scale, W1Report, W2Report, W3Report, W4Report, W5Report, W6Report,
};
use lock_testkit::BackendScenario;
use serde::Serialize;

/// Where a kind's servers are.
#[derive(Debug, Clone, Copy)]
pub enum Servers<'a> {
    /// Throwaway servers the harness starts on free loopback ports (or the ones the
    /// `DISTLOCK_*` variables name).
    Harness,
    /// The harness's throwaway TLS-only servers (certificates from a CA made for the run), for
    /// a kind's `-tls` twin.
    HarnessTls,
    /// The user's own servers: a URL, or a comma-separated list for multi-node kinds.
    Url(&'a str),
}

/// A kind's target, ready to be measured.
pub struct Opened {
    /// The target.
    pub target: Box<dyn KindTarget>,
    /// For kinds compared with a single server (Redlock: "pair p50 ≤ 2 × single-node"), that
    /// single-node target and the bound; `distlock bench` measures it.
    pub single_node_reference: Option<SingleNodeReference>,
    /// How to measure where one lock pair's time goes, for kinds that can tell (Redis: the
    /// server time of one acquire, renewal and release beside the plain recipe's; ZooKeeper: the
    /// protocol's floor; etcd: etcd's own Lock service on the same client); `distlock bench`
    /// prints it.
    pub time_breakdown: Option<Box<dyn Fn() -> std::result::Result<String, String>>>,
    /// A recipe run as W2 beside the kind's W2 in the same run (Redis: the plain `SET NX PX`
    /// loop); `distlock bench` prints both and their ratio.
    pub w2_reference: Option<W2Reference>,
}

/// A reference W2: the same eight workers and duration with a plain recipe instead of the lock.
pub struct W2Reference {
    /// What the recipe is, for the report.
    pub label: &'static str,
    /// Runs it.
    pub run: Box<dyn Fn(Scale) -> std::result::Result<W2Report, String>>,
    /// The least W2 acquisitions/s of the kind, as a multiple of the recipe's, that meets its
    /// goal (non-fair Redis: 1.0); `None`: shown, no goal (a fair queue trades rate for order).
    pub min_ratio: Option<f64>,
}

/// The single-node yardstick of a multi-node kind in `distlock bench`.
pub struct SingleNodeReference {
    /// Makes the single-node target.
    pub make: Box<dyn Fn() -> Box<dyn KindTarget>>,
    /// The largest W1 pair p50 of the kind, as a multiple of the single node's, that meets its
    /// goal (Redlock 2.0; Redis Cluster and Sentinel 1/0.9: W1 ≥ 0.9 × single-node W1).
    pub max_ratio: f64,
}

impl Opened {
    /// `target`, with no single-node reference and no time breakdown.
    pub fn new(target: impl KindTarget + 'static) -> Self {
        Self {
            target: Box::new(target),
            single_node_reference: None,
            time_breakdown: None,
            w2_reference: None,
        }
    }
}

/// Makes a kind's target.
type Open = fn(Servers<'_>) -> std::result::Result<Opened, String>;

/// The docs' broken recipes a kind's column shows (each family's, under one of its kinds).
type Recipes = fn() -> Vec<BrokenRecipe>;

/// A kind's own scenarios of `docs/scenarios.md` (R01–R04, Q01–Q03, Z01–Z03, E01–E04).
type OwnScenarios = fn() -> Vec<BackendScenario>;

/// Which of a user's servers a kind runs on (`distlock compare --redis URL`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// In this process: no server.
    InProcess,
    /// One Redis server.
    Redis,
    /// Several independent Redis servers.
    Redlock,
    /// A Redis Cluster.
    RedisCluster,
    /// A Sentinel-managed Redis primary with replicas.
    RedisSentinel,
    /// A PostgreSQL server.
    Postgres,
    /// A MySQL or MariaDB server.
    MySql,
    /// A ZooKeeper ensemble.
    ZooKeeper,
    /// An etcd server or cluster.
    Etcd,
}

/// One backend kind.
pub struct Kind {
    /// The name on the command line (`redis-hash`).
    pub name: &'static str,
    /// The Cargo feature of `distlock-cli` that builds it in; `None` for always-present kinds.
    pub feature: Option<&'static str>,
    /// What it is, in a few words.
    pub about: &'static str,
    /// Which servers it needs.
    pub family: Family,
    /// How to make its target; `None` when this binary was built without its feature.
    open: Option<Open>,
    /// The broken recipes shown in its column.
    recipes: Option<Recipes>,
    /// Its own scenarios.
    scenarios: Option<OwnScenarios>,
}

/// A row of [`KINDS`] for a kind behind `$feature`, whose functions exist only with it.
macro_rules! kind {
    ($name:literal, $feature:literal, $family:ident, $about:literal, $open:path $(, recipes: $recipes:path)? $(, scenarios: $scenarios:path)?) => {
        Kind {
            name: $name,
            feature: Some($feature),
            about: $about,
            family: Family::$family,
            #[cfg(feature = $feature)]
            open: Some($open),
            #[cfg(not(feature = $feature))]
            open: None,
            #[cfg(feature = $feature)]
            recipes: kind!(@optional $($recipes)?),
            #[cfg(not(feature = $feature))]
            recipes: None,
            #[cfg(feature = $feature)]
            scenarios: kind!(@optional $($scenarios)?),
            #[cfg(not(feature = $feature))]
            scenarios: None,
        }
    };
    (@optional) => { None };
    (@optional $value:path) => { Some($value) };
}

/// Every backend kind distlock knows, whether or not this binary was built with it.
#[rustfmt::skip] // One row per kind reads best unwrapped.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "memory",
        feature: None,
        about: "the in-process reference backend",
        family: Family::InProcess,
        open: Some(open_memory),
        recipes: None,
        scenarios: None,
    },
    kind!("redis", "redis", Redis, "Redis, one server, SET NX PX layout", redis::set_nx, recipes: redis::single_node_recipes, scenarios: redis::set_nx_scenarios),
    kind!("redis-hash", "redis", Redis, "Redis, one server, reentrant-hash layout", redis::reentrant_hash, scenarios: redis::reentrant_hash_scenarios),
    kind!("redis-nonfair", "redis", Redis, "Redis, one server, SET NX PX layout, non-fair waiters", redis::set_nx_non_fair),
    kind!("redis-hash-nonfair", "redis", Redis, "Redis, one server, reentrant-hash layout, non-fair waiters", redis::reentrant_hash_non_fair),
    kind!("redis-cluster", "redis", RedisCluster, "Redis Cluster, 3 primaries + 3 replicas, SET NX PX layout", redis::cluster, scenarios: redis::cluster_scenarios),
    kind!("redis-sentinel", "redis", RedisSentinel, "Redis primary + 2 replicas behind 3 sentinels, SET NX PX layout", redis::sentinel, scenarios: redis::sentinel_scenarios),
    kind!("redlock", "redis", Redlock, "Redlock over five independent Redis servers", redis::redlock, recipes: redis::redlock_recipes, scenarios: redis::redlock_scenarios),
    kind!("pg-table", "postgres", Postgres, "PostgreSQL lock table on the database clock", postgres::table, scenarios: postgres::table_scenarios),
    kind!("pg-table-nonfair", "postgres", Postgres, "PostgreSQL lock table on the database clock, non-fair waiters", postgres::table_non_fair),
    kind!("pg-row", "postgres", Postgres, "PostgreSQL SELECT ... FOR UPDATE row lock", postgres::row, scenarios: postgres::row_scenarios),
    kind!("pg-advisory", "postgres", Postgres, "PostgreSQL advisory lock", postgres::advisory, scenarios: postgres::advisory_scenarios),
    kind!("mysql-table", "mysql", MySql, "MySQL/MariaDB lock table on the database clock", mysql::table, recipes: mysql::broken_recipes, scenarios: mysql::table_scenarios),
    kind!("mysql-table-nonfair", "mysql", MySql, "MySQL/MariaDB lock table on the database clock, non-fair waiters", mysql::table_non_fair),
    kind!("mysql-row", "mysql", MySql, "MySQL/MariaDB SELECT ... FOR UPDATE row lock", mysql::row, scenarios: mysql::row_scenarios),
    kind!("mysql-advisory", "mysql", MySql, "MySQL/MariaDB GET_LOCK advisory lock", mysql::advisory, scenarios: mysql::advisory_scenarios),
    kind!("zookeeper", "zookeeper", ZooKeeper, "ZooKeeper, Curator-compatible ephemeral-sequential lock", zookeeper::curator_mutex, scenarios: zookeeper::scenarios),
    kind!("etcd", "etcd", Etcd, "etcd, concurrency.Mutex layout (shared with etcdctl lock)", etcd::mutex, scenarios: etcd::scenarios),
];

/// The suffix of a kind's TLS twin (`pg-row-tls`): the same kind on TLS-only servers.
pub const TLS_SUFFIX: &str = "-tls";

/// A kind as selected on the command line: itself, or its TLS twin.
#[derive(Clone, Copy)]
pub struct Selected {
    /// The kind.
    pub kind: &'static Kind,
    /// Whether it runs on TLS-only servers.
    pub tls: bool,
}

impl Selected {
    /// The name shown in reports: the kind's, with [`TLS_SUFFIX`] for a TLS twin.
    pub fn name(&self) -> &'static str {
        if !self.tls {
            return self.kind.name;
        }
        // A handful per run, for the process's life: reports keep `&'static str` names.
        Box::leak(format!("{}{TLS_SUFFIX}", self.kind.name).into_boxed_str())
    }

    /// The servers to run on: the user's `url`, or the harness's (TLS-only ones for a twin).
    ///
    /// # Errors
    /// A twin with a user's URL: it would run on the plaintext kind's server, as the same
    /// transport under another name.
    pub fn servers(self, url: Option<&str>) -> std::result::Result<Servers<'_>, String> {
        match url {
            Some(_) if self.tls => Err(format!(
                "{}: a TLS twin runs on the harness's TLS-only servers only; to measure your own TLS server, give its TLS URL to the plain kind `{}`",
                self.name(),
                self.kind.name
            )),
            Some(url) => Ok(Servers::Url(url)),
            None if self.tls => Ok(Servers::HarnessTls),
            None => Ok(Servers::Harness),
        }
    }

    /// Parses a kind name, with [`TLS_SUFFIX`] for a TLS twin.
    ///
    /// # Errors
    /// As [`Kind::find`]; a twin of a kind without one.
    pub fn find(name: &str) -> std::result::Result<Selected, String> {
        if let Ok(kind) = Kind::find(name) {
            return Ok(Selected { kind, tls: false });
        }
        let Some(base) = name.strip_suffix(TLS_SUFFIX) else {
            return Kind::find(name).map(|kind| Selected { kind, tls: false });
        };
        let kind = Kind::find(base)?;
        if !kind.has_tls_twin() {
            return Err(format!(
                "backend kind `{base}` has no TLS twin: the harness starts TLS-only servers for single Redis, PostgreSQL, MariaDB and ZooKeeper"
            ));
        }
        Ok(Selected { kind, tls: true })
    }
}

impl Kind {
    /// Whether the harness can run this kind on TLS-only servers (`<name>-tls`).
    pub fn has_tls_twin(&self) -> bool {
        matches!(self.family, Family::Redis | Family::Postgres | Family::MySql | Family::ZooKeeper)
    }

    /// The kind called `name`, if this binary was built with it.
    ///
    /// # Errors
    /// A message listing the kinds this binary knows, when `name` is unknown or its feature is
    /// off.
    pub fn find(name: &str) -> std::result::Result<&'static Kind, String> {
        let built: Vec<&str> =
            KINDS.iter().filter(|kind| kind.open.is_some()).map(|kind| kind.name).collect();
        match KINDS.iter().find(|kind| kind.name == name) {
            Some(kind) if kind.open.is_some() => Ok(kind),
            Some(kind) => Err(format!(
                "backend kind `{name}` needs distlock-cli's `{}` feature, which this binary was built without; it knows: {}",
                kind.feature.unwrap_or("?"),
                built.join(", ")
            )),
            None => Err(format!("unknown backend kind `{name}`; this binary knows: {}", built.join(", "))),
        }
    }

    /// Every kind this binary was built with, in table order.
    pub fn built() -> impl Iterator<Item = &'static Kind> {
        KINDS.iter().filter(|kind| kind.open.is_some())
    }

    /// The broken recipes shown in this kind's column (none for most kinds).
    pub fn broken_recipes(&self) -> Vec<BrokenRecipe> {
        self.recipes.map_or_else(Vec::new, |recipes| recipes())
    }

    /// This kind's own scenarios (R01–R04, Q01–Q03, Z01–Z03, E01–E04), where its crate ships them.
    pub fn own_scenarios(&self) -> Vec<BackendScenario> {
        self.scenarios.map_or_else(Vec::new, |scenarios| scenarios())
    }

    /// Makes this kind's target on `servers`.
    ///
    /// # Errors
    /// When the servers cannot be started or reached, or the kind was not built in.
    pub fn open(&self, servers: Servers<'_>) -> std::result::Result<Opened, String> {
        let open = self.open.ok_or_else(|| format!("backend kind `{}` is not built in", self.name))?;
        open(servers)
    }
}

/// Prints [`KINDS`] as a table: name, feature, whether built in, what it is.
pub fn print_table() {
    for kind in KINDS {
        let built = if kind.open.is_some() { "built in" } else { "not built in" };
        let feature =
            kind.feature.map_or_else(|| "always".to_owned(), |feature| format!("feature {feature}"));
        println!("{:<15} {:<16} {:<13} {}", kind.name, feature, built, kind.about);
    }
}

/// Opens a user's URL for `kind` once through the facade's `parse_url_opts`, as `exec` and
/// `inspect` do (same forms, same errors: a URL one command takes, every command takes), before
/// the kind's suite target builds its clients, which need the concrete backend type, with the
/// crate's builder from the same URL.
#[allow(dead_code)] // Unused when no server backend is built in.
fn check_url(url: &str, kind: distlock::BackendKind) -> std::result::Result<(), String> {
    let options = distlock::ConnectOptions::new().kind(kind);
    distlock::parse_url_opts(url, &options).map(drop).map_err(|e| e.to_string())
}

fn open_memory(servers: Servers<'_>) -> std::result::Result<Opened, String> {
    match servers {
        Servers::Url(url) => {
            return Err(format!("the memory backend lives in this process: it takes no URL (got {url})"))
        }
        Servers::HarnessTls => return Err("the memory backend lives in this process: no TLS".into()),
        Servers::Harness => {}
    }
    Ok(Opened::new(lock_testkit::suite::MemoryTarget::new()))
}

/// A [`SuiteTarget`] with its backend type erased, as `distlock bench` and `distlock compare`
/// run it.
pub trait KindTarget: Send + Sync {
    /// The name shown in reports.
    fn label(&self) -> String;
    /// The physical limit: one server round trip, through a backend of its own; `None` in
    /// process.
    ///
    /// # Errors
    /// When the backend cannot be built.
    fn round_trip(&self) -> Result<Option<RoundTripProbe>>;
    /// W1, uncontended pairs.
    fn w1(&self, scale: Scale) -> Result<W1Report>;
    /// W2, eight workers on one name.
    fn w2(&self, scale: Scale) -> Result<W2Report>;
    /// W3, eight workers on eight names.
    fn w3(&self, scale: Scale) -> Result<W3Report>;
    /// Why W4 does not apply, if it does not.
    fn w4_not_applicable(&self) -> Result<Option<&'static str>>;
    /// W4, 10,000 leases renewed.
    fn w4(&self) -> Result<W4Report>;
    /// W5, read-mostly on a read-write lock against the mutex.
    fn w5(&self, scale: Scale) -> Result<W5Report>;
    /// W6, a semaphore of 3 permits under 8 workers.
    fn w6(&self, scale: Scale) -> Result<W6Report>;
    /// Runs scenario `id` (`"S01"`); S04 re-runs this binary with `test_name` as its holder.
    fn scenario(&self, id: &str, test_name: &str) -> ScenarioResult;
    /// What a client of the kind says about itself.
    fn properties(&self) -> Result<Properties>;
    /// Deletes what runs left under names starting with `prefix`; how many keys or rows.
    fn clean_up(&self, prefix: &str) -> std::result::Result<u64, String>;
}

impl<T: SuiteTarget> KindTarget for T {
    fn label(&self) -> String {
        SuiteTarget::label(self)
    }
    fn round_trip(&self) -> Result<Option<RoundTripProbe>> {
        Ok(SuiteTarget::round_trip(self, &self.backend()?))
    }
    fn w1(&self, scale: Scale) -> Result<W1Report> {
        workload::w1_uncontended(self, scale)
    }
    fn w2(&self, scale: Scale) -> Result<W2Report> {
        workload::w2_contended(self, scale)
    }
    fn w3(&self, scale: Scale) -> Result<W3Report> {
        workload::w3_independent(self, scale)
    }
    fn scenario(&self, id: &str, test_name: &str) -> ScenarioResult {
        lock_testkit::suite::run(self, id, test_name)
    }
    fn properties(&self) -> Result<Properties> {
        Ok(Properties::of(&self.backend()?))
    }
    fn clean_up(&self, prefix: &str) -> std::result::Result<u64, String> {
        SuiteTarget::clean_up(self, prefix)
    }
    fn w4_not_applicable(&self) -> Result<Option<&'static str>> {
        workload::w4_not_applicable(self)
    }
    fn w4(&self) -> Result<W4Report> {
        workload::w4_renewal_scale(self)
    }
    fn w5(&self, scale: Scale) -> Result<W5Report> {
        workload::w5_read_mostly(self, scale)
    }
    fn w6(&self, scale: Scale) -> Result<W6Report> {
        workload::w6_semaphore(self, scale)
    }
}

/// What a backend kind is, as a client of it says (the trait's answers and its
/// [`BackendProfile`](distlock::BackendProfile)), never typed by hand per kind.
#[derive(Debug, Clone, Serialize)]
pub struct Properties {
    /// The backend's name (`redis`, `postgres`, …).
    pub backend: &'static str,
    /// `lease` (the server drops the lock when its lease runs out) or `session` (the lock lives
    /// as long as a connection or session).
    pub hold: &'static str,
    /// Where fencing tokens come from, or `none`.
    pub fencing: String,
    /// What wakes a waiter.
    pub wake_up: String,
    /// How holds are counted.
    pub reentrancy: String,
    /// What a server failover, restart or crash does to a held lock.
    pub failover: String,
    /// Which guarded writes the kind offers, or why none.
    pub guarded_writes: String,
}

impl Properties {
    /// The properties of `backend`.
    pub fn of<B: DistributedLock>(backend: &B) -> Self {
        let profile = backend.profile();
        let hold = match backend.hold_kind() {
            HoldKind::Lease => "lease",
            HoldKind::Session => "session",
            _ => "other",
        };
        Self {
            backend: backend.backend_name(),
            hold,
            fencing: if backend.fencing().is_some() { profile.fencing.to_owned() } else { "none".to_owned() },
            wake_up: if backend.native_wait().is_some() {
                profile.wake_up.to_owned()
            } else {
                "none: the waiter backs off (capped exponential, with jitter)".to_owned()
            },
            reentrancy: match profile.server_reentrancy {
                Some(how) => format!("per thread in the client; the server counts holds too ({how})"),
                None => "per thread, in the client (the server sees one hold)".to_owned(),
            },
            failover: profile.failover.to_owned(),
            guarded_writes: profile.guarded_writes.to_owned(),
        }
    }
}

/// If this process is a backend scenario's second process (etcd's E02: this binary re-run with
/// its variable set), does its part and exits; otherwise returns.
pub fn serve_scenario_child() {
    #[cfg(feature = "etcd")]
    etcd::serve_scenario_child();
}

/// If this process is S04's holder (the suite re-runs this binary as it re-runs a test binary:
/// [`S04_HOLD_VARIABLE`] set, the holder's test name and libtest's `--exact` as arguments), holds
/// the lock until killed and returns the exit code for when it could not (unknown kind, or its
/// servers cannot be reached); otherwise `None`.
///
/// [`S04_HOLD_VARIABLE`]: lock_testkit::suite::S04_HOLD_VARIABLE
pub fn run_s04_holder() -> Option<std::process::ExitCode> {
    let args: Vec<String> = std::env::args().take(3).collect();
    if std::env::var_os(lock_testkit::suite::S04_HOLD_VARIABLE).is_none()
        || args.get(2).is_none_or(|arg| arg != "--exact")
    {
        return None;
    }
    hold_for_s04(&args[1]);
    eprintln!(
        "distlock: could not hold {:?} for S04 (unknown kind, or its servers cannot be reached)",
        args[1]
    );
    Some(std::process::ExitCode::from(2))
}

/// S04's holder: this binary re-run by the suite with [`S04_HOLD_VARIABLE`] set and the
/// holder's test name as its first argument. Runs S04 on the same target, which holds the lock
/// until the parent kills it; returns if `test_name` names no target of this binary or the
/// target's servers cannot be reached.
///
/// [`S04_HOLD_VARIABLE`]: lock_testkit::suite::S04_HOLD_VARIABLE
fn hold_for_s04(test_name: &str) {
    if let Some(selected) = test_name.strip_prefix(S04_TEST_PREFIX).and_then(|name| Selected::find(name).ok())
    {
        // The parent's target put its servers' URL (a TLS twin's too) in the environment, where
        // the harness's shared servers look first.
        if let Ok(opened) = selected.kind.open(Servers::Harness) {
            let _ = opened.target.scenario("S04", test_name);
        }
    }
    #[cfg(feature = "mysql")]
    mysql::hold_for_s04(test_name);
}

/// The test name a kind's S04 holder process is re-run with: `compare/<kind>`.
pub const S04_TEST_PREFIX: &str = "compare/";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lookups_list_the_known_kinds() {
        let mut names: Vec<&str> = KINDS.iter().map(|kind| kind.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len(), "duplicate kind names");
        assert!(Kind::find("memory").is_ok());
        let error = Kind::find("consul").err().expect("unknown kind");
        assert!(error.contains("unknown backend kind `consul`") && error.contains("memory"), "{error}");
        // The CLI's kinds that are backend kinds of the facade carry its names.
        for kind in KINDS.iter().filter(|kind| !kind.name.ends_with("-nonfair")) {
            if matches!(
                kind.family,
                Family::InProcess
                    | Family::Redis
                    | Family::Postgres
                    | Family::MySql
                    | Family::ZooKeeper
                    | Family::Etcd
            ) {
                assert!(kind.name.parse::<distlock::BackendKind>().is_ok(), "{}", kind.name);
            }
        }
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_runs_on_its_own_urls_only_and_has_no_tls_twin() {
        let etcd = Kind::find("etcd").unwrap();
        assert!(!etcd.has_tls_twin() && Selected::find("etcd-tls").is_err());
        let wrong = etcd.open(Servers::Url("zk://127.0.0.1:1")).err().expect("a zk:// URL");
        assert!(wrong.contains("does not go with"), "{wrong}");
        assert!(etcd.open(Servers::HarnessTls).is_err());
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn a_kind_whose_feature_is_off_says_which_feature() {
        let error = Kind::find("redis").err().expect("not built in");
        assert!(error.contains("`redis` feature"), "{error}");
    }
}
