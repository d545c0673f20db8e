//! Server time per lock operation: what one acquire, one renewal and one release cost the Redis
//! server, as `INFO commandstats` counts it (`CONFIG RESETSTAT` before each phase), beside the
//! plain recipe measured on the same server in the same run: `SET NX PX` to acquire, a Lua
//! compare-and-delete to release and a compare-and-`PEXPIRE` to renew (what `rslock` and most
//! blog posts do, without fencing or a fair queue).
//!
//! `commandstats` counts a command called by a script or a transaction twice: on its own line
//! and inside the caller's time. Each phase therefore adds up only the commands a client sends
//! (top-level: `EVALSHA`, `MULTI`/`EXEC`, and the reference's plain `SET`), and shows how many of
//! them one operation sent. `commandstats` times only the execution of each command: reading,
//! checking and queueing the commands of a `MULTI`/`EXEC` transaction happen outside it (a
//! script's set-up happens inside `EVALSHA`'s time), as does the network work around every
//! request. So the process CPU time (`INFO cpu`, user + system) of the same phase is printed
//! too, with the pair's ratio in it: coarse and noisy (on loopback the network dominates it),
//! but blind to nothing.

use std::fmt;
use std::time::Duration;

use lock_core::{DistributedLock, LockName, OwnerToken};

use crate::redis::{self, Connection};

/// The commands a client sends that may carry others inside their time (the lock's own requests).
const LOCK_COMMANDS: &[&str] = &["evalsha", "eval", "script", "multi", "exec"];

/// The lease every measured acquisition asks for: far longer than a phase.
const LEASE: Duration = Duration::from_secs(60);

/// The cost of one kind of operation, per operation, summed over every node measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpCost {
    /// Microseconds of command execution (`commandstats`), per operation.
    pub usec: f64,
    /// Top-level commands per operation (an `EVALSHA` is one; `MULTI` … `EXEC` of three is two).
    pub commands: f64,
    /// Microseconds of server process CPU (user + system), per operation.
    pub cpu_usec: f64,
}

/// Acquire, renewal and release costs of one recipe.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecipeCost {
    /// One fresh, uncontended acquisition.
    pub acquire: OpCost,
    /// One renewal of a held lease.
    pub renewal: OpCost,
    /// One release of a held lock.
    pub release: OpCost,
}

impl RecipeCost {
    /// Acquire + release, in `commandstats` microseconds.
    pub fn pair_usec(&self) -> f64 {
        self.acquire.usec + self.release.usec
    }
}

/// What [`measure`] found: the lock's costs and the plain recipe's, per node.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTimeReport {
    /// The lock under test, averaged over its nodes (one for a single server).
    pub lock: RecipeCost,
    /// The plain `SET NX PX` + compare-and-delete recipe on the first node.
    pub reference: RecipeCost,
    /// How many nodes the lock's costs were averaged over.
    pub nodes: usize,
    /// Operations per phase and round.
    pub ops: usize,
    /// Rounds; each figure is the median over them.
    pub rounds: usize,
    /// `PING`s per second answered by the first node to [`CONCURRENT`] connections pinging back
    /// to back: the most single-command round trips W3's eight threads can get, so at most half
    /// of it in pairs.
    pub concurrent_pings_per_second: f64,
}

impl ServerTimeReport {
    /// The lock's uncontended pair over the reference's, in `commandstats` time (target ≤ 2).
    pub fn pair_ratio(&self) -> f64 {
        self.lock.pair_usec() / self.reference.pair_usec()
    }

    /// The same in process CPU time, which also counts what `commandstats` leaves out: reading
    /// and queueing each command of a transaction, and the network around every request.
    pub fn pair_cpu_ratio(&self) -> f64 {
        (self.lock.acquire.cpu_usec + self.lock.release.cpu_usec)
            / (self.reference.acquire.cpu_usec + self.reference.release.cpu_usec)
    }
}

