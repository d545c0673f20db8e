//! [`PostgresBackend`]: three kinds of lock on one PostgreSQL server (see [`PostgresLockKind`]).
//!
//! `schema.rs` holds the tables and statements, `table.rs` the lock-table kind, `session.rs` the
//! row and advisory kinds (holds that own a connection), `election.rs` leader election, `wait.rs`
//! the waits, `listener.rs` the
//! `LISTEN` connection that wakes lock-table waiters, `connection.rs` and `runtime.rs` the bounded
//! blocking calls over tokio-postgres, `pool.rs` the pool, `tls.rs` the TLS connector,
//! `pooler.rs` what changes behind a connection pooler (PgBouncer).
//!
//! # TLS
//!
//! Connections are plaintext unless the URL or [`SqlLockBuilder::tls`](crate::SqlLockBuilder::tls)
//! asks for TLS (libpq's default is `prefer`; this backend keeps plaintext as its default). The
//! URL takes libpq's parameters, in a `postgres://…?…` query or a `key=value` string:
//!
//! | parameter | meaning |
//! | --- | --- |
//! | `sslmode` | `disable`, `prefer` (TLS if the server offers it, else plaintext; nothing checked; a warning is logged when it falls back to plaintext; `allow`, which would try plaintext first, is refused), `require` (TLS; nothing checked, or the chain when `sslrootcert` is given, as libpq does), `verify-ca` (the chain), `verify-full` (the chain and the host name or IP address of the URL). Without `sslmode`: `verify-full` when `sslrootcert` names a CA (a named CA is used; libpq would take `prefer`), else with other TLS parameters `prefer`, libpq's default |
//! | `sslrootcert` | PEM file of the CAs to trust; without it the checking modes trust the platform's roots (the system store, read with `rustls-native-certs`); `system` says so explicitly and, as in libpq 16, needs (and alone implies) `verify-full` |
//! | `sslcert`, `sslkey` | the client's certificate chain and private key (PEM; PKCS#8, PKCS#1 or SEC1), both or neither (no encrypted keys: `sslpassword` is not taken) |
//!
//! The builder's [`TlsOptions`](lock_core::TlsOptions) decide the mode over the URL's; their
//! files replace the URL's where they name any. `build` reads the files (a missing or malformed
//! one is [`Error::InvalidConfig`](lock_core::Error::InvalidConfig)). A failed handshake (an
//! untrusted certificate, a name the certificate does not list, a server without TLS under
//! `require` or stronger, a refused client certificate) is
//! [`Error::Tls`](lock_core::Error::Tls) within the connect timeout, and so is a TLS-only
//! server's refusal of a plaintext connection (`pg_hba.conf`'s `hostnossl … reject`, or no line
//! for plaintext: "…, no encryption"). TLS is rustls with the ring provider (no OpenSSL, no
//! process-wide provider needed); SCRAM uses channel binding over it. `prefer` falls back to
//! plaintext only when the server declines TLS (a server that accepts and then fails the
//! handshake is an error; libpq would retry in plaintext). [`PostgresBackend::tls_version`]
//! tells what a connection got.
//!
//! ```no_run
//! use lock_core::{TlsMode, TlsOptions};
//! use lock_sql::postgres::PostgresBackend;
//!
//! // In the URL, libpq's way:
//! let backend = PostgresBackend::builder(
//!     "postgres://app:secret@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
//! )
//! .build()?;
//! // Or with the builder, here with a client certificate too:
//! let backend = PostgresBackend::builder("postgres://app@db.internal/app")
//!     .tls(
//!         TlsOptions::new(TlsMode::VerifyFull)
//!             .root_cert("/etc/ssl/db-ca.pem")
//!             .client_cert("/etc/app/client.pem", "/etc/app/client.key"),
//!     )
//!     .build()?;
//! assert!(backend.tls_version()?.is_some());
//! # Ok::<(), lock_core::Error>(())
//! ```

mod builder;
mod connection;
mod election;
pub(crate) mod error;
mod fenced;
mod guarded;
mod lease;
mod listener;
mod pool;
mod pooler;
mod read_write;
mod row_read_write;
pub(crate) mod runtime;
mod schema;
mod semaphore;
mod session;
mod table;
mod tls;
mod undo;
mod wait;
mod waiter_queue;

pub use builder::PostgresLockBuilder;
pub use fenced::PostgresFencedStore;
pub use lease::PostgresLease;
pub use listener::LISTENER_THREAD_NAME;
pub use pool::CONNECTOR_THREAD_NAME;
pub use pooler::Pooler;
pub use runtime::{HELPER_THREAD_NAME, PG_THREAD_NAME};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    check_lease, Access, Acquired, DistributedLock, Elections, Extension, Fencing, FencingToken, HoldKind,
    LockName, NativeWait, OwnerToken, Permits, ReadWrite, Request, Result,
};

