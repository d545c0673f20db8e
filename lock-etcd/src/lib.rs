//! etcd backend for [distlock](https://docs.rs/distlock): etcd's own `concurrency.Mutex`, key for
//! key, so that a Rust service, a Go service using `clientv3/concurrency` and `etcdctl lock`
//! share one lock.
//!
//! | | |
//! | --- | --- |
//! | layout | the key `<prefix>/<lease id in lower-case hex>`, value `""`, attached to the client's lease; the prefix is the lock's name (or `<namespace>/<name>`) |
//! | acquire | one transaction: create the key if it has never existed, and read the oldest key under `<prefix>/`; the key with the lowest create revision holds |
//! | wait | watch only the deletion of the newest older key (no herd), read again, until none is left; then check our key is still there |
//! | hold | [`HoldKind::Session`](lock_core::HoldKind::Session): as long as the client's lease |
//! | fencing | the key's create revision |
//! | lost | the lease revoked or expired; in doubt while its keep-alive stream is broken |
//! | read-write locks | etcd's `recipe.RWMutex`: keys `[ns/]%read-write/<name>/read/<unix nanos>` and `…/write/<unix nanos>`; a reader waits for older write keys, a writer for every older key (by mod revision), each watching only the newest such key |
//! | semaphores | a key `[ns/]%semaphore/<name>/<unix nanos>` per request, holding the permit count; the `permits` oldest keys (by create revision) hold; waiters watch the prefix for deletions |
//! | elections | etcd's `concurrency.Election` (`etcdctl elect`): the key `[ns/]%election/<name>/<lease hex>` holds the candidate's value and queues as a lock's; `proclaim` puts a value while the key's create revision is ours; followers watch the prefix |
//!
//! ```no_run
//! use lock_core::LockClient;
//! use lock_etcd::EtcdBackend;
//!
//! let client = LockClient::new(EtcdBackend::from_url("etcd://10.0.0.1:2379,10.0.0.2:2379")?);
//! let guard = client.lock_named("nightly-report")?.lock()?; // etcdctl lock nightly-report
//! let token = guard.fencing_token(); // the key's create revision
//! # let _ = token;
//! guard.unlock()?;
//! # Ok::<(), lock_core::Error>(())
//! ```
//!
//! # URLs
//! `etcd://[user:password@]host:port[,host:port…][/namespace]`; `etcds://…` for TLS, with the
//! parameters every distlock URL shares (`cacert`, `cert`, `key`, `sslmode=verify-full`). See
//! [`EtcdLockBuilder::from_url`]. Passwords never appear in `Debug` output, errors or logs.
//!
//! # One lease per client
//! A backend (and its clones) is one etcd client with one lease — etcd's `concurrency.Session`:
//! granted when the backend is built (TTL [`EtcdLockBuilder::session_ttl`], default 10 s, whole
//! seconds, raised by etcd to its minimum of 1.5 election timeouts), and kept alive by one
//! keep-alive stream that sends a request every third of the TTL, as Go's client does. Every
//! lock key of the client is attached to it, so renewal costs the same for one lock or 10,000:
//! lock-core's renewal batches are liveness checks, one keep-alive each, whatever their size
//! (measured: 10 keep-alives in 8 s with a 3 s TTL, for one hold and for 2,000).
//!
//! Because every lock of a client shares the lease, two threads of one client locking one name
//! would write the same key, and etcd's Mutex would let both "hold" it. Acquisitions of one name
//! by one client therefore queue in-process first (a local slot per name, held as long as the
//! key may exist): a second thread waits exactly as a rival in another process does.
//!
//! # What the guarantees rest on
//! - **Exclusion** rests on etcd's linearizable transactions and revisions: the holder is the
//!   key with the lowest create revision under the prefix, and etcd's revisions are totally
//!   ordered across the cluster, leader changes and restarts.
//! - **Loss on time** rests on the lease TTL. etcd expires the lease (and deletes its keys,
//!   handing the lock on) no earlier than one TTL, by its clock, after it received the last
//!   keep-alive. A hold counts from when the last confirmed keep-alive was *sent*, so it is
//!   reported lost — through the guard's [`LostSignal`](lock_core::LostSignal) — a TTL less the
//!   clock-drift margin after that, before etcd can have let a rival in (measured behind a cut
//!   network, 2 s TTL: in doubt 0.8 s after the cut, told lost at 1.47 s, the rival in at
//!   1.6–1.8 s; a killed server: in doubt within 20 ms, lost at 1.67 s). A broken or silent
//!   keep-alive stream puts the holds [in doubt](lock_core::HoldState::InDoubt) until a
//!   keep-alive is confirmed again; a keep-alive answered with TTL 0 (the lease revoked, e.g. by
//!   `etcdctl lease revoke`) puts every hold on that lease in doubt and loses it at its
//!   next liveness check. A lost lease is replaced by a new one for later acquisitions; the holds
//!   on the old one stay in doubt meanwhile (each hold follows its own lease).
//! - **Fencing** rests on the create revision: it increases with every write to the cluster, so
//!   every holder's key has a higher create revision than every earlier holder's. A store fenced
//!   by distlock *and* by `etcdctl lock` holders must compare create revisions: `etcdctl lock`
//!   exports `ETCD_LOCK_REV`, the revision of the response that found the lock free, which is
//!   at least the holder's create revision but may exceed the *next* holder's (a waiter that
//!   queued while the lock was held has a lower one). Such a holder reads its create revision
//!   with `etcdctl get "$ETCD_LOCK_KEY" -w json`. Within etcd, a transaction guarded by
//!   `create_revision(key) == token` (Go's `Mutex.IsOwner()`) acts only while the hold lasts.
//!
//! # Names, namespaces and `etcdctl lock`
//! etcd's Mutex scans every key under `<prefix>/`, so a lock `a` would see the keys of a lock
//! `a/b`. Names are percent-encoded before they become prefixes — `/` as `%2F`, `%` as `%25` —
//! so no two names interfere. A name without `/` or `%` is its own prefix, byte for byte:
//! `etcdctl lock orders` and `client.lock_named("orders")` exclude each other, both ways (and
//! so do Go's `concurrency.NewMutex(session, "orders")` and etcd's server-side Lock service);
//! for `jobs/nightly`, `etcdctl lock jobs%2Fnightly`. With a namespace `ns` the prefix is
//! `ns/<name>` (`etcdctl lock ns/orders`). Namespaces must not extend one another (`ns` and
//! `ns/a`), for the same reason.
//!
//! `etcdctl lock` defaults to a 10 s lease (`--ttl`); it deletes its key when its command ends
//! or on SIGINT. Killed otherwise, its lock is free one TTL later.
//!
//! # Elections and `etcdctl elect`
//! An election is etcd's `concurrency.Election` on the prefix
//! [`EtcdBackend::election_prefix`] (`%election/<name>`, under the namespace if any): a
//! campaign is the mutex's acquisition on that prefix whose key holds the campaign's value, the
//! leader is the key with the lowest create revision (its value, and its create revision as the
//! token), and `proclaim` is Go's `Proclaim`. So `etcdctl elect %election/<name> <proposal>`
//! and Go's `NewElection(session, "%election/<name>")` campaign in the same election as
//! `client.election("<name>")`, each seeing the other's value (`etcdctl elect -l` observes).
//! Followers watch the prefix from the revision of their last read: woken by every change,
//! never by a poll. As with locks, a client's threads campaigning for one election queue
//! in-process first.
//!
//! # Read-write locks, semaphores and Go's `recipe.RWMutex`
//! A read-write lock `N` is etcd's `recipe.RWMutex` (`go.etcd.io/etcd/client/v3/experimental/
//! recipes`) on the prefix `%read-write/N` (under the namespace if any), key for key: Go's
//! `NewRWMutex(session, "%read-write/N")` and `client.read_write_lock("N")` exclude each other.
//! Every acquisition has a key of its own, so a client's threads contend as clients do. Writers
//! are not starved: a reader behind a waiting writer waits for it. A writer's own read lock (a
//! downgrade) is a read key of its own when no writer waits behind the write lock, shared with
//! other readers once the write goes; when one does, the read keeps the write key until released
//! (see the `read_write` module). Tokens are the keys' create revisions, for both modes.
//!
//! etcd has no semaphore recipe; distlock's is in the same spirit: a key per permit request on
//! the client's lease, `%semaphore/N/<unix nanos>`, whose value is the count. The `permits`
//! oldest keys hold; a key with another count is
//! [`Error::PermitsMismatch`](lock_core::Error::PermitsMismatch), never over-admission. A release
//! wakes every waiter to read once (one watch on the prefix each).
//!
//! # Operational life
//! - Every call is bounded by one connect timeout (only when a new lease must be granted) and
//!   one I/O timeout; a waiting acquisition returns by its deadline plus one I/O timeout. A
//!   member that refuses connections is skipped (the request is sent again, to another), a
//!   member without a leader refuses requests (`require-leader`) instead of queueing them.
//! - A watch whose start revision was compacted away reads again and watches anew; a waiter also
//!   reads again on its own every few seconds, so a lost event delays it but never strands it.
//! - An authentication token refused as invalid (etcd's `simple` tokens expire after
//!   `--auth-token-ttl` of disuse) is renewed once and the request sent again. Credentials for a
//!   cluster without authentication are dropped with a warning, as Go's client ignores them.
//! - Dropping the backend revokes its lease, so every key it left goes at once.
//!
//! # Async code
//! Calls block until etcd answers. From a tokio async task they are refused with
//! [`Error::Unsupported`](lock_core::Error::Unsupported) — they would stall its executor — and
//! work from `tokio::task::spawn_blocking` (or any thread). Dropping the backend is allowed
//! anywhere.
//!
//! # Why `etcd-client` on a private runtime
//! etcd's API is gRPC; its JSON gateway serves the same calls over HTTP/1.1, which a blocking
//! client could speak without a runtime. It is not faster — measured by the
//! `gateway_vs_grpc` example (one put + delete pair on a fresh key, 2,000 pairs, three
//! alternated rounds on one server, release builds): medians 534, 640, 721 µs through the
//! gateway against 475, 633, 834 µs through this crate's client, ratios 1.12, 1.01, 0.86 — and
//! it turns every watch and the lease keep-alive into a long-lived chunked HTTP response of its
//! own (a connection per waiter), with keys and values base64 in JSON. `etcd-client` (tonic)
//! multiplexes them all over one HTTP/2 connection and is the maintained Rust client; it is
//! async, so each backend drives it from blocking calls through a private runtime with one
//! worker thread ([`ETCD_THREAD_NAME`]), which also runs the keep-alive stream between calls.
//! Its build compiles etcd's `.proto` files: it needs `protoc` and the protobuf well-known types
//! (Debian: `apt-get install protobuf-compiler libprotobuf-dev`; macOS: `brew install protobuf`;
//! elsewhere set `PROTOC` to a `protoc` binary whose include dir has
//! `google/protobuf/descriptor.proto`).
//!
//! # TLS
//! Feature `tls` (on by default): rustls with the ring provider, through tonic. Only
//! `verify-full` can be had — tonic always checks the chain and the host name — with a CA file
//! (`cacert=`) or the platform's roots; a client certificate for etcd's `--client-cert-auth`
//! with `cert=` and `key=`. A refused certificate is [`Error::Tls`](lock_core::Error::Tls) with
//! rustls's reason.
//!
//! # Limits
//! A lock key deleted by hand (`etcdctl del`) while held is not noticed by its holder — as with
//! etcd's own Mutex: the lease is what is watched; revoke it to take a client's locks away.
#![warn(missing_docs)]

mod backend;
mod blocking;
mod builder;
mod election;
mod error;
mod fenced;
mod guarded;
mod keep_alive;
mod keys;
mod lease;
mod mutex;
mod own_key;
mod read_write;
mod requests;
mod semaphore;
mod session;
mod slots;
mod tls;
mod wait;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use backend::EtcdBackend;
pub use builder::EtcdLockBuilder;
pub use etcd_client;
pub use fenced::EtcdFencedStore;
pub use lease::EtcdLease;
pub use session::ETCD_THREAD_NAME;
