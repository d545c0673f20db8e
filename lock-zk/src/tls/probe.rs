//! A failed plaintext connect, looked at again: a server that accepts TCP connections but closes
//! them before a session is what a TLS-only port (ZooKeeper's `secureClientPort`) does to a
//! plaintext client, and the error should say so.

use std::fmt;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

use lock_core::Error;

use crate::error::BACKEND;

/// The `host:port` pairs of a connect string (`host[:port][,…]`, with `tcp://`/`tcp+tls://`
/// prefixes and a chroot suffix allowed; 2181 by default).
pub(super) fn endpoints(connect_string: &str) -> Vec<(String, u16)> {
    connect_string
        .split(',')
        .map(|host| host.trim().trim_start_matches("tcp+tls://").trim_start_matches("tcp://"))
        .map(|host| host.split('/').next().unwrap_or_default())
        .filter(|host| !host.is_empty())
        .filter_map(|host| {
            let (name, port) = match host.rsplit_once(':') {
                Some((name, port)) if !name.ends_with(':') => (name, port.parse().ok()?),
                _ => (host, 2181),
            };
            Some((name.trim_start_matches('[').trim_end_matches(']').to_owned(), port))
        })
        .collect()
}

/// A TCP connection to `host:port`, within `timeout`.
pub(super) fn tcp(host: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let address: SocketAddr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
    let stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// A plaintext connect that found no server to establish a session with, although one accepts
/// TCP connections: it closed them before a session (what a TLS-only port does).
#[derive(Debug)]
struct ClosedBeforeSession {
    endpoint: String,
    source: zookeeper_client::Error,
}

impl fmt::Display for ClosedBeforeSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} accepts connections but closed them before a session was established (a TLS-only \
             port, ZooKeeper's secureClientPort, does that to plaintext clients: use zk+tls://)",
            self.endpoint
        )
    }
}

impl std::error::Error for ClosedBeforeSession {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// After a plaintext connect failed with `error` (no session, quickly: the servers refused or
/// closed the connections): [`Error::Connection`] that says a TLS-only port may be the cause, if
/// a server of `connect_string` accepts TCP connections, checked until `deadline`.
pub(crate) fn closed_before_session(
    connect_string: &str,
    error: &zookeeper_client::Error,
    deadline: Instant,
) -> Option<Error> {
    endpoints(connect_string).into_iter().find_map(|(host, port)| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        tcp(&host, port, left).ok()?;
        let source = ClosedBeforeSession { endpoint: format!("{host}:{port}"), source: error.clone() };
        Some(Error::Connection { backend: BACKEND, source: Box::new(source) })
    })
}
