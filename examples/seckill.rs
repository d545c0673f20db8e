//! Source 001's flash sale ("秒杀"): 1,000 buyers on 8 threads race for 100 items of stock.
//!
//! Each buyer reads the stock, thinks for a moment, and writes it back decremented — the classic
//! lost-update race. Without a lock the shop oversells; with a distlock lock around each purchase
//! it sells exactly 100.
//!
//! ```text
//! cargo run --example seckill                      # in-memory backend
//! cargo run --example seckill --features redis -- redis://127.0.0.1:6379/ [redis-hash]
//! cargo run --example seckill --features postgres -- postgres://user:pw@127.0.0.1/db [pg-row|pg-advisory]
//! cargo run --example seckill --features mysql -- mysql://user:pw@127.0.0.1/db [mysql-row|mysql-advisory]
//! cargo run --example seckill --features zookeeper -- zk://127.0.0.1:2181[,host:port…][/namespace]
//! ```
//!
//! Any URL [`distlock::parse_url`] takes works; the optional second argument is the kind, by the
//! `distlock kinds` names.

use std::error::Error;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use distlock::{parse_url_opts, ConnectOptions, DistributedLock, Lock, LockClient, LockName, MemoryBackend};

const THREADS: u64 = 8;
const BUYERS: u64 = 1000;
const STOCK: i64 = 100;

fn main() -> Result<(), Box<dyn Error>> {
    let target = std::env::args().nth(1).unwrap_or_else(|| "memory".into());
    if target == "memory" {
        // Every buyer thread must share one in-process store.
        let shared = MemoryBackend::new();
        return sale(&target, || Ok(shared.clone()));
    }
    let mut options = ConnectOptions::new();
    if let Some(kind) = std::env::args().nth(2) {
        options = options.kind(kind.parse()?);
    }
    // Checks the arguments and creates the tables; each buyer thread then connects its own.
    parse_url_opts(&target, &options)?.ensure_schema()?;
    sale(&target, || parse_url_opts(&target, &options))
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
