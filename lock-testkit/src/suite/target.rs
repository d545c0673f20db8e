//! [`SuiteTarget`]: what a backend registration gives the suite.

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::{DistributedLock, LockName, MemoryBackend};

use crate::harness::TestServer;
use crate::workload::RoundTripProbe;

/// The optional abilities of [`DistributedLock`] a registered kind must have. The suite checks
/// them against what the backend returns: a backend that forgets `native_wait()` or
/// `fencing()` fails S11 or S09 instead of turning it n/a.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Abilities {
    /// [`Fencing`](lock_core::Fencing): S09 applies.
    pub fencing: bool,
    /// [`NativeWait`](lock_core::NativeWait): S11 applies.
    pub native_wait: bool,
    /// [`ReadWrite`](lock_core::ReadWrite): RW01–RW04 apply.
    pub read_write: bool,
    /// [`Permits`](lock_core::Permits): SEM01–SEM03 apply.
    pub permits: bool,
    /// [`Elections`](lock_core::Elections): LE01–LE04 apply.
    pub elections: bool,
}

impl Abilities {
    /// Fencing tokens and server wake-ups for the mutex (no read-write locks or semaphores).
    pub const ALL: Self =
        Self { fencing: true, native_wait: true, read_write: false, permits: false, elections: false };
    /// None (the docs' broken recipes).
    pub const NONE: Self =
        Self { fencing: false, native_wait: false, read_write: false, permits: false, elections: false };

    /// Fencing tokens, and server wake-ups if `native_wait`.
    pub const fn fencing_and(native_wait: bool) -> Self {
        Self { fencing: true, native_wait, read_write: false, permits: false, elections: false }
    }

    /// These abilities, and read-write locks if `read_write` and semaphores if `permits`.
    pub const fn with_shared(self, read_write: bool, permits: bool) -> Self {
        Self { read_write, permits, ..self }
    }

    /// These abilities and leader election.
    pub const fn with_elections(self) -> Self {
        Self { elections: true, ..self }
    }
}

/// Why a backend cannot support a scenario by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotApplicable(pub &'static str);

