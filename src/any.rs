//! [`AnyBackend`]: every backend this build has, as one type — what [`parse_url`](crate::parse_url)
//! returns, so a program can take its lock server from configuration.

use std::time::{Duration, Instant};

use lock_core::{
    Access, Acquired, BackendProfile, DistributedLock, Elections, Error, Extension, Fencing, FencingToken,
    HoldKind, Leader, LeaderWatch, LockName, MemoryBackend, MemoryLease, NativeWait, OwnerToken, Permits,
    ReadWrite, Request, Result,
};

/// One backend of any kind this build has (each variant behind its Cargo feature), implementing
/// [`DistributedLock`] — and [`NativeWait`], [`Fencing`], [`ReadWrite`], [`Permits`] and [`Elections`] exactly
/// when the inner backend does —
/// by delegation.
///
/// ```
/// use distlock::{AnyBackend, LockClient, MemoryBackend};
///
/// let client = LockClient::new(AnyBackend::Memory(MemoryBackend::new()));
/// let guard = client.lock_named("reports:daily")?.lock()?;
/// assert!(guard.fencing_token().is_some());
/// # Ok::<(), distlock::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyBackend {
    /// The in-process backend.
    Memory(MemoryBackend),
    /// Redis, one server.
    #[cfg(feature = "redis")]
    Redis(lock_redis::RedisBackend),
    /// Redlock over independent Redis servers.
    #[cfg(feature = "redis")]
    Redlock(lock_redis::RedlockBackend),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(lock_sql::postgres::PostgresBackend),
    /// MySQL or MariaDB.
    #[cfg(feature = "mysql")]
    MySql(lock_sql::mysql::MySqlBackend),
    /// ZooKeeper.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(lock_zk::ZooKeeperBackend),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(lock_etcd::EtcdBackend),
}

/// A lease of an [`AnyBackend`]: the inner backend's lease, in the variant of its backend.
// Unboxed: a lease is made once per acquisition and moved a few times; boxing the large ones would
// add an allocation to every acquisition for a few hundred bytes saved.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyLease {
    /// Of [`AnyBackend::Memory`].
    Memory(MemoryLease),
    /// Of [`AnyBackend::Redis`].
    #[cfg(feature = "redis")]
    Redis(lock_redis::RedisLease),
    /// Of [`AnyBackend::Redlock`].
    #[cfg(feature = "redis")]
    Redlock(lock_redis::RedlockLease),
    /// Of [`AnyBackend::Postgres`].
    #[cfg(feature = "postgres")]
    Postgres(lock_sql::postgres::PostgresLease),
    /// Of [`AnyBackend::MySql`].
    #[cfg(feature = "mysql")]
    MySql(lock_sql::mysql::MySqlLease),
    /// Of [`AnyBackend::ZooKeeper`].
    #[cfg(feature = "zookeeper")]
    ZooKeeper(lock_zk::ZooKeeperLease),
    /// Of [`AnyBackend::Etcd`].
    #[cfg(feature = "etcd")]
    Etcd(lock_etcd::EtcdLease),
}

/// Runs `$body` with `$inner` bound to the inner backend, whatever the variant.
macro_rules! each {
    ($backend:expr, $inner:ident => $body:expr) => {
        match $backend {
            AnyBackend::Memory($inner) => $body,
            #[cfg(feature = "redis")]
            AnyBackend::Redis($inner) => $body,
            #[cfg(feature = "redis")]
            AnyBackend::Redlock($inner) => $body,
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres($inner) => $body,
            #[cfg(feature = "mysql")]
            AnyBackend::MySql($inner) => $body,
            #[cfg(feature = "zookeeper")]
            AnyBackend::ZooKeeper($inner) => $body,
            #[cfg(feature = "etcd")]
            AnyBackend::Etcd($inner) => $body,
        }
    };
}

