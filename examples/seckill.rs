//! Source 001's flash sale ("秒杀"): 1,000 buyers on 8 threads race for 100 items of stock.
//!
//! Each buyer reads the stock, thinks for a moment, and writes it back decremented — the classic
//! lost-update race. Without a lock the shop oversells; with a distlock lock around each purchase
//! it sells exactly 100.
//!
//! ```text
//! cargo run --example seckill                      # in-memory backend
//! cargo run --example seckill --features redis -- redis://127.0.0.1:6379/
//! cargo run --example seckill --features postgres -- postgres://user:pw@127.0.0.1/db [table|row|advisory]
//! cargo run --example seckill --features mysql -- mysql://user:pw@127.0.0.1/db [table|row|advisory]
//! cargo run --example seckill --features zookeeper -- zk://127.0.0.1:2181[,host:port…][/root]
//! ```

use std::error::Error;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use distlock::{DistributedLock, Lock, LockClient, LockName, MemoryBackend};

const THREADS: u64 = 8;
const BUYERS: u64 = 1000;
const STOCK: i64 = 100;

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    match target.as_str() {
        "memory" => {
            let shared = MemoryBackend::new();
            sale(&target, || Ok(shared.clone()))
        }
        #[cfg(feature = "redis")]
        url if url.starts_with("redis://") || url.starts_with("rediss://") => {
            sale(&target, || distlock::redis::RedisBackend::new(url))
        }
        #[cfg(feature = "postgres")]
        url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            // Checks the arguments and creates the tables; each buyer thread then builds its own.
            let kind = postgres(url)?.kind();
            sale(&target, || distlock::postgres::PostgresBackend::builder(url).kind(kind).build())
        }
        #[cfg(feature = "mysql")]
        url if url.starts_with("mysql://") => {
            // Checks the arguments and creates the tables; each buyer thread then builds its own.
            let kind = mysql(url)?.kind();
            sale(&target, || distlock::mysql::MySqlBackend::builder(url).kind(kind).build())
        }
        #[cfg(feature = "zookeeper")]
        url if url.starts_with("zk://") => {
            sale(&target, || distlock::zookeeper::ZooKeeperLockBuilder::from_url(url)?.build())
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

/// Runs the sale twice, without and with the lock, and checks the locked one sold exactly the stock.
fn sale<B: DistributedLock>(
    label: &str,
    new_backend: impl Fn() -> distlock::Result<B> + Sync,
) -> Result<(), Box<dyn Error>> {
    println!("flash sale on {label}: {BUYERS} buyers on {THREADS} threads, {STOCK} items in stock");
    let (sold, left, took) = run::<B>(None)?;
    println!("  without a lock: sold {sold}, stock left {left} — {} ({took:.1?})", verdict(sold, left));
    let (sold, left, took) = run(Some(&new_backend))?;
    println!("  with distlock:  sold {sold}, stock left {left} — {} ({took:.1?})", verdict(sold, left));
    if sold != STOCK as u64 || left != 0 {
        return Err("the locked sale did not sell exactly the stock".into());
    }
    Ok(())
}

fn verdict(sold: u64, left: i64) -> String {
    if sold as i64 + left == STOCK && left >= 0 {
        "consistent".into()
    } else {
        format!("OVERSOLD: {} sales the stock never had", sold as i64 + left - STOCK)
    }
}

/// One sale: returns (items sold, stock left, time taken). With `new_backend`, every thread has
/// its own client (as separate processes would) and each purchase runs under the lock.
fn run<B: DistributedLock>(
    new_backend: Option<&(dyn Fn() -> distlock::Result<B> + Sync)>,
) -> Result<(u64, i64, Duration), Box<dyn Error>> {
    let stock = AtomicI64::new(STOCK);
    let sold = AtomicU64::new(0);
    let name = LockName::new("seckill:sku-1")?;
    let started = Instant::now();
    thread::scope(|s| -> Result<(), Box<dyn Error + Send + Sync>> {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let lock = new_backend
                    .map(|make| make().map(|backend| Lock::new(&LockClient::new(backend), name.clone())));
                let (stock, sold) = (&stock, &sold);
                s.spawn(move || -> Result<(), Box<dyn Error + Send + Sync>> {
                    let lock = lock.transpose()?;
                    for _ in 0..BUYERS / THREADS {
                        let guard = lock.as_ref().map(Lock::lock).transpose()?;
                        let seen = stock.load(Ordering::SeqCst);
                        if seen > 0 {
                            thread::sleep(Duration::from_micros(50)); // "check the order"
                            stock.store(seen - 1, Ordering::SeqCst);
                            sold.fetch_add(1, Ordering::SeqCst);
                        }
                        drop(guard);
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| "a buyer thread panicked")??;
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok((sold.load(Ordering::SeqCst), stock.load(Ordering::SeqCst), started.elapsed()))
}
