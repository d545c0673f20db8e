//! Small helpers the scenarios share.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::{DistributedLock, Lock, LockClient, LockGuard, LockName, LockOptions, OwnerToken};

use crate::suite::{Failure, SuiteTarget};

/// A fresh name for one test, so runs never see each other's locks: `prefix-<16 hex digits>`,
/// under the namespace [`set_name_namespace`] set, if any.
pub fn unique_name(prefix: &str) -> LockName {
    let token = OwnerToken::random().to_hex();
    let namespace = NAMESPACE.get().map_or("", String::as_str);
    LockName::new(format!("{namespace}{prefix}-{}", &token[..16])).expect("generated names are valid")
}

static NAMESPACE: OnceLock<String> = OnceLock::new();

/// Puts every name [`unique_name`] makes from now on under `namespace` (`distlock-compare:` when
/// the suite runs on a user's own servers, so its locks are told apart and cleaned up). Set once
/// per process; a second call is ignored.
pub fn set_name_namespace(namespace: &str) {
    let _ = NAMESPACE.set(namespace.to_owned());
}

/// Options with this lease, renewal on or off, defaults otherwise.
pub(crate) fn options(lease: Duration, renewal: bool) -> LockOptions {
    LockOptions::builder().lease(lease).renewal(renewal).build().expect("suite options are valid")
}

/// A client of its own (its own connections) with these options.
pub(crate) fn client<T: SuiteTarget>(
    target: &T,
    options: LockOptions,
) -> Result<LockClient<T::Backend>, Failure> {
    Ok(LockClient::with_options(target.backend()?, options))
}

/// The longest a scenario waits for a lock it expects to get: far beyond any correct hand-off,
/// short enough that a broken backend fails the scenario instead of hanging the run.
pub(crate) const ACQUIRE_BOUND: Duration = Duration::from_secs(30);

/// Acquires `lock`, waiting at most [`ACQUIRE_BOUND`]; not getting it is a failure.
pub(crate) fn acquire<B: DistributedLock>(lock: &Lock<B>) -> Result<LockGuard<B>, Failure> {
    lock.try_lock_for(ACQUIRE_BOUND)?
        .ok_or_else(|| Failure(format!("could not acquire {} within {ACQUIRE_BOUND:?}", lock.name())))
}

/// The guard a timed acquisition of `name` returned; not getting one is a failure.
pub(crate) fn acquire_within<G>(
    acquired: lock_core::Result<Option<G>>,
    name: &LockName,
) -> Result<G, Failure> {
    acquired?.ok_or_else(|| Failure(format!("could not acquire {name} within {ACQUIRE_BOUND:?}")))
}

pub(crate) const MS: Duration = Duration::from_millis(1);
pub(crate) const SECOND: Duration = Duration::from_secs(1);

/// Whether a scenario that needs an optional ability applies: the kind declares it
/// ([`SuiteTarget::abilities`]) and its backend returns it. A mismatch either way is a failure —
/// a backend that forgets to return an ability must not turn its scenario n/a.
pub(crate) fn has_ability(declared: bool, present: bool, ability: &str) -> Result<bool, Failure> {
    match (declared, present) {
        (true, false) => Err(Failure(format!(
            "the kind declares {ability}, but its backend's {ability}() returns None (forgotten?)"
        ))),
        (false, true) => Err(Failure(format!(
            "the backend returns {ability}(), but the kind does not declare it in SuiteTarget::abilities"
        ))),
        (declared, _) => Ok(declared),
    }
}

/// RW01–RW04 and SEM01–SEM03: whether `ability` (`"read_write"` or `"permits"`) applies to the
/// kind, checked as [`has_ability`] checks the mutex's; `Err(reason)` for n/a, with the backend's
/// own [`missing_abilities`](lock_core::DistributedLock::missing_abilities) reason.
pub(crate) fn shared_ability<T: SuiteTarget>(
    target: &T,
    ability: &str,
) -> Result<Result<(), String>, Failure> {
    let backend = target.backend()?;
    let abilities = target.abilities();
    let (declared, present) = match ability {
        "read_write" => (abilities.read_write, backend.read_write().is_some()),
        _ => (abilities.permits, backend.permits().is_some()),
    };
    if has_ability(declared, present, ability)? {
        return Ok(Ok(()));
    }
    let reason = backend.missing_abilities().unwrap_or("the backend has no such ability");
    Ok(Err(format!("{}: {reason}", backend.backend_name())))
}

/// LE01–LE04: `Err(reason)` (n/a) when the kind has no [`Elections`](lock_core::Elections),
/// with the reason its backend's profile gives; checked as [`has_ability`] checks the mutex's
/// abilities (declared by the kind and returned by its backend, or neither).
pub(crate) fn elections_apply<T: SuiteTarget>(target: &T) -> Result<Result<(), String>, Failure> {
    let backend = target.backend()?;
    if has_ability(target.abilities().elections, backend.elections().is_some(), "elections")? {
        return Ok(Ok(()));
    }
    let why = backend.profile().elections;
    let why = if why == "none" { "it has no leader election" } else { why };
    Ok(Err(format!("{}: {why}", backend.backend_name())))
}

/// The lease of the renewal checks in RW03 and SEM03 (as S08's).
pub(crate) const RENEWED_LEASE: Duration = Duration::from_secs(1);

/// RW03 and SEM03: holds of one client with [`RENEWED_LEASE`] and renewal on (renewed together,
/// one batch for the mix) stay held for 2.5 leases, while `taken` — a rival's attempts on the
/// same locks — finds none of them free.
pub(crate) fn renewed_together<B: DistributedLock>(
    guards: &[&LockGuard<B>],
    mut taken: impl FnMut() -> Result<Option<String>, Failure>,
) -> Result<(), Failure> {
    let until = std::time::Instant::now() + RENEWED_LEASE * 5 / 2;
    while std::time::Instant::now() < until {
        if let Some(what) = taken()? {
            // Which of the two: the holder still believed it held (a breach), or it had been
            // told its hold lapsed (renewal fell behind: no breach, still a failure).
            let believed = guards.iter().all(|guard| guard.is_held());
            return Err(Failure(if believed {
                format!("a rival took {what} while its renewed holder kept it")
            } else {
                format!("a rival took {what} after the renewal fell behind (the holder was told it lost it)")
            }));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    match guards.iter().find(|guard| !guard.is_held()) {
        Some(guard) => Err(Failure(format!("the renewed hold of {} ran out", guard.name()))),
        None => Ok(()),
    }
}
