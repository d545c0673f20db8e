//! `distlock compare`: the docs' suite (S01–S16), the broken recipes (N01–N06) and the
//! workloads (W1–W3, beside the server round trip) across every backend kind, as a terminal
//! matrix and, with `--out`, `report.json`, `report.md` and a self-contained `report.html`.

mod execute;
mod progress;
mod render;
pub mod report;

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use lock_testkit::suite::SCENARIOS;
use lock_testkit::workload::Scale;

use crate::kinds::{Family, Kind, Selected};
use execute::Contender;
use progress::Progress;
use report::{KindReport, Report, ScenarioInfo};

/// Options of `distlock compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Short workloads (W1 300 pairs, W2 and W3 1 s each): every kind in a few minutes. The
    /// default.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The benchmark's workloads (W1 3,000 pairs, W2 and W3 5 s each).
    #[arg(long)]
    full: bool,
    /// Only these scenarios, workloads and broken recipes, comma-separated: `s01,s06,w1`, `n01`
    /// (or `recipes` for all of them), a backend's own scenario (`z01`). Default: everything.
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    only: Vec<String>,
    /// Only these backend kinds, comma-separated (`redis,pg-row`). Default: every kind this
    /// binary was built with (`distlock kinds`). A kind's TLS twin is `<kind>-tls` (`pg-row-tls`):
    /// the same kind on TLS-only throwaway servers, its W1 shown beside the plaintext kind's.
    #[arg(long, value_delimiter = ',', value_name = "KINDS")]
    backends: Vec<String>,
    /// Also run the TLS twin of every selected kind that has one (single Redis, PostgreSQL,
    /// MySQL and ZooKeeper kinds), right after it; not for kinds run on your own servers.
    #[arg(long)]
    tls: bool,
    /// Run the Redis kinds on this server instead of a throwaway one. On your own servers, lock
    /// names start with `distlock-compare:`, and the runs' keys and rows are deleted afterwards;
    /// S13, S15 and the broken recipes still start throwaway servers of their own, so the server
    /// programs are needed all the same.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Run Redlock on these independent servers (comma-separated URLs) instead of throwaway ones.
    #[arg(long, value_name = "URLS")]
    redlock: Option<String>,
    /// Run `redis-cluster` on this Redis Cluster (`redis+cluster://host:port,host:port/`) instead
    /// of a throwaway one.
    #[arg(long, value_name = "URL")]
    redis_cluster: Option<String>,
    /// Run `redis-sentinel` on this Sentinel-managed primary
    /// (`redis+sentinel://sentinel:port,…/<master-name>`) instead of a throwaway group.
    #[arg(long, value_name = "URL")]
    redis_sentinel: Option<String>,
    /// Run the PostgreSQL kinds on this server (`postgres://user:password@host/db`).
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Run the MySQL kinds on this server (`mysql://user:password@host/db`).
    #[arg(long, value_name = "URL")]
    mysql: Option<String>,
    /// Run the ZooKeeper kind on this ensemble (`zk://[user:password@]host:port[,host:port…][/root]`,
    /// or a bare `host:port[,host:port…]`).
    #[arg(long, value_name = "URL")]
    zookeeper: Option<String>,
    /// Run the etcd kind on this server or cluster
    /// (`etcd://[user:password@]host:port[,host:port…][/namespace]`, `etcds://…` for TLS).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Write `report.json`, `report.md` and `report.html` into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// How many scenarios run at once (the workloads always run alone). Most of a scenario's
    /// time is waiting for leases, timeouts and crashes, not CPU.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
}

/// The docs' broken recipes, by id.
const RECIPES: [&str; 6] = ["n01", "n02", "n03", "n04", "n05", "n06"];

/// The namespace of every lock name on a user's own servers.
const NAMESPACE: &str = "distlock-compare:";

