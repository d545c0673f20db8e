//! [`MySqlBackend`]: three kinds of lock on one MySQL or MariaDB server (see [`MySqlLockKind`]).
//!
//! `schema.rs` holds the tables and statements, `table.rs` the lock-table kind, `session.rs`
//! the row and advisory kinds (holds that own a connection), `election.rs` leader election
//! (every kind), `wait.rs` the waits (lock-table
//! waiters queue in a table and are rung by `doorbell.rs`; the others wait in the server's lock
//! queue), `pool.rs` the pool, `connection.rs` one connection and `tls.rs` the TLS options and
//! the connector.
//!
//! Tested on MariaDB 10.11. MySQL 8 differences the statements avoid: no `INSERT … RETURNING`
//! (the winner is told by affected rows and `LAST_INSERT_ID(expr)`), error 3572 for `NOWAIT`,
//! `GET_LOCK` names of at most 64 characters (longer names are hashed), a negative `GET_LOCK`
//! timeout that waits forever (never sent). The row and advisory kinds take their fencing
//! tokens from a `SEQUENCE`, which MySQL 8 lacks: on MySQL those two kinds fail at
//! [`ensure_schema`](MySqlBackend::ensure_schema) with the server's error.
//!
//! # TLS
//!
//! Connections are plaintext unless the URL or [`SqlLockBuilder::tls`](crate::SqlLockBuilder::tls)
//! asks for TLS (the MySQL client's default is `PREFERRED`; this backend keeps plaintext as its
//! default). The URL takes the MySQL client's option names (with `_` for `-` too); they are
//! taken out before the `mysql` driver, which knows none of them, parses the URL:
//!
//! | parameter | meaning |
//! | --- | --- |
//! | `ssl-mode` | any case: `DISABLED`, `PREFERRED` (TLS if the server offers it, else plaintext with a warning logged; nothing checked), `REQUIRED` (TLS; nothing checked; with `ssl-ca`, refused: see below), `VERIFY_CA` (refused: see below), `VERIFY_IDENTITY` (the chain and the host name or IP address of the URL). Without `ssl-mode`: `VERIFY_IDENTITY` when `ssl-ca` names a CA, else with other TLS parameters `PREFERRED` |
//! | `ssl-ca` | PEM file of the CAs to trust |
//! | `ssl-cert`, `ssl-key` | the client's certificate chain and private key (PEM), both or neither |
//!
//! The builder's [`TlsOptions`](lock_core::TlsOptions) decide the mode over the URL's; their
//! files replace the URL's where they name any. With neither, the driver's own URL parameters
//! (`root_cert_path`, `danger_skip_domain_validation`, …) still work as before. TLS is the
//! driver's rustls backend with the ring provider (no OpenSSL); a connection asked to use TLS
//! stays on TCP (the driver would otherwise move a connection to `127.0.0.1` onto the server's
//! Unix socket). Limits of the driver, which has no hook for its rustls configuration: it
//! trusts the Mozilla roots compiled into it (`webpki-roots`) **in addition to** `ssl-ca`, and,
//! without `ssl-ca`, those roots rather than the system store. So `VERIFY_IDENTITY` also accepts
//! a certificate a public CA issued for the host name, and chain-only verification
//! (`VERIFY_CA`, `REQUIRED` with `ssl-ca`) would accept any publicly trusted certificate for
//! any host, which authenticates nothing: `build` refuses it with
//! [`Error::InvalidConfig`](lock_core::Error::InvalidConfig) (use `VERIFY_IDENTITY`). The driver
//! does not use TLS on a Unix socket: the driver's `socket=` parameter with `REQUIRED` or
//! stronger (or with the driver's own TLS parameters) is refused the same way. `PREFERRED` is
//! done here: the driver treats TLS as required, so a connection the server refuses for want of
//! TLS support is opened again in plaintext.
//!
//! Side effect: building a backend installs rustls's ring provider as the process's default
//! crypto provider, unless one is installed already (the driver builds its rustls
//! configuration on the process default, and rustls panics without one when more than one
//! provider is compiled in).
//!
//! `build` reads the files (a missing or malformed one is
//! [`Error::InvalidConfig`](lock_core::Error::InvalidConfig)). A failed handshake (an untrusted
//! certificate, a wrong name, a server without TLS under `REQUIRED` or stronger, a refused
//! client certificate) is [`Error::Tls`](lock_core::Error::Tls) within the connect timeout, and
//! so is MySQL's refusal of a plaintext connection to a TLS-only server
//! (`require_secure_transport=ON`, error 3159). MariaDB refuses it with 1045, "access denied",
//! as for a wrong password, and nothing tells the two apart without logging in again: a
//! plaintext login denied with 1045 is
//! [`Error::Authentication`](lock_core::Error::Authentication) whose message adds that the
//! server may require secure transport (then connect with `ssl-mode=REQUIRED` or stronger).
//! [`MySqlBackend::tls_version`] tells what a connection got.
//!
//! ```no_run
//! use lock_sql::mysql::MySqlBackend;
//!
//! let backend = MySqlBackend::builder(
//!     "mysql://app:secret@db.internal:3306/app?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/db-ca.pem",
//! )
//! .build()?;
//! assert!(backend.tls_version()?.is_some());
//! # Ok::<(), lock_core::Error>(())
//! ```

