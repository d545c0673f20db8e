//! etcd's own server-side Lock service beside the lock (`distlock bench etcd`): the `Lock` and
//! `Unlock` RPCs (v3lock: etcd runs the same `concurrency.Mutex` on the server, on the caller's
//! lease) against the backend's own acquisition (as `lock()` makes it) + `release`, through the same client — one
//! connection, one runtime thread, one lease — one pair of each in turn, so the difference of
//! their medians is what the client-side recipe costs against etcd's own.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::LockOptions;
use lock_core::{DistributedLock, LockName, NativeWait, OwnerToken};

use crate::EtcdBackend;

/// The lease of every pair of the lock (never reached: each is released at once).
const LEASE: Duration = Duration::from_secs(60);

/// The medians of both kinds of uncontended pair.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LockServicePairs {
    /// Pairs of each kind timed (after as many to warm up).
    pub pairs: usize,
    /// The lock's pair through its backend (`try_acquire` + `release`) on fresh names.
    pub lock_p50: Duration,
    /// etcd's Lock service: a `Lock` RPC on the client's lease, then `Unlock` of its key.
    pub service_p50: Duration,
}

impl LockServicePairs {
    /// The lock's median pair as a multiple of the Lock service's (below 1: faster).
    pub fn ratio(&self) -> f64 {
        self.lock_p50.as_secs_f64() / self.service_p50.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

impl fmt::Display for LockServicePairs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "uncontended pair p50 ({} pairs each, alternated on one client and lease): this lock {:.0} µs, \
             etcd's Lock service (Lock + Unlock RPCs) {:.0} µs: {:.2} × the Lock service's",
            self.pairs,
            self.lock_p50.as_secs_f64() * 1e6,
            self.service_p50.as_secs_f64() * 1e6,
            self.ratio()
        )
    }
}

impl EtcdBackend {
    /// Times `pairs` uncontended pairs of the lock (`acquire_until` + `release`, as `lock()`) and as many of
    /// etcd's Lock service (`Lock` on this client's lease + `Unlock`) through this backend's
    /// client, one of each in turn, on fresh names under the namespace, and gives both medians.
    /// Both leave nothing behind: each pair deletes its key.
    ///
    /// # Errors
    /// As any request; a fresh name found held.
    pub fn lock_service_pairs(&self, pairs: usize) -> lock_core::Result<LockServicePairs> {
        static RUN: AtomicU64 = AtomicU64::new(0);
        crate::blocking::refuse_async_context()?;
        let session = &self.inner.session;
        let run = format!("{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed));
        let owner = OwnerToken::random();
        let pairs = pairs.max(1);
        let (mut lock_times, mut service_times) = (Vec::with_capacity(pairs), Vec::with_capacity(pairs));
        for i in 0..2 * pairs {
            let name = LockName::new(format!("lock-service-{run}-{i}"))?;
            let started = Instant::now();
            // As W1's `lock()`: a wait that finds the lock free (a `try_lock`, whose hold counts
            // from when it was asked, may also confirm a keep-alive in parallel).
            let acquired = self.acquire_until(&name, &owner, LEASE, None)?.ok_or_else(|| {
                lock_core::Error::backend(crate::error::BACKEND, format!("{name}: a fresh name was refused"))
            })?;
            self.release(acquired.lease)?;
            let lock_time = started.elapsed();

            // The server-side recipe on a name of its own, on the same lease as the lock's keys.
            let prefix = self.lock_prefix(&LockName::new(format!("lock-service-rpc-{run}-{i}"))?);
            let lease_id = session.lease()?.id;
            let mut client = session.client().clone();
            let started = Instant::now();
            // Two blocking calls, as a blocking program makes them (and as the lock's pair does).
            let locked = session
                .call_until(
                    self.io_deadline(),
                    client.lock(prefix.as_str(), Some(LockOptions::new().with_lease(lease_id))),
                )
                .map_err(|failure| failure.into_error("time etcd's Lock service"))?;
            session
                .call_until(self.io_deadline(), client.unlock(locked.key().to_vec()))
                .map_err(|failure| failure.into_error("time etcd's Lock service"))?;
            let service_time = started.elapsed();
            // The first half warms the connection and the server up.
            if i >= pairs {
                lock_times.push(lock_time);
                service_times.push(service_time);
            }
        }
        Ok(LockServicePairs {
            pairs,
            lock_p50: median(&mut lock_times),
            service_p50: median(&mut service_times),
        })
    }
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}