use crate::election::Office as _;
use crate::lock_key::LockKey;
use error::BACKEND;
use lease::Hold;
use listener::Listener;
use pool::{PgPool, PooledPg};
use schema::Tables;

/// Which kind of lock a [`PostgresBackend`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PostgresLockKind {
    /// A row per name in the lock table, with an owner, a fence and an expiry on the database
    /// clock ([`HoldKind::Lease`]): acquire, expiry and fencing in one `INSERT … ON CONFLICT`
    /// statement; waiters woken by the release's `NOTIFY`.
    #[default]
    Table,
    /// `SELECT … FOR UPDATE` on the name's row, held by an open transaction on a connection the
    /// lease owns ([`HoldKind::Session`]); waiters queue in the database.
    Row,
    /// `pg_advisory_lock` on a stable 64-bit hash of `namespace:name`, held by a connection the
    /// lease owns ([`HoldKind::Session`]); waiters queue in the database.
    Advisory,
}

impl PostgresLockKind {
    /// The name of this kind in `distlock bench`/`compare` (`pg-table`, `pg-row`, `pg-advisory`).
    pub fn label(self) -> &'static str {
        match self {
            PostgresLockKind::Table => "pg-table",
            PostgresLockKind::Row => "pg-row",
            PostgresLockKind::Advisory => "pg-advisory",
        }
    }
}

/// Distributed locks on one PostgreSQL server.
///
/// Build it with [`PostgresBackend::builder`], create the tables once with
/// [`ensure_schema`](Self::ensure_schema), and hand it to a [`LockClient`](lock_core::LockClient).
/// Clones share the connection pool and the `LISTEN` connection.
///
/// Abilities: [`Fencing`] (lock table: a per-name counter bumped by the acquiring statement; row
/// and advisory: a sequence, which is never rolled back), [`NativeWait`] and [`Elections`]
/// (every kind: the election's own lock, a leader record in `<table>_lead` and `NOTIFY`s to its
/// followers; see `election.rs`).
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
///
/// let backend = PostgresBackend::builder("postgres://app:secret@127.0.0.1/app")
///     .kind(PostgresLockKind::Row)
///     .build()?;
/// backend.ensure_schema()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("orders")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) tables: Tables,
    pub(crate) listener: Listener,
    pub(crate) kind: PostgresLockKind,
    /// The pooler in front of the server, as declared (`pooler.rs`).
    pub(crate) pooler: Pooler,
    /// Lock-table kind: whether waiters are served in arrival order.
    pub(crate) fair: bool,
    pub(crate) namespace: String,
    /// The URL without its password, for `Debug`.
    pub(crate) address: String,
    /// The sessions of this client's write leases, for their owners' reads (downgrades).
    pub(crate) writers: crate::shared_session::Writers<PooledPg>,
    /// Row kinds: makes the tokens their holding transactions take durable.
    pub(crate) fence_flush: crate::fence_flush::FenceFlush<connection::PgConnection>,
}

impl PostgresBackend {
    /// Starts building a backend for the server at `url`
    /// (`postgres://user:password@host:port/database`).
    pub fn builder(url: impl Into<String>) -> PostgresLockBuilder {
        PostgresLockBuilder::new(url)
    }

    /// The kind of lock this backend takes.
    pub fn kind(&self) -> PostgresLockKind {
        self.inner.kind
    }

    /// Whether a lock-table waiter is served in arrival order (see
    /// [`SqlLockBuilder::fair`](crate::SqlLockBuilder::fair)); the row and advisory kinds are
    /// always fair.
    pub fn is_fair(&self) -> bool {
        self.inner.fair
    }

    /// Creates the lock table, the row table and the fencing sequence if they do not exist
    /// (idempotent; safe to call from many processes at once). The DDL is in the crate docs.
    ///
    /// # Errors
    /// As any statement; [`Error::Backend`](lock_core::Error::Backend) when the user may not
    /// create tables.
    pub fn ensure_schema(&self) -> Result<()> {
        let connection = self.inner.pool.get()?;
        let ddl = self.inner.tables.ddl.as_str();
        match connection
            .run("create the lock tables", |client| async move { client.batch_execute(ddl).await })
        {
            Ok(()) => Ok(()),
            // Two sessions creating the same table at once: the loser sees a unique violation on
            // the catalog; the table exists either way.
            Err(_) => connection
                .run("create the lock tables", |client| async move { client.batch_execute(ddl).await }),
        }
    }

    /// The server's remaining lease on `name` (lock-table kind; `None` when free).
    ///
    /// # Errors
    /// As any statement.
    pub fn remaining_lease(&self, name: &LockName) -> Result<Option<Duration>> {
        self.table_remaining(name)
    }

