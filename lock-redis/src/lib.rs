//! The Redis backends of distlock: [`RedisBackend`] (one server, a Sentinel-managed primary or
//! a Redis Cluster) and [`RedlockBackend`] (Redlock over N independent servers) implement
//! [`DistributedLock`](lock_core::DistributedLock) with [`Fencing`](lock_core::Fencing) and
//! [`NativeWait`](lock_core::NativeWait), so a [`LockClient`](lock_core::LockClient) over
//! either gets blocking, timed and non-blocking locks, per-thread reentrancy, lease renewal and
//! fencing tokens.
//!
//! "Source 00N" below names the articles on distributed locks that the project's scenario
//! catalogue is drawn from; `docs/scenarios.md` in the repository describes each one
//! ([rendered][scenarios-guide] in the `distlock` facade's docs).
//!
//! Guides, rendered there too: [Redis][redis-guide] (single node, reentrant hash, fair and
//! non-fair, Redlock, `WAIT`, Cluster, Sentinel), [TLS][tls-guide], [read-write locks and
//! semaphores][primitives-guide], [behaviour under faults][faults-guide] and
//! [benchmarks][benchmarks-guide].
//!
//! [scenarios-guide]: https://docs.rs/distlock/latest/distlock/guide/scenarios/index.html
//! [redis-guide]: https://docs.rs/distlock/latest/distlock/guide/redis/index.html
//! [tls-guide]: https://docs.rs/distlock/latest/distlock/guide/tls/index.html
//! [primitives-guide]: https://docs.rs/distlock/latest/distlock/guide/primitives/index.html
//! [faults-guide]: https://docs.rs/distlock/latest/distlock/guide/faults/index.html
//! [benchmarks-guide]: https://docs.rs/distlock/latest/distlock/guide/benchmarks/index.html
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{LockClient, LockOptions};
//! use lock_redis::RedisBackend;
//!
//! # fn main() -> Result<(), lock_core::Error> {
//! let backend = RedisBackend::builder("redis://127.0.0.1:6380/").build()?;
//! let options = LockOptions::builder().lease(Duration::from_secs(10)).build()?;
//! let client = LockClient::with_options(backend, options);
//!
//! let guard = client.lock_named("inventory:sku-1")?.lock()?;
//! let token = guard.fencing_token().expect("the Redis backend issues fencing tokens");
//! // ... write to the protected resource, passing `token` along ...
//! # let _ = token;
//! guard.unlock()?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! - **Two layouts** ([`RedisLockKind`]): `SetNx`, a string key holding the owner token
//!   (`SET NX PX`), and `ReentrantHash`, Redisson's hash of owner token to hold count. Each is a
//!   handful of Lua scripts (acquire, extend, release, leave the queue) run with `EVALSHA`; the
//!   lock name travels as `KEYS`/`ARGV`, never inside script text. `SetNx` acquires
//!   uncontended locks without a script, by a `MULTI`/`EXEC` transaction of plain commands
//!   (a script's set-up costs the server more than the commands themselves). Redis 5 or newer,
//!   replicating scripts by their effects (the default since 5, the only way since 7).
//! - **One atomic step** acquires, sets the lease and takes the next fencing token from a
//!   per-name counter that never expires, so tokens strictly increase across holders, expiries
//!   and client restarts (a refused `SetNx` transaction uses up a number too: tokens have gaps,
//!   never repeats). Extend and release compare the owner token first, in the same script.
//! - **Keys** ([`RedisKeys`]): `<prefix>:{<escaped name>}:lock|fence|queue|queue-timeouts`, one
//!   Redis Cluster hash tag per lock.
//! - **Waiting**: a release publishes on the lock's channel (`<prefix>:{<escaped name>}:…`);
//!   one subscriber connection per backend (per primary in a cluster) wakes the waiting
//!   threads. An ACL user needs rights
//!   on those channels, `&<prefix>:*` (Redis 7 gives new users none: `acl-pubsub-default
//!   resetchannels`). Without them locking still works — a release whose PUBLISH is refused
//!   still releases — but nobody is woken: waiters re-check on their own, about once a second
//!   (the subscriber logs a warning once per channel). Waiters queue in Redis in arrival order
//!   (a sorted set; a waiter joins one round trip after its first attempt found the lock taken),
//!   so a holder that releases and re-locks at once cannot starve them: a release with waiters
//!   reserves the lock for the head (`SetNx`: the value `turn:<token>`; `ReentrantHash`: the
//!   acquire script checks the queue). A waiter that gives up leaves the queue (on an error, by
//!   the undo described under *Limits*); one that dies leaves it within 3 s, and holds up a free
//!   lock for at most its turn (250 ms): the head of the queue must take a free lock within that
//!   time or lapse, and a turn never goes to a lapsed entry. A lost message delays a waiter by
//!   at most a second. That is the default; [`RedisLockBuilder::fair`]`(false)` (Redisson's
//!   `RLock` rather than its `RFairLock`) skips the queue: every release of a non-fair client
//!   wakes the lock's waiters, and whoever asks first gets it.
//! - **Leader election** ([`Elections`](lock_core::Elections), through
//!   [`Election`](lock_core::Election)): an election is a mutex on keys of its own
//!   (`<prefix>:{<escaped name>}:election…`, [`RedisKeys::election`]), so it waits, queues,
//!   fences, replicates and routes as the mutex does without ever contending with the mutex,
//!   read-write lock or semaphore of its name. The script that wins also writes the leader
//!   record ([`RedisKeys::leader_record`]: owner token, fencing token, value), so followers
//!   never see a leader without its value; a proclaim checks the owner and writes in one
//!   script; followers read the lock and the record in one script, which attributes a record
//!   only to the owner that wrote it. Watches hear every message on the election's channel (a
//!   win, a proclaim, a release); a leader whose lease runs out sends none, and followers see
//!   it by their re-check. Redlock has no elections.
//! - **Renewal** of many leases is one pipeline per batch, read with one deadline: a batch
//!   against a server that stopped answering fails after one read timeout, whatever its size.
//! - **Connections**: an r2d2 pool with connect, read and write timeouts; a connection that hit
//!   an I/O error or a timeout is discarded, never reused with a late reply in flight.
//! - **Replication**: [`RedisLockBuilder::wait_for_replicas`] adds `WAIT` after acquiring.
//!
//! # Redis Cluster and Sentinel
//! The same [`RedisBackend`] runs on the deployments Redis users run, chosen by the URL:
//!
//! | URL | deployment |
//! | --- | --- |
//! | `redis://[[user]:password@]host[:port][/db]`, `rediss://…` | one server (or a primary you name) |
//! | `redis+sentinel://[[user]:password@]s1[:port],s2[:port],…/<master-name>[/db]` | the primary that Redis Sentinel names (default port 26379) |
//! | `redis+cluster://[[user]:password@]n1[:port],n2[:port],…/` | a Redis Cluster, found through these seed nodes |
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS. The credentials are the data nodes';
//! sentinels with a password of their own take `?sentinel_username=…&sentinel_password=…`.
//! [`RedisLockBuilder::map_addresses`] rewrites the addresses a deployment announces (NAT,
//! containers), as Redisson's `NatMapper` does.
//!
//! - **Cluster**: every key of a lock shares one hash tag, so a lock lives on one primary; the
//!   backend keeps the slot map (`CLUSTER SLOTS`) and one connection pool per primary, so an
//!   uncontended acquisition is still one round trip to the slot's primary. A `MOVED` reply
//!   corrects the map for the slot and the request goes to the new primary at once; `ASK` (a
//!   slot being migrated) goes to the importing node after `ASKING`; `TRYAGAIN` (a request
//!   whose keys a migration split) and `CLUSTERDOWN` (a failover under way) are retried after a
//!   short pause — all within one I/O timeout, after which the reply is the caller's error. The
//!   map is refreshed in the background after a redirect or a node failure. Renewal batches go
//!   out as one pipeline per primary, all at once. Wake-ups use Redis 7's sharded pub/sub: a
//!   release `SPUBLISH`es on the lock's shard channel, which stays on the slot's primary (and
//!   its replicas) instead of being forwarded to every node as `PUBLISH` is; each primary a
//!   client waits on gets one subscriber connection (RESP3) that `SSUBSCRIBE`s there. When a
//!   slot moves, its old primary drops the shard channels (`sunsubscribe`): the waiters are
//!   woken, re-check, and wait on the new primary. Redis 7 or newer. While a slot migrates,
//!   Redis refuses a request whose keys are partly absent on the node asked (`TRYAGAIN`), and
//!   a lock's wait-queue keys usually are: so acquisitions are refused for most of a migration
//!   — a waiting one keeps trying (every 100 ms) until its own deadline, never past it — while
//!   what a holder needs does not wait for the migration: renewals and a read-write lock's or
//!   semaphore's release name only the lease's own key (`ASK` is followed, in a renewal batch
//!   too), and a mutex release the migration refuses is sent again by the lock key alone
//!   (waking every waiter). Measured with a 10 s migration under 8 contending threads
//!   (`tests/slot_migration.rs`): 0 overlaps, no lease lost, no call past its timeout.
//! - **Sentinel**: each new connection asks the sentinels (in turn, each within the connect and
//!   read timeouts) for the primary and checks it with `ROLE`: a node that is not the primary
//!   is never written to. A `READONLY` reply (a primary demoted under an open connection) or a
//!   refused connection drops the idle connections and retries on a fresh one, which finds the
//!   new primary: a client follows a failover without being rebuilt.
//! - **A failover and a held lease** (R06, R07). Replication is asynchronous: a failover may
//!   promote a replica that never got a lease, and then a rival can acquire a lock that its
//!   holder still has. So on these deployments a lease is put in doubt
//!   ([`HoldState::InDoubt`](lock_core::HoldState::InDoubt), `is_held()` false) the moment its
//!   primary stops answering — a failed call or renewal, or the backend's heartbeat, which asks
//!   every primary holding leases for its `ROLE` four times a second (with a 1 s timeout) —
//!   and back to held only
//!   when a renewal of that lease succeeds, on whichever primary serves it then; if the new
//!   primary does not have it, the renewal reports it lost. The holder hears of the doubt
//!   within about 1.25 s of its primary failing; a failover takes Sentinel's
//!   `down-after-milliseconds` (default 30 s) or the cluster's `cluster-node-timeout` (default
//!   15 s) plus an election, so keep those above 2 s. With
//!   [`RedisLockBuilder::wait_for_replicas`] an acquisition returns only once a replica has the
//!   lock, and so does the fencing counter: the hold survives the failover of its primary, and
//!   tokens keep increasing across it. Without `WAIT` the hold and the counter may be lost:
//!   the holder is told (in doubt, then lost) before a rival can get in, but tokens may repeat.
//!   Renewals are not `WAIT`ed: a failover may roll a renewed lease back to the lease the
//!   replica saw.
//! - **The limit: a partition that keeps the holder with its old primary** (Sentinel). "Told
//!   before a rival can get in" rests on the holder losing its primary when the deployment
//!   does. If a partition leaves the holder and the old primary together, cut off from the
//!   sentinels and the replicas, the old primary still answers `ROLE` = master and takes
//!   renewals, so the holder keeps believing the hold while the majority promotes a replica on
//!   which a rival acquires: two holders until the partition heals (the old primary, demoted,
//!   then answers `READONLY` and the hold goes in doubt). The holder cannot see a disagreement
//!   it cannot reach, and this backend does not ask the sentinels to confirm the primary of a
//!   held lease (that would put every hold in doubt whenever the sentinels are unreachable).
//!   What bounds the overlap is the server's own rule: `min-replicas-to-write 1` and
//!   `min-replicas-max-lag <L>` on every data node make a primary cut off from its replicas
//!   refuse writes (`NOREPLICAS`) within `L` s, so renewals fail and the hold ends at its last
//!   confirmed expiry, at most `L` s plus one lease after the cut. With Sentinel's
//!   `down-after-milliseconds` above `L` + the lease + a margin for clock drift, no rival is
//!   granted the lock before the holder stops believing it. The cost: a primary that loses
//!   every replica refuses acquisitions and renewals too. Without those settings this backend
//!   does not bound the overlap.
//!
//! # TLS
//! `rediss://` URLs (and `rediss+sentinel://`, `rediss+cluster://`) connect with TLS: rustls
//! with the ring provider, through redis-rs (feature `tls`, on by default). A TLS URL takes
//! `redis-cli`'s names for the files, and libpq's for the mode:
//!
//! | URL part | meaning |
//! | --- | --- |
//! | `?cacert=<PEM file>` | trust these CA certificates instead of the platform's roots |
//! | `&cert=<PEM file>&key=<PEM file>` | present this client certificate (for `tls-auth-clients yes`) |
//! | `&sslmode=verify-full` | the default: the chain, and that the certificate names the host in the URL |
//! | `&sslmode=verify-ca` | the chain only (any host name) |
//! | `&sslmode=require` | without `cacert`, no check at all; with it, as `verify-ca` (libpq's rule) |
//! | `#insecure` | redis-rs's spelling of `sslmode=require` without `cacert` |
//!
//! Percent-encode `&`, `#`, `+` and `%` in file names. [`RedisLockBuilder::tls`] and
//! [`RedlockBuilder::tls`] take the same settings as a [`TlsOptions`](lock_core::TlsOptions)
//! (replacing what the URL says). The settings apply to every server the URL leads to: the
//! node; the sentinels and the primary they name; every node of a cluster; every Redlock node.
//!
//! ```no_run
//! use lock_core::{TlsMode, TlsOptions};
//! use lock_redis::RedisBackend;
//!
//! let backend = RedisBackend::builder(
//!     "rediss://:s3cret@redis.internal:6380/?cacert=/etc/ssl/private-ca.pem",
//! )
//! .build()?;
//! let with_client_certificate = RedisBackend::builder("rediss://redis.internal:6380/")
//!     .tls(
//!         TlsOptions::new(TlsMode::VerifyFull)
//!             .root_cert("/etc/ssl/private-ca.pem")
//!             .client_cert("/etc/app/client.pem", "/etc/app/client.key"),
//!     )
//!     .build()?;
//! # let _ = (backend, with_client_certificate);
//! # Ok::<(), lock_core::Error>(())
//! ```
//!
//! A failed handshake — a certificate no trusted CA signed, one that does not name the host,
//! a server that does not speak TLS on that port, a refused client certificate — is
//! [`Error::Tls`](lock_core::Error::Tls) within the connect timeout, with rustls's error as the
//! source of its source (`redis: TLS handshake failed: connect: invalid peer certificate:
//! UnknownIssuer`); it is not retried. A plaintext `redis://` URL for a TLS-only port is an
//! [`Error::Connection`](lock_core::Error::Connection) that says the server closed the
//! connection during the setup and that a TLS-only port does that.
//!
//! Limits: the sentinels and the data nodes of a Sentinel URL share one TLS setting (a
//! deployment with plaintext sentinels and TLS data nodes cannot be described); cluster nodes
//! and Sentinel primaries are reached at the addresses the deployment announces (usually IP
//! addresses), which `verify-full` checks against the certificate — list them in it, or use
//! `verify-ca`. The files are read once, at `build`. With TLS, `build` installs ring as
//! rustls's process-wide crypto provider unless the application installed one first
//! (redis-rs builds its TLS configs from the process default). Without `cacert`, redis-rs
//! reads the platform's roots at every new connection.
//!
//! # Limits
//! A single Redis server (or primary) is a single point of truth: with asynchronous replication
//! a failover can lose a lock (source 001), which `WAIT` narrows but does not close. The fencing
//! counter is replicated just as asynchronously, so after such a failover the next holder may
//! get the same token again. Fencing tokens keep a resource safe from a holder that lost its
//! lock without knowing only as long as the counter itself survives. Further:
//! - **An acquisition that times out may still have happened.** If the server ran the request
//!   after its reply missed the read timeout (a stalled server runs every request it buffered
//!   when it resumes), it granted the lock to an owner token nobody will use, and may have
//!   queued a waiter that already gave up. The caller gets
//!   [`Error::Timeout`](lock_core::Error::Timeout) at once; the undo — compare-and-delete under
//!   the attempt's owner token, and leaving the queue — is written behind the request on the same
//!   connection, without waiting, so the server runs it right after the request whenever it gets
//!   to them: after a 5 s stall with eight abandoned waiters the lock is usable again within
//!   milliseconds of the resume, not after the orphan's lease and a turn per abandoned waiter.
//!   Where nothing can follow the request (the connection broke, `WAIT` failed), one clean-up
//!   thread per backend retries the undo in the background until the server answers or the
//!   grant (or queue entry) has lapsed anyway. Best effort across network partitions: an undo on
//!   a fresh connection can overtake a request still in flight, which then lapses at its lease end.
//! - **A failed wait costs one timeout.** A waiter whose server stops answering returns its error
//!   after one failed call (connect plus read timeout) — neither poking its subscriber nor
//!   leaving the queue asks the failed server a second time on the caller's thread; its queue
//!   entry is taken out by the undo above.
//! - **`WAIT` covers the acquisition only** ([`RedisLockBuilder::wait_for_replicas`]): renewals
//!   (extend) are not confirmed by replicas, so a failover can roll a renewed lease back to the
//!   lease the replica saw.
//! - **Eviction breaks locks.** Run the server with `maxmemory-policy noeviction` (or no
//!   `maxmemory`): an evicted lock key lets a second holder in, an evicted fencing counter
//!   restarts at 1 and tokens stop increasing. The fencing key of every distinct lock name stays
//!   forever (it must, for tokens to keep increasing): a workload of ever-new names grows the
//!   keyspace by one small key per name.
//! - **Leases run by the server's wall clock.** Redis expires keys by its system time, so a
//!   clock jump forward on the server (a manual change, a bad NTP step) ends leases early —
//!   while their holders still count them valid.
//!
//! # Redlock
//! [`RedlockBackend`] takes the lock on a majority of N independent nodes (no replication
//! between them), asking all of them at once, and counts it valid for `lease − elapsed − drift`
//! (drift = 1 % of the lease + 2 ms). It survives `(N − 1) / 2` nodes being down; with more down
//! it fails fast with [`Error::Connection`](lock_core::Error::Connection), leaving no hold
//! behind. See [`RedlockBackend`] and [`RedlockBuilder`].
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{LockClient, LockOptions};
//! use lock_redis::RedlockBackend;
//!
//! # fn main() -> Result<(), lock_core::Error> {
//! let backend = RedlockBackend::builder([
//!     "redis://10.0.0.1:6379/",
//!     "redis://10.0.0.2:6379/",
//!     "redis://10.0.0.3:6379/",
//!     "redis://10.0.0.4:6379/",
//!     "redis://10.0.0.5:6379/",
//! ])
//! .build()?;
//! let options = LockOptions::builder().lease(Duration::from_secs(10)).build()?;
//! let client = LockClient::with_options(backend, options);
//! let guard = client.lock_named("inventory:sku-1")?.lock()?;
//! // A best-effort token: see "What Redlock cannot guarantee".
//! let token = guard.fencing_token();
//! # let _ = token;
//! guard.unlock()?;
//! # Ok(())
//! # }
//! ```
//!
//! # What Redlock cannot guarantee
//! Redlock is no consensus protocol, and this crate does not pretend otherwise (source 002 quotes
//! Martin Kleppmann's critique; source 003 lists the node-restart failure):
//! - **Timing assumptions.** Safety rests on bounded network delay, bounded process pauses and
//!   clocks that drift by less than the allowance. A GC pause, a stopped VM or a clock jump
//!   longer than that lets a holder act after its lease ran out on the nodes — while it still
//!   believes it holds the lock.
//! - **Node restarts without persistence.** A node that restarts empty (or with `appendfsync`
//!   anything but `always`) forgets the lock; with the nodes of one majority plus that node, a
//!   second client forms another majority while the first still holds the lock (scenario R02:
//!   A on nodes 1–3, node 3 restarts, B on nodes 3–5). Persist the nodes, or keep a restarted
//!   node out for longer than the longest lease (antirez's "delayed restart").
//! - **No safe fencing tokens.** Redlock has no single counter that every acquisition passes
//!   through, so it cannot produce tokens that always increase. This crate's tokens are a best
//!   effort: each node counts, every answer (grant or refusal) contributes its count, a grant
//!   raises the counter of every answering node that lagged behind the issued token (one more
//!   round, only when counters disagree), and extending or releasing raises every node's
//!   counter to the holder's token. A later holder's
//!   token is higher whenever it hears from at least one node that saw the earlier token — which
//!   catches R02's stale write. But a partition, or restarts of every node that saw a token, can
//!   make tokens repeat or go backwards, and then a resource accepts a stale write.
//! - **No fair queue.** Waiters retry when any node announces a release; whoever's requests
//!   reach a majority first wins. This is an explicit exception to distlock's no-starvation goal:
//!   under steady contention a Redlock waiter can lose every race (use the single-node backend,
//!   which queues waiters in arrival order, where that matters).
//! - **One operation takes several node timeouts, not one.** An acquisition checks out
//!   connections (up to one node timeout), exchanges the request (one more, and a retry on a
//!   fresh connection for a node whose idle connection turned out dead: one more), reloads the
//!   script on nodes that answered `NOSCRIPT` (one more), and on failure undoes the attempt (up
//!   to two more: reconnect and exchange). Count on up to about six node timeouts for an
//!   operation that fails; the lease's validity always counts the real elapsed time.
//! - **Duplicate nodes are detected lexically.** The builder rejects the same `host:port` written
//!   twice, but not two spellings of one server (`localhost` and `127.0.0.1`, a hostname and its
//!   address): such a node would count twice towards the quorum. List every node once, spelled one way.
//!
//! If correctness depends on the lock, use a consensus system (ZooKeeper, etcd) or a
//! transactional database, and fence every write. Use Redlock (or the single-node lock) where an
//! occasional double holder is tolerable — an efficiency lock.
#![warn(missing_docs)]

mod backend;
mod builder;
mod cleanup;
mod connection;
mod error;
mod fenced;
mod guarded;
mod keys;
mod lua;
mod millis;
mod redlock;
mod reentrant_hash;
mod set_nx;
#[cfg(feature = "testkit")]
pub mod testkit;
mod tls;
mod topology;
mod transaction;
mod wait_loop;
mod waiter;

pub use backend::{RedisBackend, RedisLease, RedisLockKind};
pub use builder::{RedisLockBuilder, MAX_TIMEOUT};
pub use connection::CONNECTOR_THREAD_NAME;
pub use fenced::RedisFencedStore;
pub use keys::RedisKeys;
use millis::millis;
/// The Redis driver this backend is built on, for callers that need to reach the same server.
pub use redis;
pub use redlock::{RedlockBackend, RedlockBuilder, RedlockLease};
pub use waiter::SUBSCRIBER_THREAD_NAME;
