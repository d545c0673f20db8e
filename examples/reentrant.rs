//! Source 000's reentrant lock, made real: the same thread locks "codehole" twice and unlocks it
//! twice; the server is touched only by the first lock and the last unlock. Another client (think:
//! another process) is kept out until the last unlock.
//!
//! ```text
//! cargo run --example reentrant                                   # in-memory backend
//! cargo run --example reentrant --features redis -- redis://127.0.0.1:6379/
//! cargo run --example reentrant --features postgres -- postgres://user:pw@127.0.0.1/db [table|row|advisory]
//! cargo run --example reentrant --features mysql -- mysql://user:pw@127.0.0.1/db [table|row|advisory]
//! cargo run --example reentrant --features zookeeper -- zk://127.0.0.1:2181[,host:port…][/root]
//! ```

use std::error::Error;

use distlock::{DistributedLock, LockClient, MemoryBackend};

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    match target.as_str() {
        "memory" => {
            let shared = MemoryBackend::new();
            demo(shared.clone(), shared)
        }
        #[cfg(feature = "redis")]
        url if url.starts_with("redis://") || url.starts_with("rediss://") => {
            demo(distlock::redis::RedisBackend::new(url)?, distlock::redis::RedisBackend::new(url)?)
        }
        #[cfg(feature = "postgres")]
        url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            demo(postgres(url)?, postgres(url)?)
        }
        #[cfg(feature = "mysql")]
        url if url.starts_with("mysql://") => demo(mysql(url)?, mysql(url)?),
        #[cfg(feature = "zookeeper")]
        url if url.starts_with("zk://") => {
            let zookeeper = || distlock::zookeeper::ZooKeeperLockBuilder::from_url(url)?.build();
            demo(zookeeper()?, zookeeper()?)
        }
        other => Err(format!(
            "unknown backend {other:?}: use `memory`, or a URL of a backend whose feature is enabled"
        )
        .into()),
    }
}

/// The SQL kind named by the second argument: `table` (the default), `row` or `advisory`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sql_kind<K>(table: K, row: K, advisory: K) -> Result<K, Box<dyn Error>> {
    match std::env::args().nth(2).as_deref() {
        None | Some("table") => Ok(table),
        Some("row") => Ok(row),
        Some("advisory") => Ok(advisory),
        Some(other) => Err(format!("unknown SQL lock kind {other:?}: use table, row or advisory").into()),
    }
}

/// A PostgreSQL backend of the kind the arguments name, with its tables created.
#[cfg(feature = "postgres")]
fn postgres(url: &str) -> Result<distlock::postgres::PostgresBackend, Box<dyn Error>> {
    use distlock::postgres::{PostgresBackend, PostgresLockKind as Kind};
    let kind = sql_kind(Kind::Table, Kind::Row, Kind::Advisory)?;
    let backend = PostgresBackend::builder(url).kind(kind).build()?;
    backend.ensure_schema()?;
    Ok(backend)
}

/// A MySQL backend of the kind the arguments name, with its tables created.
#[cfg(feature = "mysql")]
fn mysql(url: &str) -> Result<distlock::mysql::MySqlBackend, Box<dyn Error>> {
    use distlock::mysql::{MySqlBackend, MySqlLockKind as Kind};
    let kind = sql_kind(Kind::Table, Kind::Row, Kind::Advisory)?;
    let backend = MySqlBackend::builder(url).kind(kind).build()?;
    backend.ensure_schema()?;
    Ok(backend)
}

fn demo<B: DistributedLock>(mine: B, theirs: B) -> Result<(), Box<dyn Error>> {
    let (me, other) = (LockClient::new(mine), LockClient::new(theirs));
    let lock = me.lock_named("codehole")?;
    let rival = other.lock_named("codehole")?;

    let outer = lock.lock()?;
    println!("lock    -> held, hold count {}", lock.hold_count());
    let inner = lock.lock()?;
    println!("lock    -> held, hold count {} (reentered: no server call)", lock.hold_count());
    println!(
        "another client try_lock -> {}",
        if rival.try_lock()?.is_some() { "acquired (BUG)" } else { "busy" }
    );

    inner.unlock()?;
    println!("unlock  -> hold count {}; still ours", lock.hold_count());
    println!(
        "another client try_lock -> {}",
        if rival.try_lock()?.is_some() { "acquired (BUG)" } else { "busy" }
    );
    outer.unlock()?;
    println!("unlock  -> hold count {}; released on the server", lock.hold_count());

    match rival.try_lock()? {
        Some(_) => println!("another client try_lock -> acquired"),
        None => return Err("the lock stayed held after the last unlock".into()),
    }
    Ok(())
}
