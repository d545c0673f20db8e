//! ZooKeeper backend for [distlock](https://docs.rs/distlock): the lock recipe of Apache
//! Curator's `InterProcessMutex`, node for node, so that a Rust service and a Java service using
//! Curator can share one lock path.
//!
//! | | |
//! | --- | --- |
//! | layout | `<root>/<name>/_c_<uuid>-lock-<sequence>`, ephemeral-sequential; parents are container nodes |
//! | acquire | create the node and list the siblings in one round trip; the lowest sequence holds |
//! | wait | watch only the predecessor: one release wakes one waiter (no herd, source 003 of the repository's `docs/scenarios.md`, [rendered][scenarios-guide] in the facade's docs), FIFO |
//! | hold | [`HoldKind::Session`](lock_core::HoldKind::Session): as long as the session lives |
//! | fencing | the node's creation zxid (`czxid`) |
//! | lost | the node deleted, or the session expired; in doubt while the session is disconnected |
//!
//! Guides, rendered in the `distlock` facade's docs: [ZooKeeper][zookeeper-guide],
//! [TLS][tls-guide] (`zk+tls://`), [read-write locks and semaphores][primitives-guide],
//! [behaviour under faults][faults-guide] and [benchmarks][benchmarks-guide].
//!
//! [scenarios-guide]: https://docs.rs/distlock/latest/distlock/guide/scenarios/index.html
//! [zookeeper-guide]: https://docs.rs/distlock/latest/distlock/guide/zookeeper/index.html
//! [tls-guide]: https://docs.rs/distlock/latest/distlock/guide/tls/index.html
//! [primitives-guide]: https://docs.rs/distlock/latest/distlock/guide/primitives/index.html
//! [faults-guide]: https://docs.rs/distlock/latest/distlock/guide/faults/index.html
//! [benchmarks-guide]: https://docs.rs/distlock/latest/distlock/guide/benchmarks/index.html
//!
//! # Read-write locks, semaphores and elections
//! [`ReadWriteLock`](lock_core::ReadWriteLock)s, [`Semaphore`](lock_core::Semaphore)s and
//! [`Election`](lock_core::Election)s follow Curator's `InterProcessReadWriteLock`,
//! `InterProcessSemaphoreV2` and `LeaderLatch` node for node, each under a parent of its own so
//! that the four primitives of one name never meet:
//!
//! | distlock | path (point the Curator recipe here) | nodes |
//! | --- | --- | --- |
//! | `client.lock_named("N")` | `<root>/N` | `_c_<uuid>-lock-<seq>` |
//! | `client.read_write_lock("N")` | `<root>/%read-write/N` | `_c_<uuid>-__READ__<seq>`, `_c_<uuid>-__WRIT__<seq>` |
//! | `client.semaphore("N", n)` | `<root>/%semaphore/N` | `locks/_c_<uuid>-lock-<seq>`, `leases/_c_<uuid>-lease-<seq>` |
//! | `client.election("N")` | `<root>/%election/N` | `_c_<uuid>-latch-<seq>`, data: the candidate's value (`LeaderLatch`'s id) |
//!
//! Permits and read-write holds are session holds like the mutex's. A semaphore's count is
//! written into distlock's lease nodes (`distlock:permits=<n>`), so distlock clients of another
//! count get [`Error::PermitsMismatch`](lock_core::Error::PermitsMismatch); Curator keeps no
//! count on the servers, so a Curator client of another count goes undetected. The module docs
//! of `read_write.rs` and `semaphore.rs` give the rules, the downgrade (a writer's own read
//! lock) and the fencing tokens. A leadership is a session hold like a lock's, fenced by its
//! node's creation zxid; a candidate's node holds its value, which a Java `LeaderLatch` reads as
//! the participant id (`getLeader().getId()`), and a proclaim rewrites it only while the node
//! exists (`election.rs`).
//!
//! # Sessions, leases and loss
//! A lock is held by an ephemeral node, which the servers delete when the session ends. The
//! renewal of held locks is a liveness check: one `sync` per batch (answered through the leader)
//! confirms the session, and a watch on each held node (set by its first check, in the same
//! round trip) reports a node deleted underneath its holder. A disconnected session, or a check
//! without an answer, puts the hold in doubt (a session that ended keeps its holds in doubt
//! after the client has connected a new one, until their checks find them lost)
//! ([`HoldState::InDoubt`](lock_core::HoldState::InDoubt), Curator's SUSPENDED); a hold with no
//! successful check for the negotiated session timeout — or the lock's lease, if shorter — less
//! a clock-drift margin (1 % + 2 ms) is lost (Curator's LOST), because the servers expire a
//! session one session timeout, by their clock, after they last heard from it — at the earliest
//! when that check reached them — and then grant the lock to the next waiter. So the holder is
//! always told before a rival can get in, and a cut-off holder's lock is free on the servers
//! within a second or so of that (measured: told 2.46 s after a cut, rival in at 3.05 s, with a
//! 3 s session). The lease option caps how long a silent session is trusted, and the session
//! timeout ([`ZooKeeperLockBuilder::session_timeout`], default 10 s) is how long a crashed holder
//! keeps its lock.
//!
//! In an ensemble the leader expires sessions, and hears of a client's requests to a follower
//! only from that follower's next report (every half tick); the `sync` of a check is not such a
//! report. A follower cut off from the leader right after answering a check may have last
//! reported the session up to about a third of the session timeout earlier (the client's idle
//! ping interval), and the leader may expire it that much sooner than counted above. Where a
//! holder may sit behind such a follower, give the lock a lease of at most two thirds of the
//! session timeout: the hold is then believed no longer than that. After an expiry the backend connects a new session for later acquisitions.
//!
//! Every call is bounded by one connect timeout (only when the session has ended and a new one
//! is needed) and one request timeout, however many locks the session holds: a liveness batch is
//! one round trip, and a waiting acquisition returns by its deadline plus one request timeout.
//!
//! # Async code
//! Calls block until the servers answer. From a tokio async task they are refused with
//! [`Error::Unsupported`](lock_core::Error::Unsupported) — they would stall its executor — and
//! work from `tokio::task::spawn_blocking` (or `block_in_place`, or any thread). Dropping the
//! backend is allowed anywhere: inside an async task a thread of its own closes the session.
//!
//! # Fencing: why the creation zxid, not the sequence number
//! Every write to ZooKeeper gets the next zxid, across the whole ensemble and every leader
//! change, so the zxid that created a holder's node is strictly greater than every earlier
//! holder's. The sequence number is only a counter of the parent node: it restarts at 0 when the
//! empty container parent is removed and created again, and would then hand out tokens below
//! those already seen.
//!
//! # Why `zookeeper-client` and not the `zookeeper` crate
//! Measured on this project's test servers: the `zookeeper` 0.8 crate busy-loops while the server
//! is down (11.4 s of CPU in 10 s), blocks a request for the whole of a server pause (it has no
//! request timeout), and never reports session expiry, so a holder could not learn it lost its
//! lock. `zookeeper-client` reports every session state; this crate drives it from blocking
//! calls through a private one-worker runtime per backend ([`ZK_THREAD_NAME`]), with a deadline on
//! every call.
//!
//! # Security
//! [`ZooKeeperLockBuilder::digest`] authenticates with the `digest` scheme, and every node —
//! root, lock parents, lock nodes — is created with `CREATOR_ALL` (ZooKeeper checks the right to
//! delete a node on its parent). A wrong password authenticates another identity, which gets
//! `NoAuth`: reported as [`Error::Authentication`](lock_core::Error::Authentication). The
//! digest credentials are sent once the session is established, not with the connect request
//! (see `session.rs`); over plaintext they cross the network in the clear: use TLS (below)
//! where that matters.
//!
//! # TLS
//! Feature `tls` (off by default: it compiles aws-lc-rs, a C library, through
//! `zookeeper-client`'s rustls) connects to ZooKeeper's `secureClientPort` (servers with
//! `serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory` and `ssl.*`
//! settings), from a `zk+tls://` URL or [`ZooKeeperLockBuilder::tls`]:
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # fn main() -> Result<(), lock_core::Error> {
//! use lock_core::{TlsMode, TlsOptions};
//! use lock_zk::{ZooKeeperBackend, ZooKeeperLockBuilder};
//!
//! let backend = ZooKeeperLockBuilder::from_url(
//!     "zk+tls://app:s3cret@zk1:2281,zk2:2281/locks?cacert=/etc/zk/ca.pem",
//! )?
//! .build()?;
//! let with_client_certificate = ZooKeeperBackend::builder("zk1:2281,zk2:2281")
//!     .tls(
//!         TlsOptions::new(TlsMode::VerifyFull)
//!             .root_cert("/etc/zk/ca.pem")
//!             .client_cert("/etc/app/client.pem", "/etc/app/client.key"),
//!     )
//!     .build()?;
//! # let _ = (backend, with_client_certificate);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tls"))]
//! # fn main() {}
//! ```
//!
//! The URL's parameters ([`ZooKeeperLockBuilder::from_url`]) are lock-redis's: `cacert`,
//! `cert`, `key`, `sslmode` (`verify-full`, the default, or `verify-ca`). A root certificate
//! file is required: `zookeeper-client` neither reads the platform's roots nor connects without
//! checking the chain (so `require` without `cacert`, and `prefer`, are configuration errors).
//! A failed handshake is [`Error::Tls`](lock_core::Error::Tls) with rustls's error (`zookeeper:
//! TLS handshake failed: connect to zk1:2281: invalid peer certificate: UnknownIssuer`):
//! `zookeeper-client` reports a failed handshake only as a lost connection, so after a connect
//! that found no server the backend repeats the handshake itself, with the same settings, to
//! learn why. A plaintext `zk://` URL for a TLS-only port is an
//! [`Error::Connection`](lock_core::Error::Connection) that says the server accepts connections
//! but closed them before a session, as a TLS-only port does. Building with TLS installs ring
//! as rustls's process-wide crypto provider unless the application installed one first:
//! `zookeeper-client` builds its TLS config from the process default, and with ring and
//! aws-lc-rs both compiled in, rustls will not choose.
//!
//! Feature `testkit` (not semver-stable): the suite target over lock-testkit's harness servers.
#![warn(missing_docs)]

mod backend;
mod blocking;
mod builder;
mod election;
mod error;
mod fenced;
mod guarded;
mod lease;
mod path;
mod read_write;
mod recipe;
mod semaphore;
mod session;
mod tls;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use backend::ZooKeeperBackend;
pub use builder::ZooKeeperLockBuilder;
pub use fenced::ZooKeeperFencedStore;
pub use lease::ZooKeeperLease;
pub use session::ZK_THREAD_NAME;
pub use zookeeper_client;