    /// Takes `name` away from its holder, as an administrator would: the lock-table row is marked
    /// free, or the session holding the row or advisory lock is terminated
    /// (`pg_terminate_backend`). For tests and emergencies.
    ///
    /// # Errors
    /// As any statement.
    pub fn break_lock(&self, name: &LockName) -> Result<()> {
        match self.inner.kind {
            PostgresLockKind::Table => self.table_mark_free(&LockKey::mutex(name)),
            PostgresLockKind::Row | PostgresLockKind::Advisory => {
                self.terminate_holder(&LockKey::mutex(name))
            }
        }
    }

    /// The TLS version of one of the pool's connections as the server reports it
    /// (`pg_stat_ssl`: `"TLSv1.3"`), or `None` when it is plaintext: a check that the URL's
    /// or the builder's TLS settings took effect (every connection of a backend is opened
    /// alike, but with `sslmode=prefer` the server decides).
    ///
    /// # Errors
    /// As any statement.
    pub fn tls_version(&self) -> Result<Option<String>> {
        let connection = self.inner.pool.get()?;
        let rows = connection.run("read the connection's TLS version", |client| async move {
            client
                .query_typed("SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl", &[])
                .await
        })?;
        Ok(rows.first().map(|row| row.get(0)))
    }

    /// The advisory-lock key of a [`LockKey`]'s text.
    fn advisory_key(&self, key: &str) -> i64 {
        crate::key_hash::signed_key(&self.inner.namespace, key)
    }
}

/// How the PostgreSQL kinds elect, for [`BackendProfile`](lock_core::BackendProfile).
const PG_ELECTIONS: &str = "the kind's own lock on a key no lock name can be, and a record row (fence, \
     holder, value) in `<table>_lead` written by one statement that checks the hold; NOTIFY wakes \
     followers";

/// [`PG_ELECTIONS`] through transaction pooling, which has no `LISTEN`.
const PG_ELECTIONS_POLLED: &str =
    "the kind's own lock on a key no lock name can be, and a record row (fence, \
     holder, value) in `<table>_lead` written by one statement that checks the hold; through transaction \
     pooling (no LISTEN) followers re-read it every quarter lease (100 ms to 1 s)";

