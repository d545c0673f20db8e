//! One file per scenario of `docs/scenarios.md`; each exports `run`.

pub(crate) mod atomic_acquire_and_expiry;
pub(crate) mod bad_configuration;
pub(crate) mod connection_cut;
pub(crate) mod fencing_tokens;
pub(crate) mod guard_life_cycle;
pub(crate) mod handoff_latency;
pub(crate) mod holder_crash;
pub(crate) mod independent_and_safe_names;
pub(crate) mod lease_renewal;
pub(crate) mod lock_lost_underneath;
pub(crate) mod loss_on_time;
pub(crate) mod multi_lock;
pub(crate) mod mutual_exclusion;
pub(crate) mod owner_safe_release;
pub(crate) mod permit_crash;
pub(crate) mod permits_mismatch;
pub(crate) mod read_write_crash;
pub(crate) mod read_write_exclusion;
pub(crate) mod read_write_reentrancy;
pub(crate) mod reentrancy;
pub(crate) mod semaphore_bound;
pub(crate) mod server_restart;
pub(crate) mod timed_wait;
pub(crate) mod try_lock_on_held_lock;
pub(crate) mod writer_not_starved;