/// Runs `$body` with the inner backend and the inner lease when their variants match, and
/// `$mismatch` (with the backend) when they do not.
macro_rules! paired {
    ($backend:expr, $lease:expr, |$inner:ident, $inner_lease:ident| $body:expr, |$any:ident| $mismatch:expr) => {
        match ($backend, $lease) {
            (AnyBackend::Memory($inner), AnyLease::Memory($inner_lease)) => $body,
            #[cfg(feature = "redis")]
            (AnyBackend::Redis($inner), AnyLease::Redis($inner_lease)) => $body,
            #[cfg(feature = "redis")]
            (AnyBackend::Redlock($inner), AnyLease::Redlock($inner_lease)) => $body,
            #[cfg(feature = "postgres")]
            (AnyBackend::Postgres($inner), AnyLease::Postgres($inner_lease)) => $body,
            #[cfg(feature = "mysql")]
            (AnyBackend::MySql($inner), AnyLease::MySql($inner_lease)) => $body,
            #[cfg(feature = "zookeeper")]
            (AnyBackend::ZooKeeper($inner), AnyLease::ZooKeeper($inner_lease)) => $body,
            #[cfg(feature = "etcd")]
            (AnyBackend::Etcd($inner), AnyLease::Etcd($inner_lease)) => $body,
            // Unreachable with no backend feature: the memory pair is then the only one.
            #[allow(unreachable_patterns)]
            ($any, _) => $mismatch,
        }
    };
}

