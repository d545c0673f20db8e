//! `distlock inspect --url URL NAME` (or `--name NAME`): what the server knows of one lock — holder, remaining
//! lease, fencing counter, waiters — for the backends that keep it where a client can read it.
//! Read-only: it takes no lock and changes nothing.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use distlock::LockName;

/// Options of `distlock inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The lock server: a `redis://`, `rediss://`, `postgres://`, `postgresql://`, `mysql://`,
    /// `zk://`, `etcd://` or `etcds://` URL, or a libpq `key=value` string.
    #[arg(long)]
    url: String,
    /// The lock's name (also accepted as `--name`, as `exec`, `elect` and `leader` take it).
    #[arg(required_unless_present = "name_flag", conflicts_with = "name_flag")]
    name: Option<String>,
    /// The lock's name.
    #[arg(long = "name", value_name = "NAME")]
    name_flag: Option<String>,
}

/// What could be read of a lock; `None` where the backend keeps no such thing.
#[derive(Debug, Default)]
struct Seen {
    holder: Option<String>,
    remaining_lease: Option<Duration>,
    fencing_counter: Option<u64>,
    waiters: Option<usize>,
    note: Option<&'static str>,
}

/// Runs `distlock inspect`: prints what it saw; exit 0, or 1 when the server cannot be read.
pub fn run(args: &InspectArgs) -> ExitCode {
    // clap requires exactly one of the two.
    let shown = args.name_flag.clone().or_else(|| args.name.clone()).unwrap_or_default();
    let seen =
        LockName::new(shown.as_str()).map_err(|e| e.to_string()).and_then(|name| read(&args.url, &name));
    match seen {
        Ok(seen) => {
            let show = |value: Option<String>| value.unwrap_or_else(|| "(not kept by this backend)".into());
            println!("lock:            {shown}");
            println!("holder:          {}", seen.holder.unwrap_or_else(|| "none (free)".into()));
            println!("remaining lease: {}", show(seen.remaining_lease.map(|d| format!("{d:.3?}"))));
            println!("fencing counter: {}", show(seen.fencing_counter.map(|n| n.to_string())));
            println!("waiters:         {}", show(seen.waiters.map(|n| n.to_string())));
            if let Some(note) = seen.note {
                println!("note:            {note}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("distlock inspect: {error}");
            ExitCode::FAILURE
        }
    }
}

/// How long `inspect` waits for a connection and for each reply.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Reads what the backend the URL names (through the facade's [`distlock::parse_url_opts`], as
/// every command does) keeps of the lock.
fn read(url: &str, name: &LockName) -> Result<Seen, String> {
    let options = distlock::ConnectOptions::new().connect_timeout(TIMEOUT).io_timeout(TIMEOUT);
    let backend = distlock::parse_url_opts(url, &options)
        .map_err(|e| format!("connecting to {}: {e}", distlock::redact_url(url)))?;
    match backend {
        #[cfg(feature = "redis")]
        distlock::AnyBackend::Redis(backend) => redis(&backend, name),
        #[cfg(feature = "postgres")]
        distlock::AnyBackend::Postgres(backend) => {
            let remaining = backend.remaining_lease(name).map_err(|e| e.to_string())?;
            Ok(Seen {
                holder: Some(
                    remaining.map_or("none in the lock table".into(), |_| "held (lock-table row)".into()),
                ),
                remaining_lease: remaining,
                note: Some("the lock-table kind only; row and advisory holds live in pg_locks"),
                ..Seen::default()
            })
        }
        #[cfg(feature = "mysql")]
        distlock::AnyBackend::MySql(backend) => {
            let remaining = backend.remaining_lease(name).map_err(|e| e.to_string())?;
            Ok(Seen {
                holder: Some(
                    remaining.map_or("none in the lock table".into(), |_| "held (lock-table row)".into()),
                ),
                remaining_lease: remaining,
                note: Some(
                    "the lock-table kind only; row and advisory holds live in the server's lock tables",
                ),
                ..Seen::default()
            })
        }
        #[cfg(feature = "zookeeper")]
        distlock::AnyBackend::ZooKeeper(backend) => {
            let contenders = backend.contenders(name).map_err(|e| e.to_string())?;
            let holder = backend.holder(name).map_err(|e| e.to_string())?;
            Ok(Seen {
                holder: holder.as_ref().map(|(node, _)| format!("node {node}")),
                fencing_counter: holder.map(|(_, czxid)| czxid),
                waiters: Some(contenders.len().saturating_sub(1)),
                note: Some("a session hold has no lease; the fencing counter is the holder node's czxid"),
                ..Seen::default()
            })
        }
        #[cfg(feature = "etcd")]
        distlock::AnyBackend::Etcd(backend) => {
            // The same keys as `etcdctl lock`'s: its holders and waiters show here too.
            let contenders = backend.contenders(name).map_err(|e| e.to_string())?;
            let holder = backend.holder(name).map_err(|e| e.to_string())?;
            Ok(Seen {
                holder: holder.as_ref().map(|(key, _)| format!("key {key}")),
                fencing_counter: holder.map(|(_, revision)| revision),
                waiters: Some(contenders.len().saturating_sub(1)),
                note: Some(
                    "a session hold: the key lives as long as its client's lease; the fencing counter is the holder key's create revision",
                ),
                ..Seen::default()
            })
        }
        other => Err(format!(
            "inspect does not read {} locks (it reads one Redis server, PostgreSQL, MySQL, ZooKeeper and etcd)",
            distlock::DistributedLock::backend_name(&other)
        )),
    }
}

/// The keys of a Redis lock (one server, Sentinel, Cluster): the owner (string or hash), its TTL, the fencing
/// counter and the wait queue.
#[cfg(feature = "redis")]
fn redis(backend: &distlock::redis::RedisBackend, name: &LockName) -> Result<Seen, String> {
    use distlock::redis::redis::{self as r, Commands as _};
    use distlock::redis::RedisKeys;

    let keys = RedisKeys::new("distlock", name);
    // The URL parsed and connected through the facade already; a driver error never shows it.
    let error = |e: r::RedisError| e.to_string();
    // The node that serves the name: the one server, Sentinel's primary, the slot's primary.
    let mut connection = backend.node_connection(name).map_err(|e| e.to_string())?;
    let kind: String = r::cmd("TYPE").arg(keys.lock()).query(&mut connection).map_err(error)?;
    let holder = match kind.as_str() {
        // A free lock reserved for the head of the wait queue (its turn, a few hundred ms).
        "string" => connection.get::<_, Option<String>>(keys.lock()).map_err(error)?.map(|owner| match owner
            .strip_prefix("turn:")
        {
            Some(waiter) => format!("none: reserved for waiter {waiter} (its turn)"),
            None => format!("owner {owner}"),
        }),
        "hash" => {
            let owners: Vec<(String, i64)> = connection.hgetall(keys.lock()).map_err(error)?;
            owners.first().map(|(owner, count)| format!("owner {owner} (hold count {count})"))
        }
        _ => None,
    };
    let reserved = holder.as_deref().is_some_and(|holder| holder.starts_with("none: reserved"));
    // A reservation's expiry is the head's turn, not a lease.
    let pttl: i64 = if reserved { -2 } else { connection.pttl(keys.lock()).map_err(error)? };
    let fence: Option<u64> = connection.get(keys.fence()).map_err(error)?;
    let waiters: usize = connection.zcard(keys.queue()).map_err(error)?;
    Ok(Seen {
        holder,
        remaining_lease: u64::try_from(pttl).ok().map(Duration::from_millis),
        fencing_counter: fence,
        waiters: Some(waiters),
        note: None,
    })
}