mod builder;
mod connection;
mod doorbell;
mod election;
pub(crate) mod error;
mod fenced;
mod guarded;
mod lease;
mod pool;
mod read_write;
pub(crate) mod schema;
mod semaphore;
mod session;
mod table;
mod tls;
mod undo;
mod wait;

pub use builder::MySqlLockBuilder;
pub use doorbell::{DOORBELL_THREAD_NAME, RINGER_THREAD_NAME};
pub use fenced::MySqlFencedStore;
pub use lease::MySqlLease;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    check_lease, Access, Acquired, DistributedLock, Elections, Extension, Fencing, FencingToken, HoldKind,
    LockName, NativeWait, OwnerToken, Permits, ReadWrite, Request, Result,
};

use crate::election::Office as _;
use crate::lock_key::LockKey;
use connection::MyConnection;
use error::BACKEND;
use lease::Hold;
use pool::MyPool;
use schema::Tables;

/// Which kind of lock a [`MySqlBackend`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MySqlLockKind {
    /// A row per name in the lock table, with an owner, a fence and an expiry on the database
    /// clock ([`HoldKind::Lease`]): acquire, expiry and fencing in one `INSERT … ON DUPLICATE
    /// KEY UPDATE`. MySQL has no notifications: waiters queue in a table and a release rings
    /// the oldest one's doorbell connection (`KILL QUERY` of its wait; same user needed).
    #[default]
    Table,
    /// `SELECT … FOR UPDATE` on the name's row, held by an open transaction on a connection the
    /// lease owns ([`HoldKind::Session`]); waiters queue in InnoDB.
    Row,
    /// `GET_LOCK` on `namespace:name`, held by a connection the lease owns
    /// ([`HoldKind::Session`]); waiters queue in the server.
    Advisory,
}

impl MySqlLockKind {
    /// The name of this kind in `distlock bench`/`compare` (`mysql-table`, `mysql-row`,
    /// `mysql-advisory`).
    pub fn label(self) -> &'static str {
        match self {
            MySqlLockKind::Table => "mysql-table",
            MySqlLockKind::Row => "mysql-row",
            MySqlLockKind::Advisory => "mysql-advisory",
        }
    }
}

/// Distributed locks on one MySQL or MariaDB server.
///
/// Build it with [`MySqlBackend::builder`], create the tables once with
/// [`ensure_schema`](Self::ensure_schema), and hand it to a [`LockClient`](lock_core::LockClient).
/// Clones share the connection pool and the doorbell (two connections, opened when a thread
/// first waits for a lock-table lock or a semaphore).
///
/// Abilities: [`Fencing`] (lock table: a per-name counter bumped by the acquiring statement; row
/// and advisory: a sequence, never rolled back) and [`NativeWait`].
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
///
/// let backend = MySqlBackend::builder("mysql://app:secret@127.0.0.1:3306/app")
///     .kind(MySqlLockKind::Advisory)
///     .build()?;
/// backend.ensure_schema()?;
/// let client = LockClient::new(backend);
/// let guard = client.lock_named("orders")?.lock()?;
/// guard.unlock()?;
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct MySqlBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: MyPool,
    pub(crate) tables: Tables,
    /// The lock-table kind's wake-ups.
    pub(crate) doorbell: doorbell::Doorbell,
    pub(crate) kind: MySqlLockKind,
    /// Lock-table kind: whether waiters are served in arrival order.
    pub(crate) fair: bool,
    /// Lock-table kind: the names whose last release by this client rang a waiter.
    pub(crate) rang: wait::RangNames,
    pub(crate) namespace: String,
    /// The URL without its password, for `Debug`.
    pub(crate) address: String,
    /// The sessions of this client's write leases, for their owners' reads (downgrades).
    pub(crate) writers: crate::shared_session::Writers<MyConnection>,
    /// Row kinds: makes the tokens their holding transactions take durable, on the one
    /// connection of `flush_pool` (outside `pool`, which held locks may fill).
    pub(crate) fence_flush: crate::fence_flush::FenceFlush<MyConnection>,
    pub(crate) flush_pool: MyPool,
}

