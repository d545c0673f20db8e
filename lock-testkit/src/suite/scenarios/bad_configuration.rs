//! S13 — bad configuration: a zero or absurd lease is a typed error; an unreachable server (a
//! closed port, or one that accepts and never answers) is a connection error or timeout within
//! the client's timeouts (no hang); a wrong password is an authentication error.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, LockOptions, OwnerToken};

use crate::harness::free_port;
use crate::suite::outcome::ensure;
use crate::suite::support::unique_name;
use crate::suite::{Failure, ScenarioResult, SuiteTarget, Verdict};

/// Servers per unreachable set: enough for a multi-node backend's quorum.
const NODES: usize = 5;

pub(crate) fn run<T: SuiteTarget>(target: &T) -> ScenarioResult {
    let mut not_applicable = Vec::new();

    // Leases: rejected by the options builder, and by the backend itself when called directly.
    for lease in [Duration::ZERO, Duration::from_secs(365 * 24 * 3600)] {
        let built = LockOptions::builder().lease(lease).build();
        ensure!(
            matches!(built, Err(Error::InvalidConfig { .. })),
            "lease {lease:?} was accepted by the options"
        );
        let backend = target.backend()?;
        let direct = backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), lease);
        ensure!(
            matches!(direct, Err(Error::InvalidConfig { .. })),
            "the backend answered {:?} to an acquisition with lease {lease:?}",
            direct.map(|lease| lease.is_some())
        );
    }

    // A server that refuses connections (closed ports), and one that accepts them but never
    // answers (listeners nobody accepts from: the kernel completes the handshake, then silence).
    // The clock starts before the client is built: connecting may happen there.
    let silent: Vec<TcpListener> = (0..NODES)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure(format!("cannot open a silent listener: {e}")))?;
    let silent_addresses = silent.iter().map(TcpListener::local_addr).collect::<Result<Vec<_>, _>>();
    let silent_addresses = silent_addresses.map_err(|e| Failure(e.to_string()))?;
    let closed_addresses = (0..NODES)
        .map(|_| free_port().map(|port| SocketAddr::from(([127, 0, 0, 1], port))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure(format!("cannot find a free port: {e}")))?;
    for (server, addresses) in
        [("a closed port", closed_addresses), ("a server that never answers", silent_addresses)]
    {
        let started = Instant::now();
        let built = match target.backend_at(&addresses) {
            Err(reason) => {
                not_applicable.push(format!("unreachable servers: {}", reason.0));
                break;
            }
            Ok(built) => built,
        };
        let outcome = built.and_then(|backend| {
            backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), Duration::from_secs(10))
        });
        let took = started.elapsed();
        ensure!(
            matches!(outcome, Err(Error::Connection { .. } | Error::Timeout { .. })),
            "{server} gave {:?}, not a connection error or timeout",
            outcome.map(|lease| lease.is_some())
        );
        let bound = target.unreachable_report_bound();
        ensure!(took <= bound, "reporting {server} took {took:?} (bound {bound:?})");
    }
    drop(silent);

    match target.wrong_password_backend() {
        Err(reason) => not_applicable.push(format!("wrong password: {}", reason.0)),
        Ok(built) => {
            let outcome = built.and_then(|backend| {
                backend.try_acquire(&unique_name("s13"), &OwnerToken::random(), Duration::from_secs(10))
            });
            ensure!(
                matches!(outcome, Err(Error::Authentication { .. })),
                "a wrong password gave {:?}, not an authentication error",
                outcome.map(|lease| lease.is_some()).map_err(|e| Failure::from(e).0)
            );
        }
    }

    // The parts that apply passed; say which did not apply, and why.
    if !not_applicable.is_empty() {
        println!("[{}] S13 partly n/a: {}", target.label(), not_applicable.join("; "));
    }
    Ok(Verdict::Pass)
}
