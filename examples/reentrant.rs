//! Source 000's reentrant lock, made real: the same thread locks "codehole" twice and unlocks it
//! twice; the server is touched only by the first lock and the last unlock. Another client (think:
//! another process) is kept out until the last unlock.
//!
//! ```text
//! cargo run --example reentrant                                   # in-memory backend
//! cargo run --example reentrant --features redis -- redis://127.0.0.1:6379/ [redis-hash]
//! cargo run --example reentrant --features postgres -- postgres://user:pw@127.0.0.1/db [pg-row|pg-advisory]
//! cargo run --example reentrant --features mysql -- mysql://user:pw@127.0.0.1/db [mysql-row|mysql-advisory]
//! cargo run --example reentrant --features zookeeper -- zk://127.0.0.1:2181[,host:port…][/namespace]
//! ```
//!
//! Any URL [`distlock::parse_url`] takes works; the optional second argument is the kind, by the
//! `distlock kinds` names.

use std::error::Error;

use distlock::{parse_url_opts, AnyBackend, ConnectOptions, DistributedLock, LockClient, MemoryBackend};

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    if target == "memory" {
        // Both clients must share one in-process store.
        let shared = MemoryBackend::new();
        return demo(shared.clone(), shared);
    }
    demo(backend(&target)?, backend(&target)?)
}

/// The backend `url` names, of the kind the second argument names, with its tables created.
fn backend(url: &str) -> Result<AnyBackend, Box<dyn Error>> {
    let mut options = ConnectOptions::new();
    if let Some(kind) = std::env::args().nth(2) {
        options = options.kind(kind.parse()?);
    }
    let backend = parse_url_opts(url, &options)?;
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