/// The longest `GET_LOCK` name MySQL 8 takes (MariaDB takes 192 bytes).
const MAX_LOCK_NAME_CHARS: usize = 64;

impl MySqlBackend {
    /// Starts building a backend for the server at `url`
    /// (`mysql://user:password@host:port/database`).
    pub fn builder(url: impl Into<String>) -> MySqlLockBuilder {
        MySqlLockBuilder::new(url)
    }

    /// The kind of lock this backend takes.
    pub fn kind(&self) -> MySqlLockKind {
        self.inner.kind
    }

    /// Creates the lock table, the row table and the fencing sequence if they do not exist
    /// (idempotent). The DDL is in the crate docs.
    ///
    /// # Errors
    /// As any statement; [`Error::Backend`](lock_core::Error::Backend) when the user may not
    /// create tables.
    pub fn ensure_schema(&self) -> Result<()> {
        let mut connection = self.inner.pool.get()?;
        if self.missing_tables(&mut connection)?.is_none() {
            return Ok(());
        }
        // One client creates at a time, and the others look again once it is done. Otherwise a
        // second client that also saw the objects missing runs `CREATE SEQUENCE IF NOT EXISTS`
        // on the sequence the first one just created, which waits for the metadata lock of every
        // transaction that took a token from it (measured: 1.7 s behind a 2 s transaction) —
        // the first client's row-lock holds — and every later token queues behind that wait: a
        // holder waiting for a refused rival then deadlocked with it until the I/O timeout (two
        // `distlock compare` scenarios on a fresh server, 10 s). A `GET_LOCK` that times out
        // still lets this client go on.
        let key = self.inner.tables.schema_lock_key();
        let wait = self.inner.pool.io_timeout().mul_f64(0.75).as_secs_f64();
        connection.run(
            "wait for another client creating the tables",
            &format!("SELECT GET_LOCK({key}, {wait:.3})"),
        )?;
        let created = match self.missing_tables(&mut connection) {
            Ok(Some(existing)) => {
                connection.run("create the lock tables", &self.inner.tables.ddl(&existing)).map(drop)
            }
            Ok(None) => Ok(()),
            Err(error) => Err(error),
        };
        // A connection broken by a failed creation is closed, which releases the lock as well.
        let released =
            connection.run("let other clients create the tables", &format!("DO RELEASE_LOCK({key})"));
        created.and(released.map(drop))
    }

    /// The tables (and the lock table's newest column) that exist, when one is missing; `None`
    /// when all do.
    fn missing_tables(&self, connection: &mut MyConnection) -> Result<Option<Vec<String>>> {
        let existing = connection.run("look for the lock tables", &self.inner.tables.existing())?;
        let existing: Vec<String> = existing
            .sets
            .last()
            .map(|set| set.1.iter().filter_map(|row| row.get::<String, _>(0)).collect())
            .unwrap_or_default();
        Ok((existing.len() < Tables::COUNT).then_some(existing))
    }

    /// The server's remaining lease on `name` (lock-table kind; `None` when free).
    ///
    /// # Errors
    /// As any statement.
    pub fn remaining_lease(&self, name: &LockName) -> Result<Option<Duration>> {
        self.table_remaining(name)
    }

    /// Whether a lock-table waiter is served in arrival order (see
    /// [`SqlLockBuilder::fair`](crate::SqlLockBuilder::fair)); the row and advisory kinds are
    /// always fair.
    pub fn is_fair(&self) -> bool {
        self.inner.fair
    }

    /// Takes `name` away from its holder, as an administrator would: the lock-table row is marked
    /// free, or the connection holding the row or advisory lock is killed (`KILL`; the same user,
    /// or one with `CONNECTION ADMIN`). For tests and emergencies.
    ///
    /// # Errors
    /// As any statement.
    pub fn break_lock(&self, name: &LockName) -> Result<()> {
        match self.inner.kind {
            MySqlLockKind::Table => self.table_mark_free(&LockKey::mutex(name)),
            MySqlLockKind::Row | MySqlLockKind::Advisory => self.kill_holder(&LockKey::mutex(name)),
        }
    }