/// `From` each inner lease, so that one delegating body fits every variant.
macro_rules! lease_from {
    ($($(#[$cfg:meta])* $variant:ident($lease:ty)),* $(,)?) => {$(
        $(#[$cfg])*
        impl From<$lease> for AnyLease {
            fn from(lease: $lease) -> Self {
                AnyLease::$variant(lease)
            }
        }
    )*};
}

lease_from! {
    Memory(MemoryLease),
    #[cfg(feature = "redis")] Redis(lock_redis::RedisLease),
    #[cfg(feature = "redis")] Redlock(lock_redis::RedlockLease),
    #[cfg(feature = "postgres")] Postgres(lock_sql::postgres::PostgresLease),
    #[cfg(feature = "mysql")] MySql(lock_sql::mysql::MySqlLease),
    #[cfg(feature = "zookeeper")] ZooKeeper(lock_zk::ZooKeeperLease),
    #[cfg(feature = "etcd")] Etcd(lock_etcd::EtcdLease),
}

/// A lease of another backend's variant handed to this one: a caller's bug, reported as such.
fn mismatch(backend: &AnyBackend) -> Error {
    Error::invalid_config(format!(
        "a lease of another backend was handed to the {} backend of this AnyBackend",
        backend.backend_name()
    ))
}

impl AnyBackend {
    /// Creates the tables the SQL lock-table and row kinds use, if absent (see each backend's
    /// `ensure_schema`); nothing for the other backends.
    ///
    /// # Errors
    /// As the SQL backends' `ensure_schema`: the server's refusal (no right to create tables),
    /// or a connection error.
    pub fn ensure_schema(&self) -> Result<()> {
        match self {
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres(backend) => backend.ensure_schema(),
            #[cfg(feature = "mysql")]
            AnyBackend::MySql(backend) => backend.ensure_schema(),
            _ => Ok(()),
        }
    }

    /// A [`FencedStore`](lock_core::FencedStore) on this backend's own servers (SQL kinds: in
    /// `table`, created if missing; the others ignore `table`): the guarded-write store of
    /// `docs/guarded-writes.md` for a backend made from a URL.
    ///
    /// # Errors
    /// [`Error::Unsupported`](lock_core::Error::Unsupported) for Redlock (its nodes are
    /// independent: fence the data's own store); an invalid `table`; what creating it reports.
    pub fn fenced_store(&self, table: &str) -> Result<Box<dyn lock_core::FencedStore>> {
        // Only the SQL kinds name a table.
        let _ = table;
        Ok(match self {
            AnyBackend::Memory(backend) => Box::new(backend.fenced_store()),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(backend) => Box::new(lock_redis::RedisFencedStore::new(backend.clone())),
            #[cfg(feature = "redis")]
            AnyBackend::Redlock(_) => {
                return Err(lock_core::Error::Unsupported { backend: "redlock", feature: "a fenced store" })
            }
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres(backend) => {
                let store = lock_sql::postgres::PostgresFencedStore::new(backend.clone(), table)?;
                store.ensure_table()?;
                Box::new(store)
            }
            #[cfg(feature = "mysql")]
            AnyBackend::MySql(backend) => {
                let store = lock_sql::mysql::MySqlFencedStore::new(backend.clone(), table)?;
                store.ensure_table()?;
                Box::new(store)
            }
            #[cfg(feature = "zookeeper")]
            AnyBackend::ZooKeeper(backend) => Box::new(lock_zk::ZooKeeperFencedStore::new(backend.clone())),
            #[cfg(feature = "etcd")]
            AnyBackend::Etcd(backend) => Box::new(lock_etcd::EtcdFencedStore::new(backend.clone())),
        })
    }
}

/// Extends a batch of [`AnyLease`]s on `backend`, whose own lease `pick` finds in each: one
/// inner batch (so the backend's own batching applies), a mismatched lease an error at its place.
fn extend_batch<B: DistributedLock>(
    any: &AnyBackend,
    backend: &B,
    batch: &mut [Extension<'_, AnyLease>],
    pick: fn(&mut AnyLease) -> Option<&mut B::Lease>,
) -> Vec<Result<bool>> {
    let mut results: Vec<Option<Result<bool>>> = batch.iter().map(|_| None).collect();
    let mut places = Vec::with_capacity(batch.len());
    let mut inner = Vec::with_capacity(batch.len());
    for (place, item) in batch.iter_mut().enumerate() {
        let ttl = item.ttl;
        match pick(item.lease) {
            Some(lease) => {
                places.push(place);
                inner.push(Extension::new(lease, ttl));
            }
            None => results[place] = Some(Err(mismatch(any))),
        }
    }
    for (place, result) in places.into_iter().zip(backend.extend_many(&mut inner)) {
        results[place] = Some(result);
    }
    results
        .into_iter()
        .map(|result| {
            result.unwrap_or_else(|| {
                Err(Error::backend(any.backend_name(), "the backend returned fewer results than leases"))
            })
        })
        .collect()
}

/// The inner lease of `$variant`, for [`extend_batch`].
macro_rules! pick {
    ($variant:ident) => {
        |lease| match lease {
            AnyLease::$variant(lease) => Some(lease),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    };
}

impl DistributedLock for AnyBackend {
    type Lease = AnyLease;

    fn backend_name(&self) -> &'static str {
        each!(self, inner => inner.backend_name())
    }

    fn kind_name(&self) -> &'static str {
        each!(self, inner => inner.kind_name())
    }

    fn hold_kind(&self) -> HoldKind {
        each!(self, inner => inner.hold_kind())
    }

    fn lease_margin(&self, ttl: Duration) -> Duration {
        each!(self, inner => inner.lease_margin(ttl))
    }

    fn session_suspended(&self) -> bool {
        each!(self, inner => inner.session_suspended())
    }

    fn doubt_signal(&self, lease: &AnyLease) -> Option<lock_core::DoubtSignal> {
        paired!(self, lease, |inner, lease| inner.doubt_signal(lease), |_any| None)
    }

    fn profile(&self) -> BackendProfile {
        each!(self, inner => inner.profile())
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<AnyLease>> {
        each!(self, inner => inner.try_acquire(name, owner, ttl).map(|lease| lease.map(AnyLease::from)))
    }

    fn extend(&self, lease: &mut AnyLease, ttl: Duration) -> Result<bool> {
        paired!(self, lease, |inner, lease| inner.extend(lease, ttl), |any| Err(mismatch(any)))
    }

    fn extend_many(&self, batch: &mut [Extension<'_, AnyLease>]) -> Vec<Result<bool>> {
        match self {
            AnyBackend::Memory(inner) => extend_batch(self, inner, batch, pick!(Memory)),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(inner) => extend_batch(self, inner, batch, pick!(Redis)),
            #[cfg(feature = "redis")]
            AnyBackend::Redlock(inner) => extend_batch(self, inner, batch, pick!(Redlock)),
            #[cfg(feature = "postgres")]
            AnyBackend::Postgres(inner) => extend_batch(self, inner, batch, pick!(Postgres)),
            #[cfg(feature = "mysql")]
            AnyBackend::MySql(inner) => extend_batch(self, inner, batch, pick!(MySql)),
            #[cfg(feature = "zookeeper")]
            AnyBackend::ZooKeeper(inner) => extend_batch(self, inner, batch, pick!(ZooKeeper)),
            #[cfg(feature = "etcd")]
            AnyBackend::Etcd(inner) => extend_batch(self, inner, batch, pick!(Etcd)),
        }
    }

    fn extends_independently(&self) -> bool {
        each!(self, inner => inner.extends_independently())
    }

    fn release(&self, lease: AnyLease) -> Result<bool> {
        paired!(self, lease, |inner, lease| inner.release(lease), |any| Err(mismatch(any)))
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = AnyLease>> {
        let able = each!(self, inner => inner.native_wait().is_some());
        able.then_some(self as &dyn NativeWait<Lease = AnyLease>)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = AnyLease>> {
        let able = each!(self, inner => inner.fencing().is_some());
        able.then_some(self as &dyn Fencing<Lease = AnyLease>)
    }

    fn read_write(&self) -> Option<&dyn ReadWrite<Lease = AnyLease>> {
        let able = each!(self, inner => inner.read_write().is_some());
        able.then_some(self as &dyn ReadWrite<Lease = AnyLease>)
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = AnyLease>> {
        let able = each!(self, inner => inner.permits().is_some());
        able.then_some(self as &dyn Permits<Lease = AnyLease>)
    }

    fn elections(&self) -> Option<&dyn Elections<Lease = AnyLease>> {
        let able = each!(self, inner => inner.elections().is_some());
        able.then_some(self as &dyn Elections<Lease = AnyLease>)
    }

    fn missing_abilities(&self) -> Option<&'static str> {
        each!(self, inner => inner.missing_abilities())
    }
}

/// The inner backend's [`Elections`]; [`Error::Unsupported`] from each method when it has none
/// (then [`elections`](DistributedLock::elections) is `None`, and lock-core never calls them).
impl Elections for AnyBackend {
    fn campaign(&self, request: &Request<'_>, value: &[u8]) -> Result<Option<Acquired<AnyLease>>> {
        each!(self, inner => match inner.elections() {
            Some(able) => able.campaign(request, value).map(wrap),
            None => Err(no_elections(inner.backend_name())),
        })
    }

    fn proclaim(&self, lease: &mut AnyLease, value: &[u8]) -> Result<()> {
        paired!(
            self,
            lease,
            |inner, lease| match inner.elections() {
                Some(able) => able.proclaim(lease, value),
                None => Err(no_elections(inner.backend_name())),
            },
            |any| Err(mismatch(any))
        )
    }

    fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        each!(self, inner => match inner.elections() {
            Some(able) => able.leader(name),
            None => Err(no_elections(inner.backend_name())),
        })
    }

    fn watch_leader(&self, name: &LockName) -> Result<Box<dyn LeaderWatch + '_>> {
        each!(self, inner => match inner.elections() {
            Some(able) => able.watch_leader(name),
            None => Err(no_elections(inner.backend_name())),
        })
    }
}

fn no_elections(backend: &'static str) -> Error {
    Error::Unsupported { backend, feature: "leader election" }
}

impl ReadWrite for AnyBackend {
    /// The inner backend's read-write lock.
    ///
    /// # Errors
    /// As the inner backend's; [`Error::Unsupported`] when it has none (then
    /// [`read_write`](DistributedLock::read_write) is `None`, and lock-core never calls this).
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<AnyLease>>> {
        each!(self, inner => match inner.read_write() {
            Some(able) => able.acquire_rw(request, access).map(wrap),
            None => Err(Error::Unsupported { backend: inner.backend_name(), feature: "read-write locks" }),
        })
    }

    fn shares_downgraded_reads(&self) -> bool {
        each!(self, inner => inner.read_write().is_none_or(|able| able.shares_downgraded_reads()))
    }
}

impl Permits for AnyBackend {
    /// The inner backend's semaphore.
    ///
    /// # Errors
    /// As the inner backend's; [`Error::Unsupported`] when it has none (then
    /// [`permits`](DistributedLock::permits) is `None`, and lock-core never calls this).
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<AnyLease>>> {
        each!(self, inner => match inner.permits() {
            Some(able) => able.acquire_permit(request, permits).map(wrap),
            None => Err(Error::Unsupported { backend: inner.backend_name(), feature: "semaphores" }),
        })
    }
}

/// An inner backend's acquisition as an [`AnyLease`] one.
fn wrap<L: Into<AnyLease>>(acquired: Option<Acquired<L>>) -> Option<Acquired<AnyLease>> {
    acquired.map(|acquired| {
        let waited = acquired.contended;
        Acquired::new(acquired.lease.into(), acquired.sent_at).contended_if(waited)
    })
}

impl NativeWait for AnyBackend {
    /// The inner backend's native wait.
    ///
    /// # Errors
    /// As the inner backend's; [`Error::Unsupported`] when it has no native wait (then
    /// [`native_wait`](DistributedLock::native_wait) is `None`, and lock-core never calls this).
    fn acquire_until(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<AnyLease>>> {
        each!(self, inner => match inner.native_wait() {
            Some(wait) => wait.acquire_until(name, owner, ttl, deadline).map(wrap),
            None => Err(Error::Unsupported { backend: inner.backend_name(), feature: "a native wait" }),
        })
    }
}

impl Fencing for AnyBackend {
    /// The inner backend's token for the lease.
    ///
    /// A lease of another backend's variant, or a backend without fencing (then
    /// [`fencing`](DistributedLock::fencing) is `None`), has the token 0: lower than any real
    /// token, so a resource that checks tokens refuses its writes. (This method cannot fail.)
    fn fencing_token(&self, lease: &AnyLease) -> FencingToken {
        paired!(
            self,
            lease,
            |inner, lease| inner
                .fencing()
                .map_or(FencingToken::new(0), |fencing| fencing.fencing_token(lease)),
            |_any| FencingToken::new(0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockClient;

    #[test]
    fn delegates_abilities_and_locks() {
        let backend = AnyBackend::Memory(MemoryBackend::new());
        assert!(backend.native_wait().is_some() && backend.fencing().is_some());
        let client = LockClient::new(backend.clone());
        let guard = client.lock_named("any").unwrap().lock().unwrap();
        assert!(guard.fencing_token().is_some());
        let rival = LockClient::new(backend);
        assert!(rival.lock_named("any").unwrap().try_lock().unwrap().is_none());
        guard.unlock().unwrap();
        let read = client.read_write_lock("any").unwrap().read().unwrap();
        assert!(rival.read_write_lock("any").unwrap().try_write().unwrap().is_none());
        drop(read);
        let permit = client.semaphore("any", 1).unwrap().acquire().unwrap();
        assert!(rival.semaphore("any", 1).unwrap().try_acquire().unwrap().is_none());
        drop(permit);
        let leadership = client.election("any").unwrap().with_value("me").campaign().unwrap();
        let election = rival.election("any").unwrap();
        assert!(election.try_campaign().unwrap().is_none());
        leadership.proclaim("still me").unwrap();
        assert_eq!(election.leader().unwrap().unwrap().value, b"still me");
        leadership.resign().unwrap();
        assert_eq!(election.leader().unwrap(), None);
    }

    #[test]
    fn batches_extend_through_the_inner_backend() {
        let backend = AnyBackend::Memory(MemoryBackend::new());
        let name = LockName::new("batch").unwrap();
        let ttl = Duration::from_secs(5);
        let mut lease = backend.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().unwrap();
        let results = backend.extend_many(&mut [Extension::new(&mut lease, ttl)]);
        assert!(matches!(results.as_slice(), [Ok(true)]), "{results:?}");
        assert!(backend.release(lease).unwrap());
    }

    #[test]
    fn a_url_backend_gives_its_fenced_store() {
        let backend = AnyBackend::Memory(MemoryBackend::new());
        let store = backend.fenced_store("unused").unwrap();
        store.write("k", lock_core::FencingToken::new(2), b"v").unwrap();
        let again = backend.clone().fenced_store("unused").unwrap();
        let stale = again.write("k", lock_core::FencingToken::new(1), b"late");
        assert!(matches!(stale, Err(lock_core::Error::StaleToken { .. })), "{stale:?}");
    }
}
