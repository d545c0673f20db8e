//! Durations as the server counts them: whole milliseconds.

/// A duration in whole milliseconds, as the server counts them (`PX`, `PEXPIRE`, `WAIT`).
///
/// A fractional millisecond is cut (rounded down). For a lease that would be the *unsafe*
/// direction — the server would keep the lock for less than the holder believes — which is why
/// leases never get here with a fraction: [`lock_core::check_lease`] rejects them (callers check
/// every lease first). For other durations (the `WAIT` timeout, the queue entry lifetime) the cut
/// is harmless. Durations beyond `u64::MAX` ms saturate.
pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn millis_rounds_down() {
        assert_eq!(super::millis(Duration::from_micros(1_999)), 1);
        assert_eq!(super::millis(Duration::from_secs(2)), 2_000);
        assert_eq!(super::millis(Duration::MAX), u64::MAX);
    }
}