/// A backend under test: how to make independent clients of the same servers, and the probes
/// that some scenarios need. A probe left at its default makes its scenario `n/a` with the reason
/// given, never a silent pass.
pub trait SuiteTarget: Send + Sync + 'static {
    /// The backend type.
    type Backend: DistributedLock;

    /// The name shown in reports (`"memory"`, `"redis set-nx"`, `"N02 del without owner check"`).
    fn label(&self) -> String;

    /// The abilities this kind must have (declared here, by the registration, and checked
    /// against the backend by S09 and S11).
    fn abilities(&self) -> Abilities;

    /// A new client with connections of its own, to the same servers as every other.
    ///
    /// # Errors
    /// Whatever connecting reports.
    fn backend(&self) -> lock_core::Result<Self::Backend>;

    /// S05: the lease the *server* has on `name` right now (Redis `PTTL`, the lock table's expiry
    /// column); `Ok(None)` if the lock is not held.
    ///
    /// # Errors
    /// [`NotApplicable`] when the server keeps no lease to inspect.
    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        let _ = name;
        Err(NotApplicable("the backend keeps no server-side lease to inspect"))
    }

    /// S05: arms a crash between the steps of the next acquisition by a client of this target;
    /// `false` when acquisition is a single atomic step (nothing to crash between).
    fn inject_crash_mid_acquire(&self) -> bool {
        false
    }

    /// S10: takes the lock away from its holder behind the client's back (deletes the key or row,
    /// kills the session or connection).
    ///
    /// # Errors
    /// [`NotApplicable`] when there is no way to do that from outside.
    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        let _ = name;
        Err(NotApplicable("no way to take a lock away from outside its holder"))
    }

    /// S04: the environment a child process needs to reach the same servers (for example
    /// `DISTLOCK_REDIS_URL`), so that the child test process builds a target on them.
    ///
    /// # Errors
    /// [`NotApplicable`] when locks cannot be shared with another process.
    fn child_env(&self) -> Result<Vec<(String, String)>, NotApplicable> {
        Err(NotApplicable("locks live in one process; a crashed process takes them with it"))
    }

    /// S04: how soon after its holder's death a lock with this lease must be free again.
    /// Defaults to the lease plus one second (TTL backends).
    fn free_after_crash_within(&self, lease: Duration) -> Duration {
        lease + Duration::from_secs(1)
    }

    /// S13: a client of the servers at `addresses` (a single-server backend uses the first; a
    /// multi-node one uses all). The scenario passes closed ports, and listeners that accept
    /// connections but never answer.
    ///
    /// # Errors
    /// [`NotApplicable`] for in-process backends.
    fn backend_at(
        &self,
        addresses: &[SocketAddr],
    ) -> Result<lock_core::Result<Self::Backend>, NotApplicable> {
        let _ = addresses;
        Err(NotApplicable("in-process backend: there is no server to be unreachable"))
    }

    /// S13: a client that presents a wrong password.
    ///
    /// # Errors
    /// [`NotApplicable`] when the backend has no authentication.
    fn wrong_password_backend(&self) -> Result<lock_core::Result<Self::Backend>, NotApplicable> {
        Err(NotApplicable("the backend has no authentication"))
    }

    /// S13: the longest a client from [`backend_at`](Self::backend_at) may take to report a
    /// server that refuses connections or never answers (its connect or read timeout, plus slack).
    fn unreachable_report_bound(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// S15: a client of servers of the scenario's own, which it stops (SIGSTOP) while the client
    /// holds a lease, and resumes afterwards.
    ///
    /// # Errors
    /// [`NotApplicable`] for in-process backends.
    fn own_servers(&self) -> Result<lock_core::Result<OwnServers<Self::Backend>>, NotApplicable> {
        Err(NotApplicable("in-process backend: there is no server to stop answering"))
    }

    /// S17: `clients` clients of servers of the scenario's own (one server, or each node of a
    /// group), which it restarts in place — killed at once, started again on the same port and
    /// data — while the clients hold and wait for locks.
    ///
    /// # Errors
    /// [`NotApplicable`] when a restart cannot keep the locks and the backend says so by design
    /// (the reason names the option that would), and for in-process backends.
    fn restartable_servers(
        &self,
        clients: usize,
    ) -> Result<lock_core::Result<RestartableServers<Self::Backend>>, NotApplicable> {
        let _ = clients;
        Err(NotApplicable(
            "in-process backend: the locks live in the clients' process; there is no server to restart",
        ))
    }

    /// S16: a client whose every connection to the servers goes through `route`. The target calls
    /// `route` once per server address it would connect to and connects to the address it
    /// returns instead (the scenario's [`FaultProxy`](crate::FaultProxy), which it cuts). The
    /// client connects and waits for each reply with `timeout`, and has room for `holds` session
    /// holds at once (a pool of more than `holds` connections).
    ///
    /// # Errors
    /// [`NotApplicable`] for in-process backends.
    fn backend_routed(
        &self,
        route: &mut dyn FnMut(SocketAddr) -> SocketAddr,
        timeout: Duration,
        holds: u32,
    ) -> Result<lock_core::Result<Self::Backend>, NotApplicable> {
        let _ = (route, timeout, holds);
        Err(NotApplicable("in-process backend: there is no connection to cut"))
    }

    /// S16: the longest one call of a [`backend_routed`](Self::backend_routed) client with
    /// `timeout` may take while its connections are cut: one connect and one I/O timeout (a
    /// connect through a cut proxy succeeds and its handshake times out), plus slack.
    fn routed_call_bound(&self, timeout: Duration) -> Duration {
        2 * timeout + Duration::from_millis(500)
    }

    /// W4: why holding 10,000 locks at once does not apply to this backend, if it does not.
    /// Defaults to: session holds own a connection each (row and advisory locks), so 10,000 of
    /// them would take 10,000 connections; a backend whose session holds share one session
    /// (ZooKeeper) says `None`.
    ///
    /// # Errors
    /// A client that cannot be built.
    fn many_holds_not_applicable(&self) -> lock_core::Result<Option<&'static str>> {
        Ok((self.backend()?.hold_kind() == lock_core::HoldKind::Session).then_some(
            "session holds own a connection each: 10,000 held locks would take 10,000 connections",
        ))
    }

    /// GW02: a fenced store on this kind's own servers (the backend crate's `FencedStore`), its
    /// table or directory created; the in-memory kinds use
    /// [`MemoryFencedStore`](lock_core::MemoryFencedStore).
    ///
    /// # Errors
    /// [`NotApplicable`] when the kind has no store to fence writes in (the reason says why).
    fn fenced_store(&self) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, NotApplicable> {
        Err(NotApplicable("the kind has no fenced store"))
    }

    /// GW01: a write of `value` under `key` on the lock's own server, made by the server only
    /// while `guard`'s hold is still its (the backend's `…_if_held`, through
    /// [`LockGuard::with_lease`](lock_core::LockGuard::with_lease)).
    ///
    /// # Errors
    /// [`NotApplicable`] when the kind has no such write (the reason says why).
    fn write_if_held(
        &self,
        guard: &lock_core::LockGuard<Self::Backend>,
        key: &str,
        value: &[u8],
    ) -> Result<lock_core::Result<()>, NotApplicable> {
        let _ = (guard, key, value);
        Err(NotApplicable("no write on the lock's own server conditional on the hold"))
    }

    /// GW01: what the last [`write_if_held`](Self::write_if_held) of `key` under the lock `name`
    /// left, `None` if nothing.
    ///
    /// # Errors
    /// [`NotApplicable`] as for [`write_if_held`](Self::write_if_held).
    fn read_guarded(
        &self,
        name: &LockName,
        key: &str,
    ) -> Result<lock_core::Result<Option<Vec<u8>>>, NotApplicable> {
        let _ = (name, key);
        Err(NotApplicable("no write on the lock's own server conditional on the hold"))
    }

    /// `distlock compare` on a user's own servers: deletes what its runs left under lock names
    /// that start with `prefix` (keys, rows), and says how many it deleted. Defaults to none:
    /// in-process backends keep nothing, and ZooKeeper's servers remove empty lock parents.
    ///
    /// # Errors
    /// When the servers cannot be reached.
    fn clean_up(&self, prefix: &str) -> Result<u64, String> {
        let _ = prefix;
        Ok(0)
    }

    /// Benchmarks: the physical limit results are printed beside — one round trip to the
    /// server with the cheapest request, on `backend`'s own connections (checked out of the pool
    /// its locks use, or on its session), timed on demand. `None` for in-process backends.
    fn round_trip(&self, backend: &Self::Backend) -> Option<RoundTripProbe> {
        let _ = backend;
        None
    }

    /// [`round_trip`](Self::round_trip) to the server that serves the lock `name`, for kinds
    /// whose names live on different servers (a Redis Cluster's primaries): W1 times its pairs
    /// against the round trip of their own server. Defaults to `round_trip`.
    fn round_trip_for(&self, backend: &Self::Backend, name: &LockName) -> Option<RoundTripProbe> {
        let _ = name;
        self.round_trip(backend)
    }
}