impl fmt::Display for ServerTimeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_node =
            if self.nodes > 1 { format!(", per node (mean of {})", self.nodes) } else { String::new() };
        writeln!(
            f,
            "server time per operation (INFO commandstats{per_node}; median of {} rounds of {} ops):",
            self.rounds, self.ops
        )?;
        writeln!(f, "  {:<9} {:>30} {:>30}", "", "this lock", "plain SET NX PX + CAD")?;
        let row = |f: &mut fmt::Formatter<'_>, what: &str, lock: OpCost, reference: OpCost| {
            let cell = |cost: OpCost| {
                format!("{:.2} µs, {:.0} cmd, cpu {:.1} µs", cost.usec, cost.commands, cost.cpu_usec)
            };
            writeln!(f, "  {what:<9} {:>30} {:>30}", cell(lock), cell(reference))
        };
        row(f, "acquire", self.lock.acquire, self.reference.acquire)?;
        row(f, "release", self.lock.release, self.reference.release)?;
        row(f, "renewal", self.lock.renewal, self.reference.renewal)?;
        let ratio = self.pair_ratio();
        writeln!(
            f,
            "  W3 limit: {CONCURRENT} connections get {:.0} PINGs/s from the server = {:.0} pairs/s of two round trips",
            self.concurrent_pings_per_second,
            self.concurrent_pings_per_second / 2.0
        )?;
        write!(
            f,
            "  pair      {:>9.2} µs = {ratio:.2} × the plain recipe's {:.2} µs (target ≤ 2.00: {}); in process CPU {:.2} ×",
            self.lock.pair_usec(),
            self.reference.pair_usec(),
            if ratio <= 2.0 { "met" } else { "NOT met" },
            self.pair_cpu_ratio()
        )
    }
}

/// Measures `backend` against the servers at `urls` (all its nodes; the reference runs on the
/// first): `rounds` rounds, each of `ops` acquisitions of fresh names, `ops` renewals and `ops`
/// releases, then the same for the plain recipe. Resets the servers' statistics.
///
/// # Errors
/// A failed operation, or a server that cannot be reached or does not report `commandstats`.
pub fn measure<B: DistributedLock>(
    backend: &B,
    urls: &[String],
    ops: usize,
    rounds: usize,
) -> Result<ServerTimeReport, String> {
    let mut nodes = urls.iter().map(|url| connect(url)).collect::<Result<Vec<_>, _>>()?;
    let (ops, rounds) = (ops.max(1), rounds.max(1));
    let mut lock = Vec::with_capacity(rounds);
    let mut reference = Vec::with_capacity(rounds);
    // Every name of this run starts with `run` (under the suite's namespace, `distlock-bench:`
    // on a user's server), for the clean-ups: this one's, and the caller's if this one fails.
    let run = lock_testkit::suite::unique_name("server-time");
    for round in 0..rounds {
        lock.push(lock_round(backend, &mut nodes, &run, ops, round)?);
        reference.push(reference_round(&mut nodes[0], ops, round)?);
    }
    // The fencing counters never expire: delete what the measured names left.
    for url in urls {
        super::single_node::delete_keys_of_names(url, "distlock", run.as_str())?;
    }
    let node_count = nodes.len() as f64;
    let per_node = |cost: OpCost| OpCost {
        usec: cost.usec / node_count,
        commands: cost.commands / node_count,
        cpu_usec: cost.cpu_usec / node_count,
    };
    let lock = median(&lock);
    Ok(ServerTimeReport {
        lock: RecipeCost {
            acquire: per_node(lock.acquire),
            renewal: per_node(lock.renewal),
            release: per_node(lock.release),
        },
        reference: median(&reference),
        nodes: nodes.len(),
        ops,
        rounds,
        concurrent_pings_per_second: concurrent_pings(&urls[0])?,
    })
}

/// The connections of [`ServerTimeReport::concurrent_pings_per_second`]: W3's eight threads.
pub const CONCURRENT: usize = 8;

/// How long the concurrent `PING`s run.
const PING_TIME: Duration = Duration::from_secs(1);