impl DistributedLock for PostgresBackend {
    type Lease = PostgresLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn kind_name(&self) -> &'static str {
        match self.inner.kind {
            PostgresLockKind::Table => "pg-table",
            PostgresLockKind::Row => "pg-row",
            PostgresLockKind::Advisory => "pg-advisory",
        }
    }

    fn profile(&self) -> lock_core::BackendProfile {
        let listens = self.inner.listener.wakes();
        let elections = if listens { PG_ELECTIONS } else { PG_ELECTIONS_POLLED };
        match self.inner.kind {
            PostgresLockKind::Table => lock_core::BackendProfile::new(
                "a per-name counter in the lock row, bumped by the acquiring statement",
                if !listens {
                    "queue in the lock row; through transaction pooling (no LISTEN) waiters re-check \
                     on their own, within 4 to 25 ms"
                } else if self.inner.fair {
                    "FIFO queue in the lock row; the release NOTIFYs the oldest waiter's client (one LISTEN connection per client), and only it may take the lock"
                } else {
                    "queue in the lock row; the release NOTIFYs the oldest waiter's client (one LISTEN connection per client), which races new callers for the lock"
                },
                "the row is as durable as the database: a failover to a replica keeps it if the \
                 commit replicated",
            )
            .with_guarded_writes(
                "fenced stores (one upsert checks and raises the row's fence); execute_if_held: one \
                 transaction locks the lock row while the lease runs, then writes",
            )
            .with_elections(elections),
            _ => crate::lease::SESSION_PROFILE.with_elections(elections),
        }
    }

    fn hold_kind(&self) -> HoldKind {
        match self.inner.kind {
            PostgresLockKind::Table => HoldKind::Lease,
            PostgresLockKind::Row | PostgresLockKind::Advisory => HoldKind::Session,
        }
    }

    fn try_acquire(
        &self,
        name: &LockName,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> Result<Option<PostgresLease>> {
        check_lease(ttl)?;
        self.try_key(&LockKey::mutex(name), owner, ttl)
    }

    fn extend(&self, lease: &mut PostgresLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        match &lease.hold {
            Hold::Table { .. } => self.table_extend(lease, ttl),
            Hold::Row { .. } | Hold::Advisory { .. } => self.session_alive(lease, ttl),
            Hold::ReadWrite { .. } => self.rw_alive(lease, ttl),
            Hold::Permit { .. } => self.permit_extend(lease, ttl),
        }
    }

    fn extend_many(&self, batch: &mut [Extension<'_, PostgresLease>]) -> Vec<Result<bool>> {
        match self.inner.kind {
            PostgresLockKind::Table => self.table_extend_many(batch),
            // Batches of one only: larger ones are checked concurrently by the core
            // (`extends_independently`).
            PostgresLockKind::Row | PostgresLockKind::Advisory => {
                batch.iter_mut().map(|item| self.extend(item.lease, item.ttl)).collect()
            }
        }
    }

    /// Row and advisory holds each own a connection: their checks run concurrently, so a batch
    /// against a silent server costs one I/O timeout however many holds it has.
    fn extends_independently(&self) -> bool {
        self.inner.kind != PostgresLockKind::Table
    }

    fn release(&self, lease: PostgresLease) -> Result<bool> {
        let election = lease.election.then(|| lease.name.clone());
        let released = match lease.hold {
            Hold::Table { .. } => self.table_release(&lease),
            Hold::Row { .. } | Hold::Advisory { .. } => self.session_release(lease),
            Hold::ReadWrite { .. } => self.rw_release(lease),
            Hold::Permit { .. } => self.permit_release(&lease),
        };
        if let Some(name) = election {
            self.announce_election(&name);
        }
        released
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = PostgresLease>> {
        Some(self)
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = PostgresLease>> {
        Some(self)
    }

    fn read_write(&self) -> Option<&dyn ReadWrite<Lease = PostgresLease>> {
        match self.inner.kind {
            PostgresLockKind::Table => None,
            PostgresLockKind::Row | PostgresLockKind::Advisory => Some(self),
        }
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = PostgresLease>> {
        Some(self)
    }

    fn elections(&self) -> Option<&dyn Elections<Lease = PostgresLease>> {
        Some(self)
    }

    fn missing_abilities(&self) -> Option<&'static str> {
        match self.inner.kind {
            PostgresLockKind::Table => Some(
                "the lock-table kind keeps one owner per name: no read-write lock (the row and \
                 advisory kinds have them)",
            ),
            PostgresLockKind::Row | PostgresLockKind::Advisory => None,
        }
    }
}

/// The advisory kind: `pg_advisory_lock_shared`/`pg_advisory_lock` (`read_write.rs`); the row
/// kind: `FOR SHARE`/`FOR UPDATE` (`row_read_write.rs`).
impl ReadWrite for PostgresBackend {
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<PostgresLease>>> {
        match self.inner.kind {
            PostgresLockKind::Advisory => self.advisory_rw(request, access),
            PostgresLockKind::Row => self.row_rw(request, access),
            PostgresLockKind::Table => Err(lock_core::Error::Unsupported {
                backend: BACKEND,
                feature: "read-write locks on the lock-table kind",
            }),
        }
    }
}

/// Every kind: the permits table (`semaphore.rs`).
impl Permits for PostgresBackend {
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<PostgresLease>>> {
        self.acquire_permit_polling(request, permits)
    }
}

impl Fencing for PostgresBackend {
    fn fencing_token(&self, lease: &PostgresLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("address", &self.inner.address)
            .field("kind", &self.inner.kind)
            .field("pooler", &self.inner.pooler)
            .field("fair", &self.inner.fair)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "testkit")]
impl PostgresBackend {
    /// `name=value` for each of the server settings `names` (plain identifiers).
    pub(crate) fn server_settings(&self, names: &[&str]) -> std::result::Result<String, String> {
        let connection = self.inner.pool.get().map_err(|e| e.to_string())?;
        let mut pairs = Vec::with_capacity(names.len());
        for name in names {
            let sql = format!("SHOW {name}");
            let value: String = connection
                .run("show a setting", |client| async move { client.query_typed(sql.as_str(), &[]).await })
                .map_err(|e| e.to_string())?
                .first()
                .ok_or_else(|| format!("SHOW {name}: no row"))?
                .get(0);
            pairs.push(format!("{name}={value}"));
        }
        Ok(pairs.join(" "))
    }

    /// Times one `SELECT 1` per call on a connection checked out of the pool (the checkout is
    /// not timed), the way the backend's own statements travel (benchmarks' limit).
    pub(crate) fn select_one_probe(&self) -> lock_testkit::workload::TimeOne {
        let backend = self.clone();
        Box::new(move || {
            let connection = backend.inner.pool.get().map_err(|e| e.to_string())?;
            let started = std::time::Instant::now();
            connection
                .run("select 1", |client| async move { client.simple_query("SELECT 1").await })
                .map_err(|e| e.to_string())?;
            Ok(started.elapsed())
        })
    }
}

/// Test support (feature `testkit`, not semver-stable): the suite and workload target.
#[cfg(feature = "testkit")]
pub mod testkit {
    pub use crate::testkit::{pooler, scenarios, PostgresTarget, TIMEOUT};
}