impl CompareArgs {
    fn user_servers(&self, family: Family) -> Option<&str> {
        match family {
            Family::InProcess => None,
            Family::Redis => self.redis.as_deref(),
            Family::Redlock => self.redlock.as_deref(),
            Family::RedisCluster => self.redis_cluster.as_deref(),
            Family::RedisSentinel => self.redis_sentinel.as_deref(),
            Family::Postgres => self.postgres.as_deref(),
            Family::MySql => self.mysql.as_deref(),
            Family::ZooKeeper => self.zookeeper.as_deref(),
            Family::Etcd => self.etcd.as_deref(),
        }
    }

    fn kinds(&self) -> Result<Vec<Selected>, String> {
        let named: Vec<Selected> = if self.backends.is_empty() {
            Kind::built().map(|kind| Selected { kind, tls: false }).collect()
        } else {
            self.backends.iter().map(|name| Selected::find(name.trim())).collect::<Result<_, _>>()?
        };
        let mut kinds: Vec<Selected> = Vec::new();
        let mut add = |selected: Selected| {
            if !kinds.iter().any(|known| known.kind.name == selected.kind.name && known.tls == selected.tls) {
                kinds.push(selected);
            }
        };
        for selected in named {
            add(selected);
            // On a user's servers, the twin would be the same server again.
            let on_user_servers = self.user_servers(selected.kind.family).is_some();
            if self.tls && !selected.tls && selected.kind.has_tls_twin() && !on_user_servers {
                add(Selected { tls: true, ..selected });
            }
        }
        Ok(kinds)
    }

    /// `--only`, trimmed and lower-cased.
    fn only(&self) -> Vec<String> {
        self.only.iter().map(|id| id.trim().to_lowercase()).filter(|id| !id.is_empty()).collect()
    }

    /// The selected scenario ids, workloads and whether the broken recipes run.
    fn selection(&self) -> Result<(Vec<&'static str>, Vec<&'static str>, bool), String> {
        let only = self.only();
        let all = only.is_empty();
        for id in &only {
            let known = SCENARIOS.iter().any(|s| s.id.eq_ignore_ascii_case(id))
                || ["w1", "w2", "w3", "recipes"].contains(&id.as_str())
                || RECIPES.contains(&id.as_str())
                || Kind::built().flat_map(|kind| kind.own_scenarios()).any(|s| s.id.eq_ignore_ascii_case(id));
            if !known {
                return Err(format!("--only: unknown id `{id}` (use s01…s15, w1…w3, n01…n06, recipes, or a backend's own scenario such as z01)"));
            }
        }
        let scenarios = SCENARIOS
            .iter()
            .map(|s| s.id)
            .filter(|id| all || only.iter().any(|o| id.eq_ignore_ascii_case(o)))
            .collect();
        let workloads =
            ["w1", "w2", "w3"].into_iter().filter(|w| all || only.iter().any(|o| o == w)).collect();
        let recipes = all || only.iter().any(|o| o == "recipes" || o.starts_with('n'));
        Ok((scenarios, workloads, recipes))
    }
}