    /// The TLS version of one of the pool's connections as the server reports it (the session
    /// status `Ssl_version`: `"TLSv1.3"`), or `None` when it is plaintext: a check that the
    /// URL's or the builder's TLS settings took effect (every connection of a backend is
    /// opened alike, but with `ssl-mode=PREFERRED` the server decides).
    ///
    /// # Errors
    /// As any statement.
    pub fn tls_version(&self) -> Result<Option<String>> {
        let mut connection = self.inner.pool.get()?;
        let status =
            connection.run("read the connection's TLS version", "SHOW SESSION STATUS LIKE 'Ssl_version'")?;
        let version: Option<String> = status.first_row().and_then(|row| row.get(1));
        Ok(version.filter(|version| !version.is_empty()))
    }

    /// The `GET_LOCK` name of a [`LockKey`]'s text `name`: `namespace:name`, or when that is longer than 64
    /// characters, `namespace:#` and a stable 64-bit hash in hex (two such names sharing a hash
    /// contend — a false "busy", never two holders; see the hash's odds in the crate source).
    fn advisory_key(&self, name: &str) -> String {
        let full = format!("{}:{name}", self.inner.namespace);
        let key = if full.chars().count() <= MAX_LOCK_NAME_CHARS {
            full
        } else {
            format!("{}:#{:016x}", self.inner.namespace, crate::key_hash::key(&self.inner.namespace, name))
        };
        schema::hex(key.as_bytes())
    }
}

/// How the MySQL kinds elect, for [`BackendProfile`](lock_core::BackendProfile).
const MY_ELECTIONS: &str = "the kind's own lock on a key no lock name can be, and a record row (fence, \
     holder, value) in `<table>_lead` written by one statement that checks the hold; followers \
     re-check (no server notices)";

impl DistributedLock for MySqlBackend {
    type Lease = MySqlLease;

    fn backend_name(&self) -> &'static str {
        BACKEND
    }

    fn kind_name(&self) -> &'static str {
        match self.inner.kind {
            MySqlLockKind::Table => "mysql-table",
            MySqlLockKind::Row => "mysql-row",
            MySqlLockKind::Advisory => "mysql-advisory",
        }
    }

    fn profile(&self) -> lock_core::BackendProfile {
        match self.inner.kind {
            MySqlLockKind::Table => lock_core::BackendProfile::new(
                "a per-name counter in the lock row, bumped by the acquiring statement \
                 (LAST_INSERT_ID(expr))",
                if self.inner.fair {
                    "FIFO queue table; the release rings the oldest waiter's doorbell connection (KILL QUERY of its wait), and only it may take the lock"
                } else {
                    "queue table; the release rings the oldest waiter's doorbell connection (KILL QUERY of its wait), which races new callers for the lock"
                },
                "the row is as durable as the database: a failover to a replica keeps it if the \
                 commit replicated",
            )
            .with_guarded_writes(
                "fenced stores (one upsert checks and raises the row's fence); execute_if_held: one \
                 transaction locks the lock row while the lease runs, then writes",
            )
            .with_elections(MY_ELECTIONS),
            _ => crate::lease::SESSION_PROFILE.with_elections(MY_ELECTIONS),
        }
    }

    fn hold_kind(&self) -> HoldKind {
        match self.inner.kind {
            MySqlLockKind::Table => HoldKind::Lease,
            MySqlLockKind::Row | MySqlLockKind::Advisory => HoldKind::Session,
        }
    }

    fn try_acquire(&self, name: &LockName, owner: &OwnerToken, ttl: Duration) -> Result<Option<MySqlLease>> {
        check_lease(ttl)?;
        self.try_key(&LockKey::mutex(name), owner, ttl)
    }

    fn extend(&self, lease: &mut MySqlLease, ttl: Duration) -> Result<bool> {
        check_lease(ttl)?;
        match &lease.hold {
            Hold::Table { .. } => self.table_extend(lease, ttl),
            Hold::Row { .. } | Hold::Advisory { .. } => self.session_alive(lease, ttl),
            Hold::ReadWrite { .. } => self.rw_alive(lease, ttl),
            Hold::Permit { .. } => self.permit_extend(lease, ttl),
        }
    }

    fn extend_many(&self, batch: &mut [Extension<'_, MySqlLease>]) -> Vec<Result<bool>> {
        match self.inner.kind {
            MySqlLockKind::Table => self.table_extend_many(batch),
            // Batches of one only: larger ones are checked concurrently by the core
            // (`extends_independently`).
            MySqlLockKind::Row | MySqlLockKind::Advisory => {
                batch.iter_mut().map(|item| self.extend(item.lease, item.ttl)).collect()
            }
        }
    }

    /// Row and advisory holds each own a connection: their checks run concurrently, so a batch
    /// against a silent server costs one I/O timeout however many holds it has.
    fn extends_independently(&self) -> bool {
        self.inner.kind != MySqlLockKind::Table
    }

    fn release(&self, lease: MySqlLease) -> Result<bool> {
        match lease.hold {
            Hold::Table { .. } => self.table_release(&lease),
            Hold::Row { .. } | Hold::Advisory { .. } => self.session_release(lease),
            Hold::ReadWrite { .. } => self.rw_release(lease),
            Hold::Permit { .. } => self.permit_release(&lease),
        }
    }

    fn native_wait(&self) -> Option<&dyn NativeWait<Lease = MySqlLease>> {
        match self.inner.kind {
            MySqlLockKind::Table | MySqlLockKind::Row | MySqlLockKind::Advisory => Some(self),
        }
    }

    fn fencing(&self) -> Option<&dyn Fencing<Lease = MySqlLease>> {
        Some(self)
    }

    fn read_write(&self) -> Option<&dyn ReadWrite<Lease = MySqlLease>> {
        match self.inner.kind {
            MySqlLockKind::Row => Some(self),
            MySqlLockKind::Table | MySqlLockKind::Advisory => None,
        }
    }

    fn permits(&self) -> Option<&dyn Permits<Lease = MySqlLease>> {
        Some(self)
    }

    fn elections(&self) -> Option<&dyn Elections<Lease = MySqlLease>> {
        Some(self)
    }

    fn missing_abilities(&self) -> Option<&'static str> {
        match self.inner.kind {
            MySqlLockKind::Table => Some(
                "the lock-table kind keeps one owner per name: no read-write lock (the row kind has \
                 them)",
            ),
            MySqlLockKind::Advisory => Some("GET_LOCK has no shared mode: no read-write lock"),
            MySqlLockKind::Row => None,
        }
    }
}

