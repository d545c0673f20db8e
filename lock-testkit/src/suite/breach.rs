//! The safety assertions the docs' broken recipes are written to break, by a stable phrase that
//! the scenario's failure message contains. A recipe counts as caught only when its scenario
//! fails with its breach: failing anything else (a timeout, an error on the happy path) shows
//! nothing about the recipe's flaw.

/// S04: a dead holder's lock never became free (or too late): no expiry, or no session end.
pub const HELD_AFTER_CRASH: &str = "stayed held after its holder was killed";

/// S05: a crash between acquisition steps left a lock that never expires.
pub const IMMORTAL_LOCK: &str = "an immortal lock";

/// S06: a holder whose lease ran out released the lock of the holder after it.
pub const RELEASED_ANOTHERS_LOCK: &str = "released the lock another holder held";

/// R02: a stale holder's write was accepted after a newer holder's.
pub const STALE_WRITE_ACCEPTED: &str = "stale write was accepted";

/// SEM01: more holders than permits were inside at once.
pub const OVER_ADMITTED: &str = "holders were inside at once";