/// Runs the comparison; returns whether everything passed (the exit status).
///
/// # Errors
/// Bad arguments, or a report that cannot be written.
pub fn run(args: &CompareArgs) -> Result<bool, String> {
    let started = Instant::now();
    let kinds = args.kinds()?;
    let (scenarios, workloads, recipes) = args.selection()?;
    let scale = if args.full { Scale::FULL } else { Scale::QUICK };
    let on_user_servers = kinds.iter().any(|selected| args.user_servers(selected.kind.family).is_some());
    if on_user_servers {
        lock_testkit::suite::set_name_namespace(NAMESPACE);
    }
    let only = args.only();
    let recipe_filter =
        |id: &str| only.is_empty() || only.iter().any(|o| o == "recipes" || o.eq_ignore_ascii_case(id));
    let own_filter = |id: &str| only.is_empty() || only.iter().any(|o| o.eq_ignore_ascii_case(id));

    // Open every kind first: that starts the throwaway servers (or reaches the user's).
    let setup = Progress::new(0);
    let mut contenders = Vec::new();
    let mut reports = Vec::new();
    for selected in &kinds {
        let (kind, name) = (selected.kind, selected.name());
        let user = args.user_servers(kind.family);
        setup.note(&format!(
            "{name}: {}",
            if user.is_some() { "reaching your servers" } else { "starting servers" }
        ));
        let mut report = KindReport {
            name,
            label: name.to_owned(),
            servers: if user.is_some() { "user" } else { "harness" },
            properties: None,
            cells: Vec::new(),
            recipes: Vec::new(),
            backend_scenarios: Vec::new(),
            performance: None,
            error: None,
        };
        match selected.servers(user).and_then(|servers| kind.open(servers)) {
            Ok(opened) => {
                report.label = opened.target.label();
                match opened.target.properties() {
                    Ok(properties) => report.properties = Some(properties),
                    Err(error) => report.error = Some(format!("no client: {error}")),
                }
                // A TLS twin is the same kind over another transport: its recipes and own
                // scenarios (which start servers of their own) run under the plaintext kind.
                let recipes_of_kind = if recipes && !selected.tls {
                    kind.broken_recipes().into_iter().filter(|recipe| recipe_filter(recipe.id)).collect()
                } else {
                    Vec::new()
                };
                let own = if selected.tls {
                    Vec::new()
                } else {
                    kind.own_scenarios().into_iter().filter(|scenario| own_filter(scenario.id)).collect()
                };
                if report.error.is_none() {
                    let contender = Contender { name, target: opened.target, recipes: recipes_of_kind, own };
                    contenders.push((reports.len(), contender));
                }
            }
            Err(error) => report.error = Some(error),
        }
        reports.push(report);
    }
    setup.done();

    let (indices, contenders): (Vec<usize>, Vec<Contender>) = contenders.into_iter().unzip();
    let recipe_count: usize = contenders.iter().map(|c| c.recipes.len() + c.own.len()).sum();
    let steps = contenders.len() * (scenarios.len() + workloads.len()) + recipe_count;
    let progress = Progress::new(steps);
    let jobs = args.jobs.clamp(1, 16);
    let found = execute::scenarios_and_recipes(&contenders, &scenarios, recipes, jobs, &progress);
    for ((index, contender), found) in indices.iter().zip(&contenders).zip(found) {
        let report = &mut reports[*index];
        report.cells = found.cells;
        report.recipes = found.recipes;
        report.backend_scenarios = found.own;
        if !workloads.is_empty() {
            report.performance = Some(execute::workloads(contender, &workloads, scale, &progress));
        }
    }
    progress.done();
    report::compare_tls_twins(&mut reports);

    // On a user's own servers, leave nothing behind: the runs' names all start with NAMESPACE.
    for (index, contender) in indices.iter().zip(&contenders) {
        if reports[*index].servers != "user" {
            continue;
        }
        match contender.target.clean_up(NAMESPACE) {
            Ok(deleted) => {
                eprintln!("{}: deleted {deleted} keys or rows under `{NAMESPACE}`", contender.name)
            }
            Err(error) => reports[*index].error = Some(format!("cleaning up `{NAMESPACE}`: {error}")),
        }
    }

    let ok = reports.iter().all(KindReport::ok);
    let report = Report {
        distlock_version: env!("CARGO_PKG_VERSION"),
        mode: if args.full { "full" } else { "quick" },
        elapsed_s: started.elapsed().as_secs_f64(),
        scenarios: SCENARIOS
            .iter()
            .filter(|s| scenarios.contains(&s.id))
            .map(|s| ScenarioInfo { id: s.id, title: s.title })
            .collect(),
        kinds: reports,
        ok,
    };
    print!("{}", render::terminal(&report));
    if let Some(dir) = &args.out {
        render::write_all(&report, dir)?;
        println!("report: {}", dir.display());
    }
    Ok(ok)
}