fn concurrent_pings(url: &str) -> Result<f64, String> {
    let mut connections = (0..CONCURRENT).map(|_| connect(url)).collect::<Result<Vec<_>, _>>()?;
    let started = std::time::Instant::now();
    let counts = std::thread::scope(|scope| {
        let threads: Vec<_> = connections
            .iter_mut()
            .map(|connection| {
                scope.spawn(move || {
                    let mut count = 0u64;
                    while started.elapsed() < PING_TIME {
                        redis::cmd("PING").query::<()>(connection).map_err(|e| format!("PING: {e}"))?;
                        count += 1;
                    }
                    Ok::<u64, String>(count)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().unwrap_or_else(|_| Err("a PING thread panicked".into())))
            .collect::<Result<Vec<u64>, String>>()
    })?;
    Ok(counts.iter().sum::<u64>() as f64 / started.elapsed().as_secs_f64())
}

fn lock_round<B: DistributedLock>(
    backend: &B,
    nodes: &mut [Connection],
    run: &LockName,
    ops: usize,
    round: usize,
) -> Result<RecipeCost, String> {
    let owner = OwnerToken::random();
    let names = (0..ops)
        .map(|i| LockName::new(format!("{run}-{round}-{i}")).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // Warm-up: the scripts are loaded and the connections made before anything is counted.
    let warm = LockName::new(format!("{run}-warm")).map_err(|e| e.to_string())?;
    for _ in 0..2 {
        let mut lease =
            backend.try_acquire(&warm, &owner, LEASE).map_err(|e| e.to_string())?.ok_or("warm-up refused")?;
        backend.extend(&mut lease, LEASE).map_err(|e| e.to_string())?;
        backend.release(lease).map_err(|e| e.to_string())?;
    }
    let mut leases = Vec::with_capacity(ops);
    let acquire = phase(nodes, LOCK_COMMANDS, ops, |_| {
        for name in &names {
            let lease = backend.try_acquire(name, &owner, LEASE).map_err(|e| e.to_string())?;
            leases.push(lease.ok_or_else(|| format!("{name}: a fresh name was refused"))?);
        }
        Ok(())
    })?;
    let renewal = phase(nodes, LOCK_COMMANDS, ops, |_| {
        for lease in &mut leases {
            if !backend.extend(lease, LEASE).map_err(|e| e.to_string())? {
                return Err("a held lease was not renewed".into());
            }
        }
        Ok(())
    })?;
    let release = phase(nodes, LOCK_COMMANDS, ops, |_| {
        for lease in leases.drain(..) {
            if !backend.release(lease).map_err(|e| e.to_string())? {
                return Err("a held lock was not released".into());
            }
        }
        Ok(())
    })?;
    Ok(RecipeCost { acquire, renewal, release })
}

/// The plain recipe, by hand: `SET NX PX`, then compare-and-`PEXPIRE` and compare-and-delete.
fn reference_round(node: &mut Connection, ops: usize, round: usize) -> Result<RecipeCost, String> {
    let renew = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end",
    );
    let delete = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    );
    let token = OwnerToken::random().to_hex();
    let keys: Vec<String> = (0..ops).map(|i| format!("distlock-reference:{token}:{round}:{i}")).collect();
    let lease = LEASE.as_millis() as u64;
    let warm = format!("distlock-reference:{token}:warm");
    let _: () = redis::cmd("SET").arg(&warm).arg(&token).query(node).map_err(|e| e.to_string())?;
    let _: i64 = renew.key(&warm).arg(&token).arg(lease).invoke(node).map_err(|e| e.to_string())?;
    let _: i64 = delete.key(&warm).arg(&token).invoke(node).map_err(|e| e.to_string())?;
    let nodes = std::slice::from_mut(node);
    let acquire = phase(nodes, &["set"], ops, |nodes| {
        let node = &mut nodes[0];
        for key in &keys {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(lease)
                .query(node)
                .map_err(|e| e.to_string())?;
            set.ok_or("the reference SET NX was refused on a fresh key")?;
        }
        Ok(())
    })?;
    let renewal = phase(nodes, &["evalsha"], ops, |nodes| {
        let node = &mut nodes[0];
        for key in &keys {
            let renewed: i64 =
                renew.key(key).arg(&token).arg(lease).invoke(node).map_err(|e| e.to_string())?;
            if renewed != 1 {
                return Err("the reference renewal failed".into());
            }
        }
        Ok(())
    })?;
    let release = phase(nodes, &["evalsha"], ops, |nodes| {
        let node = &mut nodes[0];
        for key in &keys {
            let deleted: i64 = delete.key(key).arg(&token).invoke(node).map_err(|e| e.to_string())?;
            if deleted != 1 {
                return Err("the reference release failed".into());
            }
        }
        Ok(())
    })?;
    Ok(RecipeCost { acquire, renewal, release })
}

/// Resets the statistics of every node, runs `work` (`ops` operations), and sums the time of the
/// `top_level` commands over the nodes.
fn phase(
    nodes: &mut [Connection],
    top_level: &[&str],
    ops: usize,
    work: impl FnOnce(&mut [Connection]) -> Result<(), String>,
) -> Result<OpCost, String> {
    let mut cpu_before = 0.0;
    for node in nodes.iter_mut() {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(node)
            .map_err(|e| format!("CONFIG RESETSTAT: {e}"))?;
        cpu_before += cpu_seconds(node)?;
    }
    work(nodes)?;
    let (mut usec, mut calls, mut cpu_after) = (0u64, 0u64, 0.0);
    for node in nodes.iter_mut() {
        cpu_after += cpu_seconds(node)?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(node)
            .map_err(|e| format!("INFO commandstats: {e}"))?;
        for (command, stats) in parse_commandstats(&info) {
            if top_level.contains(&command.as_str()) {
                usec += stats.usec;
                calls += stats.calls;
            }
        }
    }
    let ops = ops as f64;
    Ok(OpCost {
        usec: usec as f64 / ops,
        commands: calls as f64 / ops,
        cpu_usec: (cpu_after - cpu_before) * 1e6 / ops,
    })
}

/// A probe connection to `url`, its error naming the server (without its password).
fn connect(url: &str) -> Result<Connection, String> {
    super::single_node::probe(url).map_err(|e| format!("{}: {e}", lock_core::redact_url(url)))
}

/// The server process's CPU time so far (user + system), in seconds.
fn cpu_seconds(node: &mut Connection) -> Result<f64, String> {
    let info: String = redis::cmd("INFO").arg("cpu").query(node).map_err(|e| format!("INFO cpu: {e}"))?;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("INFO cpu has no {name}"))
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// One `cmdstat_<command>:calls=…,usec=…` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CommandStats {
    calls: u64,
    usec: u64,
}

/// The lines of `INFO commandstats`, by lower-case command name (subcommands as `config|set`).
fn parse_commandstats(info: &str) -> Vec<(String, CommandStats)> {
    info.lines()
        .filter_map(|line| {
            let (command, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok())
            };
            Some((command.to_owned(), CommandStats { calls: field("calls")?, usec: field("usec")? }))
        })
        .collect()
}