/// The row kind: `LOCK IN SHARE MODE`/`FOR UPDATE` (`read_write.rs`).
impl ReadWrite for MySqlBackend {
    fn acquire_rw(&self, request: &Request<'_>, access: Access) -> Result<Option<Acquired<MySqlLease>>> {
        match self.inner.kind {
            MySqlLockKind::Row => self.row_rw(request, access),
            MySqlLockKind::Table | MySqlLockKind::Advisory => Err(lock_core::Error::Unsupported {
                backend: BACKEND,
                feature: "read-write locks on the lock-table and advisory kinds",
            }),
        }
    }

    /// InnoDB keeps the writer's exclusive row lock until its transaction ends (`read_write.rs`).
    fn shares_downgraded_reads(&self) -> bool {
        false
    }
}

/// Every kind: the permits table (`semaphore.rs`).
impl Permits for MySqlBackend {
    fn acquire_permit(&self, request: &Request<'_>, permits: u32) -> Result<Option<Acquired<MySqlLease>>> {
        self.acquire_permit_waiting(request, permits)
    }
}

impl Fencing for MySqlBackend {
    fn fencing_token(&self, lease: &MySqlLease) -> FencingToken {
        lease.fence
    }
}

impl fmt::Debug for MySqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlBackend")
            .field("address", &self.inner.address)
            .field("kind", &self.inner.kind)
            .field("fair", &self.inner.fair)
            .finish_non_exhaustive()
    }
}

/// Test support (feature `testkit`, not semver-stable): the suite and workload target.
#[cfg(feature = "testkit")]
pub mod testkit {
    pub use crate::testkit::{broken_recipes, primary_key_lock, scenarios, MySqlTarget, N05_TEST, TIMEOUT};
}

#[cfg(feature = "testkit")]
impl MySqlBackend {
    /// `name=value` for each of the server variables `names` (plain identifiers).
    pub(crate) fn server_settings(&self, names: &[&str]) -> std::result::Result<String, String> {
        let mut connection = self.inner.pool.get().map_err(|e| e.to_string())?;
        let mut pairs = Vec::with_capacity(names.len());
        for name in names {
            let results =
                connection.run("show a setting", &format!("SELECT @@{name}")).map_err(|e| e.to_string())?;
            let value: String = results.last_value().unwrap_or_default();
            pairs.push(format!("{name}={value}"));
        }
        Ok(pairs.join(" "))
    }

    /// Times one `SELECT 1` per call on a connection checked out of the pool (the checkout is
    /// not timed), the way the backend's own statements travel (benchmarks' limit).
    pub(crate) fn select_one_probe(&self) -> lock_testkit::workload::TimeOne {
        let backend = self.clone();
        Box::new(move || {
            let mut connection = backend.inner.pool.get().map_err(|e| e.to_string())?;
            let started = std::time::Instant::now();
            connection.run("select 1", "SELECT 1").map_err(|e| e.to_string())?;
            Ok(started.elapsed())
        })
    }
}
