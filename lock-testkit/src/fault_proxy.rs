//! [`FaultProxy`]: a TCP proxy on loopback that a test can cut, as a network partition would.
//!
//! Cut, it stops forwarding in both directions but keeps every connection open: a client's
//! writes are accepted by the kernel and go nowhere, nothing comes back, and the server hears
//! nothing either — the fault that no connection error reveals, which only timeouts and
//! server-side limits can end. New connections made while cut are accepted and stay silent.
//! Restored, held bytes flow again in order, like a healed partition.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// How long the accept loop sleeps between looks at a listener with no connection waiting.
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// A proxy in front of one server. Dropping it closes every connection through it.
pub struct FaultProxy {
    address: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: SocketAddr,
    /// `true` while cut.
    cut: Mutex<bool>,
    restored: Condvar,
    stopped: AtomicBool,
    /// Both ends of every connection, to shut them down when the proxy stops.
    streams: Mutex<Vec<TcpStream>>,
    connections: AtomicU64,
}

impl FaultProxy {
    /// A proxy on a free loopback port, forwarding to `upstream`.
    ///
    /// # Errors
    /// When no loopback port can be bound or the accept thread cannot start.
    pub fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            cut: Mutex::new(false),
            restored: Condvar::new(),
            stopped: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&shared);
        thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || accept_loop(&listener, &accepting))?;
        Ok(Self { address, shared })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The server behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Stops forwarding, both ways, on every connection (open and future ones).
    pub fn cut(&self) {
        *self.shared.cut.lock() = true;
    }

    /// Forwards again; bytes held while cut are delivered in order.
    pub fn restore(&self) {
        *self.shared.cut.lock() = false;
        self.shared.restored.notify_all();
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        *self.shared.cut.lock()
    }

    /// How many connections clients have opened through the proxy.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.restore();
        for stream in self.shared.streams.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// The proxies of one client, started one per server it connects to: [`route`](Self::route) is
/// the `route` that [`SuiteTarget::backend_routed`](crate::suite::SuiteTarget::backend_routed)
/// and the backends' URL helpers take.
#[derive(Debug, Default)]
pub struct FaultProxies {
    proxies: Vec<FaultProxy>,
    error: Option<io::Error>,
}

impl FaultProxies {
    /// Starts a proxy in front of `server` and returns its address; if none can start, the error
    /// is kept for [`check`](Self::check) and `server` itself is returned.
    pub fn route(&mut self, server: SocketAddr) -> SocketAddr {
        match FaultProxy::start(server) {
            Ok(proxy) => {
                let address = proxy.address();
                self.proxies.push(proxy);
                address
            }
            Err(error) => {
                self.error.get_or_insert(error);
                server
            }
        }
    }

    /// # Errors
    /// The first proxy that could not start, or an error if nothing was routed at all (a client
    /// that bypassed the proxies could never be cut).
    pub fn check(&self) -> io::Result<()> {
        match &self.error {
            Some(error) => Err(io::Error::new(error.kind(), format!("starting a fault proxy: {error}"))),
            None if self.proxies.is_empty() => {
                Err(io::Error::other("no connection was routed through the fault proxies"))
            }
            None => Ok(()),
        }
    }

    /// Cuts every proxy.
    pub fn cut(&self) {
        self.proxies.iter().for_each(FaultProxy::cut);
    }

    /// Restores every proxy.
    pub fn restore(&self) {
        self.proxies.iter().for_each(FaultProxy::restore);
    }
}

impl std::ops::Deref for FaultProxies {
    type Target = [FaultProxy];

    fn deref(&self) -> &[FaultProxy] {
        &self.proxies
    }
}

impl<'a> IntoIterator for &'a FaultProxies {
    type Item = &'a FaultProxy;
    type IntoIter = std::slice::Iter<'a, FaultProxy>;

    fn into_iter(self) -> Self::IntoIter {
        self.proxies.iter()
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("address", &self.address)
            .field("upstream", &self.shared.upstream)
            .field("cut", &self.is_cut())
            .finish()
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.connections.fetch_add(1, Ordering::Relaxed);
                if let Err(error) = connect(client, shared) {
                    tracing::debug!(%error, "fault proxy: a connection could not be set up");
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(error) => {
                tracing::debug!(%error, "fault proxy: accept failed");
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// Connects `client` to the upstream server (at once, even while cut: the client then sees a
/// connection that never answers) and starts a forwarding thread each way.
fn connect(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(shared.upstream)?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
    }
    {
        let mut streams = shared.streams.lock();
        streams.push(client.try_clone()?);
        streams.push(server.try_clone()?);
    }
    for (from, to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        let shared = Arc::clone(shared);
        thread::Builder::new().name("fault-proxy-io".into()).spawn(move || forward(from, to, &shared))?;
    }
    Ok(())
}

/// Copies `from` to `to`, holding each chunk — and the end of the stream — while the proxy is
/// cut: a client that closes its socket during a partition is not heard by the server either.
fn forward(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if !wait_while_cut(shared) || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    wait_while_cut(shared);
    let _ = to.shutdown(Shutdown::Write);
}

/// Blocks while the proxy is cut; `false` once it is stopped.
fn wait_while_cut(shared: &Shared) -> bool {
    let mut cut = shared.cut.lock();
    while *cut && !shared.stopped.load(Ordering::Acquire) {
        shared.restored.wait(&mut cut);
    }
    !shared.stopped.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let address = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let mut buffer = [0; 1024];
                    while let Ok(read) = stream.read(&mut buffer) {
                        if read == 0 || stream.write_all(&buffer[..read]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        address
    }

    fn round_trip(stream: &mut TcpStream, message: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(message)?;
        let mut reply = vec![0; message.len()];
        stream.read_exact(&mut reply)?;
        Ok(reply)
    }

    #[test]
    fn forwards_holds_while_cut_and_delivers_after_restore() {
        let proxy = FaultProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.address()).unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").unwrap(), b"ping");

        proxy.cut();
        stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let started = Instant::now();
        let error = round_trip(&mut stream, b"lost?").unwrap_err();
        assert!(matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{error}");
        assert!(started.elapsed() >= Duration::from_millis(190));

        // A connection opened while cut is accepted and silent.
        let mut late = TcpStream::connect(proxy.address()).unwrap();
        late.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        assert!(round_trip(&mut late, b"x").is_err());

        proxy.restore();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut held = [0; 5];
        stream.read_exact(&mut held).unwrap();
        assert_eq!(&held, b"lost?");
        assert_eq!(round_trip(&mut stream, b"again").unwrap(), b"again");
        assert_eq!(proxy.connections(), 2);
    }

    #[test]
    fn a_close_while_cut_reaches_the_server_only_after_restore() {
        let proxy = FaultProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.address()).unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").unwrap(), b"ping");
        proxy.cut();
        stream.shutdown(Shutdown::Write).unwrap();
        // Had the end of the stream reached the echo server, it would have closed its side and
        // the client would read the end of the stream now.
        stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut buffer = [0; 1];
        let error = stream.read(&mut buffer).unwrap_err();
        assert!(matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{error}");
        proxy.restore();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(stream.read(&mut buffer).unwrap(), 0, "the close is delivered once restored");
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections() {
        let proxy = FaultProxy::start(echo_server()).unwrap();
        let mut stream = TcpStream::connect(proxy.address()).unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").unwrap(), b"ping");
        drop(proxy);
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buffer = [0; 1];
        assert!(matches!(stream.read(&mut buffer), Ok(0) | Err(_)));
    }
}
