//! Free loopback ports, and retrying a start that lost its port.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};

use parking_lot::Mutex;

use super::HarnessError;

/// The ports of the machine's own services; a test server must never take one of them.
const STANDARD_PORTS: [u16; 6] = [2181, 2888, 3306, 3888, 5432, 6379];

/// How many times a start is tried with fresh ports before giving up.
const START_ATTEMPTS: usize = 3;

/// Ports already handed out by this process. The kernel may give the same free port to two
/// back-to-back `bind(0)` calls once the first listener is closed; remembering them keeps two
/// servers of one test run from ever being offered the same port.
static ISSUED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback TCP port nothing listens on right now, never handed out before by this process.
///
/// Besides starting servers, this gives tests an address that refuses connections. Another
/// process may still take the port before it is used; server starts retry on that.
///
/// # Errors
///
/// [`HarnessError::Io`] if no socket can be bound on 127.0.0.1.
pub fn free_port() -> Result<u16, HarnessError> {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|source| HarnessError::io("binding 127.0.0.1:0 to find a free port", source))?;
        let port = listener
            .local_addr()
            .map_err(|source| HarnessError::io("reading a bound socket's address", source))?
            .port();
        // The listener closes here; the port stays free until the server binds it.
        drop(listener);
        if STANDARD_PORTS.contains(&port) {
            continue;
        }
        if ISSUED.lock().insert(port) {
            return Ok(port);
        }
    }
}

/// `N` distinct free ports (see [`free_port`]).
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], HarnessError> {
    let mut ports = [0; N];
    for port in &mut ports {
        *port = free_port()?;
    }
    Ok(ports)
}

/// Runs `start` until it succeeds, fails for another reason than a taken port, or has been
/// tried [`START_ATTEMPTS`] times. `start` must pick new ports on every call.
pub(crate) fn retry_on_port_in_use<T>(
    mut start: impl FnMut() -> Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(error) if error.is_port_in_use() && attempt < START_ATTEMPTS => {
                tracing::warn!(%error, attempt, "port taken while starting a server; retrying");
                attempt += 1;
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::ServerKind;
    use std::collections::HashSet;
    use std::path::PathBuf;

    #[test]
    fn free_ports_are_distinct_unbound_and_not_standard() {
        let ports = free_ports::<16>().unwrap();
        let unique: HashSet<_> = ports.iter().collect();
        assert_eq!(unique.len(), ports.len());
        for port in ports {
            assert!(!STANDARD_PORTS.contains(&port));
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("port should be free");
        }
    }

    #[test]
    fn retries_only_port_clashes_and_only_a_few_times() {
        let clash = || HarnessError::PortInUse {
            kind: ServerKind::Redis,
            port: 1,
            log: PathBuf::new(),
            tail: String::new(),
        };
        let mut calls = 0;
        let result: Result<(), _> = retry_on_port_in_use(|| {
            calls += 1;
            Err(clash())
        });
        assert!(result.unwrap_err().is_port_in_use());
        assert_eq!(calls, START_ATTEMPTS);

        let mut calls = 0;
        let result = retry_on_port_in_use(|| {
            calls += 1;
            if calls == 1 {
                Err(clash())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(result.unwrap(), 2);
    }
}
