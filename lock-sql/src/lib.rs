//! SQL backends for [distlock](https://docs.rs/distlock): locks on PostgreSQL and on MySQL or
//! MariaDB, in three kinds each that answer source 003's critique of database locks (no expiry, no
//! wake-up, pool exhaustion, row locks that become table locks; the sources are described in the
//! repository's `docs/scenarios.md`, [rendered][scenarios-guide] in the `distlock` facade's docs):
//!
//! | kind | hold | acquire | fencing | wake-up |
//! | --- | --- | --- | --- | --- |
//! | lock table | lease on the database clock | one `INSERT … ON CONFLICT DO UPDATE … WHERE expired` | per-name counter in the row | `NOTIFY` from the release statement (PostgreSQL) |
//! | row lock | open transaction on an owned connection | `SELECT … FOR UPDATE` by primary key | sequence | the database's lock queue |
//! | advisory | session lock on an owned connection | `pg_try_advisory_lock(hash)`, `GET_LOCK` | sequence | the database's lock queue |
//!
//! Read-write locks and semaphores (issue 20), per kind:
//!
//! | kind | read-write lock | writers not starved by | semaphore |
//! | --- | --- | --- | --- |
//! | PostgreSQL table | none (one owner per row) | — | permits table (leases) |
//! | PostgreSQL row | `FOR SHARE`/`FOR UPDATE` behind a gate row | the gate, closed by a waiting writer | permits table |
//! | PostgreSQL advisory | `pg_advisory_lock_shared`/`pg_advisory_lock` (two-`integer` keys) | the lock manager (new requests queue behind waiting ones) | permits table |
//! | MySQL/MariaDB table | none (one owner per row) | — | permits table |
//! | MySQL/MariaDB row | `LOCK IN SHARE MODE`/`FOR UPDATE` | InnoDB (new requests queue behind waiting ones) | permits table |
//! | MySQL/MariaDB advisory | none (`GET_LOCK` has no shared mode) | — | permits table |
//!
//! Leader election ([`lock_core::Elections`]) on every kind: an election is the kind's lock of a
//! key no lock name makes, plus a leader record in `<table>_lead` whose writes the server guards
//! by the hold; followers are woken by `NOTIFY` on PostgreSQL and re-check on MySQL/MariaDB
//! (see each database's `election.rs`).
//!
//! A writer's own read (a downgrade) shares the writer's session; on MySQL the lock stays
//! exclusive until that read ends (InnoDB keeps record locks to the transaction's end).
//!
//! Every call is bounded: connecting by the connect timeout, each statement by the I/O timeout
//! (plus the wait itself for a statement that waits in the server's lock queue: a timed wait is
//! one statement until its deadline, so it keeps its place in the queue; `lock()` without a
//! deadline re-queues every I/O timeout, at least every second, so a silent server is noticed
//! within two I/O timeouts). The blocking `postgres` crate offers no per-request timeout, so
//! the PostgreSQL backend drives `tokio-postgres` itself, on the calling thread (no I/O thread:
//! [`postgres::PG_THREAD_NAME`] only resolves host names, and each pool has two threads that
//! open its connections in the background, as r2d2 does).
//!
//! # Session holds: what ends them on the server
//! A row or advisory hold lives as long as its connection's session. The holder checks the
//! session on each renewal and counts the hold lost once no check succeeded for a whole lease
//! (less a clock-drift margin) — with renewal off, a lease after the acquisition. A holder cut
//! off from its server (a partition, a paused process) cannot end the session itself, so the
//! acquiring request sets a server-side limit on the session's idleness equal to the lease, each
//! check sets it again, and the releasing request undoes it (no extra round trip, and a pooled
//! idle connection is never timed out):
//!
//! | kind | server-side limit | undone by |
//! | --- | --- | --- |
//! | PostgreSQL row | `idle_in_transaction_session_timeout` = lease (ms), local to the holding transaction | the `COMMIT` (or `ROLLBACK`) itself |
//! | PostgreSQL advisory | `idle_session_timeout` = lease (ms), set only when granted; none before PostgreSQL 14, which lacks it | `RESET` pipelined with `pg_advisory_unlock` |
//! | MySQL/MariaDB row and advisory | `wait_timeout` = lease rounded **up** to whole seconds | `SET SESSION wait_timeout = @@GLOBAL.wait_timeout` in the release's round trip |
//!
//! What that guarantees: the server counts idleness from its reply to the holder's last
//! request, which it sent after the holder sent that request, so the session — and the lock —
//! ends no sooner than the holder counts the lock lost (never while the holder may believe it
//! holds it), and at most the drift margin plus a one-way latency after (plus, on MySQL, the
//! rounding: under a second). Measured through a cut proxy with a 3 s lease, the lock was free
//! 35–38 ms after the holder's lost signal on all four kinds. A check keeps the session busy, so
//! a healthy holder is never timed out. A hold won after a wait in the queue is counted from the
//! grant (the server measures the wait in the same statement), so a long wait does not eat into
//! the lease. A connection whose check got no answer is not closed until the hold is released or
//! dropped (closing it could free the lock before the holder is told); its release then returns
//! at once, and the session ends when the connection closes or at the limit.
//!
//! # Session holds across a server restart
//! A restart of the server (clean, immediate or a crash) — or, on PostgreSQL, the reset of every
//! backend after one crashed — ends every session at once, and every row and advisory lock with
//! it, while their holders may still believe them for up to a lease: they learn of the loss at
//! their next check. So a row or advisory acquisition (mutex or read-write) grants nothing while
//! the server's sessions are younger than the lease it asks for (Chubby's lock-delay): by then
//! every holder of before the restart has counted its hold lost. `try_lock` reports such a lock
//! busy; a wait sleeps until the server is old enough (or its deadline). Measured with S17 (two
//! immediate restarts under 4 holders and 4 waiters, 2 s lease): 4 overlaps per run on each of
//! the four kinds before, 0 after; the first grant came 2.0–2.9 s after the kill.
//!
//! - **Covered**: a restart of the same server, and a PostgreSQL backend reset (the server's
//!   sessions are counted from the later of `pg_postmaster_start_time()` and the reset of the
//!   statistics, which crash recovery discards; MySQL/MariaDB: from `Uptime`).
//! - **Not covered**: a failover to a replica that had been running (a promoted standby, another
//!   Galera node): none of these locks replicates, so for them a failover is the same event as a
//!   restart, but the promoted server's sessions are old. Keep lock clients off a promoted server
//!   for a lease, or use the lock-table kind, whose leases are rows. Clients of older versions,
//!   without the delay, may grant at once. Clients of one name are assumed to use one lease: the
//!   server cannot know a holder's, so a client asking for a shorter lease than a holder's waits
//!   less than that holder may believe.
//! - **Cost**: no row or advisory lock is granted for up to a lease after the server (re)started
//!   — 30 s with the default lease. In the steady state nothing: each pooled connection asks the
//!   server's age once, and once the server is a lease old that holds for the connection's life
//!   (a restart ends the connection). [`SqlLockBuilder::restart_delay`] turns it off, for a server
//!   no lock can predate (one started for a test).
//!
//! # Behind a pooler
//! PostgreSQL behind PgBouncer (or pgcat, Supavisor, RDS Proxy): say so with `pooler=` in the URL
//! or [`PostgresLockBuilder::pooler`](postgres::PostgresLockBuilder::pooler) — see
//! [`postgres::Pooler`]. Through **session** pooling every kind works; through **transaction**
//! pooling the lock table and the row lock work (statements unnamed; the row lock's open
//! transaction pins its server connection; lock-table waiters re-check within 4–25 ms instead of
//! a `LISTEN` wake-up) and the advisory lock is refused at `build`; **statement** pooling is
//! refused. Undeclared (and unless `pooler=none`), `build` probes for a pooler, refuses the
//! pooling it finds certainly breaking, and warns where the server answers on another port;
//! probes can miss pooling, so declare it. Behind a declared pooler the restart delay asks the
//! server's age inside each grant, not once per connection. The [SQL guide][sql-guide] has the
//! errors a user sees, the probes' blind spots and pool sizing.
//!
//! Each row or advisory hold owns a connection, so the pool size caps how many one client holds:
//! with every connection in use, `try_lock` answers
//! [`Error::PoolExhausted`](lock_core::Error::PoolExhausted) at once, a timed wait waits for a
//! connection until its deadline. Their liveness checks run concurrently
//! ([`extends_independently`](lock_core::DistributedLock::extends_independently)): a renewal,
//! release or unlock against a silent server costs one I/O timeout however many holds a client
//! has.
//!
//! Calls block. From async code, run them in `tokio::task::spawn_blocking`; a PostgreSQL call
//! made on a tokio runtime's thread anyway runs on a helper thread instead of panicking, and
//! blocks the caller's thread meanwhile.
//!
//! TLS: plaintext by default; each database takes its own client's URL parameters (PostgreSQL:
//! libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`; MySQL: `ssl-mode`, `ssl-ca`,
//! `ssl-cert`, `ssl-key`) or the builder's [`tls`](SqlLockBuilder::tls); see the `TLS` section
//! of each database's module. Both use rustls with the ring provider: no OpenSSL.
//!
//! Feature `postgres` enables [`postgres`], feature `mysql` enables [`mysql`] (MySQL and MariaDB);
//! feature `testkit` the suite targets of the enabled databases.
//!
//! Guides, rendered in the `distlock` facade's docs: [SQL][sql-guide] (the lock tables and their
//! waiter queues, row and advisory locks, MySQL 8), [TLS][tls-guide], [read-write locks and
//! semaphores][primitives-guide] (the permits table), [behaviour under faults][faults-guide] and
//! [benchmarks][benchmarks-guide].
//!
//! [scenarios-guide]: https://docs.rs/distlock/latest/distlock/guide/scenarios/index.html
//! [sql-guide]: https://docs.rs/distlock/latest/distlock/guide/sql/index.html
//! [tls-guide]: https://docs.rs/distlock/latest/distlock/guide/tls/index.html
//! [primitives-guide]: https://docs.rs/distlock/latest/distlock/guide/primitives/index.html
//! [faults-guide]: https://docs.rs/distlock/latest/distlock/guide/faults/index.html
//! [benchmarks-guide]: https://docs.rs/distlock/latest/distlock/guide/benchmarks/index.html

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "mysql")]
pub mod mysql;

#[cfg(feature = "testkit")]
pub mod testkit;

#[cfg(any(feature = "postgres", feature = "mysql"))]
mod builder;
mod election;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod fence_flush;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod identifier;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod key_hash;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod lease;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod lock_key;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod queue_wait;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod restart_delay;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod session_connection;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod shared_session;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod tls;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod undo;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod waiters;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use builder::{SqlLockBuilder, MAX_TIMEOUT};
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// The MySQL driver, re-exported (feature `mysql`).
#[cfg(feature = "mysql")]
pub use ::mysql as mysql_driver;