/// S15 and S17: servers a scenario may stop, resume and restart.
pub trait PausableServers: Send + Sync {
    /// Stops every server (SIGSTOP): connections stay open, nothing answers.
    ///
    /// # Errors
    /// When a server cannot be signalled.
    fn pause(&self) -> Result<(), String>;

    /// Lets every server run again (SIGCONT).
    ///
    /// # Errors
    /// When a server cannot be signalled.
    fn resume(&self) -> Result<(), String>;

    /// Kills every server at once (SIGKILL, as a crash or an immediate shutdown: no client is
    /// told) and starts it again on the same port with the same data, returning once it answers.
    ///
    /// # Errors
    /// When a server cannot be killed or does not come back; by default, always (servers whose
    /// restart S17 does not use).
    fn restart(&self) -> Result<(), String> {
        Err("these servers cannot be restarted in place".into())
    }
}

impl<S: TestServer + Send + Sync> PausableServers for Vec<S> {
    fn pause(&self) -> Result<(), String> {
        self.iter().try_for_each(|server| server.process().pause().map_err(|e| e.to_string()))
    }

    fn resume(&self) -> Result<(), String> {
        self.iter().try_for_each(|server| server.process().resume().map_err(|e| e.to_string()))
    }

    fn restart(&self) -> Result<(), String> {
        self.iter().try_for_each(|server| server.process().restart().map_err(|e| e.to_string()))
    }
}

/// S15: a client of servers of its own, the servers, and how long any of the client's calls may
/// block when they stop answering.
pub struct OwnServers<B> {
    /// A client of `servers` only.
    pub backend: B,
    /// The servers, kept running (or stopped) for as long as this value lives.
    pub servers: Box<dyn PausableServers>,
    /// The longest one call of `backend` may take against stopped servers: its connect and read
    /// timeouts, plus slack.
    pub call_bound: Duration,
}

impl<B> std::fmt::Debug for OwnServers<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnServers").field("call_bound", &self.call_bound).finish_non_exhaustive()
    }
}

/// S17: clients of servers of their own, and the servers.
pub struct RestartableServers<B> {
    /// Independent clients (connections of their own each) of `servers` only.
    pub clients: Vec<B>,
    /// The servers, kept running for as long as this value lives.
    pub servers: Box<dyn PausableServers>,
}

impl<B> std::fmt::Debug for RestartableServers<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestartableServers").field("clients", &self.clients.len()).finish_non_exhaustive()
    }
}

/// The in-memory reference backend as a suite target: every client shares one lock space.
#[derive(Debug, Clone, Default)]
pub struct MemoryTarget {
    space: MemoryBackend,
}

impl MemoryTarget {
    /// A target with an empty lock space.
    pub fn new() -> Self {
        Self::default()
    }
}

impl SuiteTarget for MemoryTarget {
    type Backend = MemoryBackend;

    fn label(&self) -> String {
        "memory".into()
    }

    fn abilities(&self) -> Abilities {
        Abilities::ALL.with_shared(true, true).with_elections()
    }

    fn fenced_store(&self) -> Result<lock_core::Result<Box<dyn lock_core::FencedStore>>, NotApplicable> {
        Ok(Ok(Box::new(self.space.fenced_store())))
    }

    fn backend(&self) -> lock_core::Result<MemoryBackend> {
        Ok(self.space.clone())
    }

    fn remaining_lease(&self, name: &LockName) -> Result<lock_core::Result<Option<Duration>>, NotApplicable> {
        Ok(Ok(self.space.remaining_lease(name)))
    }

    fn break_lock(&self, name: &LockName) -> Result<lock_core::Result<()>, NotApplicable> {
        self.space.force_release(name);
        Ok(Ok(()))
    }
}