/// The median of each figure over the rounds.
fn median(rounds: &[RecipeCost]) -> RecipeCost {
    let of = |pick: fn(&RecipeCost) -> OpCost| {
        let figure = |get: fn(&OpCost) -> f64| {
            let mut values: Vec<f64> = rounds.iter().map(|round| get(&pick(round))).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        OpCost {
            usec: figure(|c| c.usec),
            commands: figure(|c| c.commands),
            cpu_usec: figure(|c| c.cpu_usec),
        }
    };
    RecipeCost { acquire: of(|r| r.acquire), renewal: of(|r| r.renewal), release: of(|r| r.release) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines_are_parsed_with_subcommands() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=3,usec=21,usec_per_call=7.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00\r\n";
        let parsed = parse_commandstats(info);
        assert_eq!(parsed[0], ("evalsha".to_owned(), CommandStats { calls: 3, usec: 21 }));
        assert_eq!(parsed[1].0, "config|resetstat");
    }

    #[test]
    fn medians_are_taken_per_figure() {
        let cost = |usec| RecipeCost {
            acquire: OpCost { usec, commands: 1.0, cpu_usec: usec },
            ..RecipeCost::default()
        };
        assert_eq!(median(&[cost(3.0), cost(1.0), cost(2.0)]).acquire.usec, 2.0);
    }
}
