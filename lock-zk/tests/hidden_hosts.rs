//! A URL whose host list may hold part of a password (an `@` after its hosts: `zk://u:pa/ss@h/x`
//! reads as host `u`, port `pa`) never shows those hosts: not in errors or `Debug` (the builder's
//! tests), and not in what the `zookeeper-client` crate logs about its connects — on the
//! caller's thread, and on the client's runtime thread after a lost connection. Its own
//! binary: the log subscriber is process-wide, since the client's session runs on threads of
//! its own.
#![cfg(unix)] // The log is read through a second handle of an unlinked file.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_testkit::harness::shared;
use lock_testkit::{eventually, FaultProxy};
use lock_zk::ZooKeeperLockBuilder;
use tracing_subscriber::util::SubscriberInitExt;

/// Every crate's events at every level, as one text. They go to a file that
/// tracing-subscriber writes itself, unlinked at once (it lives while the process has it open).
fn logged() -> String {
    static LOG: OnceLock<File> = OnceLock::new();
    let log = LOG.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("distlock-hidden-hosts-{}.log", std::process::id()));
        let options = std::fs::OpenOptions::new().read(true).write(true).create_new(true).clone();
        let file = options.open(&path).expect("a log file");
        std::fs::remove_file(&path).expect("the log file unlinked");
        let reader = file.try_clone().expect("a second handle");
        tracing_subscriber::fmt()
            .with_env_filter("trace")
            .with_ansi(false)
            .without_time()
            .with_writer(Mutex::new(file))
            .finish()
            .init();
        reader
    });
    let mut bytes =
        vec![0; usize::try_from(log.metadata().expect("the log's length").len()).expect("a length")];
    log.read_exact_at(&mut bytes, 0).expect("the log");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A loopback address where nothing listens: a connect there is refused at once.
fn refusing_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").to_string()
}

/// Connects to `url`, which must fail (nothing listens), and returns what was logged meanwhile.
fn connect_and_log(url: &str) -> String {
    let before = logged().len();
    let built = ZooKeeperLockBuilder::from_url(url)
        .expect("a valid URL")
        .connect_timeout(Duration::from_secs(2))
        .build();
    let error = built.map(drop).expect_err("nothing listens there");
    // The session's threads may log a moment after the connect failed.
    std::thread::sleep(Duration::from_millis(200));
    format!("error: {error}\nDebug: {error:?}\n{}", &logged()[before..])
}

#[test]
fn hosts_that_may_hold_a_password_are_never_logged() {
    // The control: an ordinary URL's hosts show in zookeeper-client's connect logs, so the
    // capture sees them.
    let shown = refusing_address();
    let logged = connect_and_log(&format!("zk://{shown}/locks"));
    assert!(logged.contains(&shown), "the capture sees zookeeper-client's connect logs:\n{logged}");
    // `127.0.0.1:<port>` here is user `127.0.0.1` with a password beginning with the port.
    let hidden = refusing_address();
    let logged = connect_and_log(&format!("zk://{hidden}/et99@127.0.0.1:1/locks"));
    assert!(!logged.contains(&hidden), "hosts that may hold a password were shown:\n{logged}");
}

/// A client connected through a proxy to the shared server (so a `zk://` URL of hosts
/// `proxy`), whose proxy is then cut: zookeeper-client's session, on the client's runtime
/// thread, loses its connection and tries again, logging the hosts. Returns what was logged
/// from the cut on (until `until` holds of it, or `wait` passed).
fn cut_and_log(url: &str, proxy: &FaultProxy, wait: Duration, until: impl Fn(&str) -> bool) -> String {
    let backend = ZooKeeperLockBuilder::from_url(url)
        .expect("a valid URL")
        .session_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("connected through the proxy");
    let before = logged().len();
    proxy.cut();
    eventually(wait, || until(&logged()[before..]));
    let logged = logged()[before..].to_owned();
    drop(backend);
    logged
}

/// A proxy to the shared ZooKeeper server.
fn proxy() -> FaultProxy {
    let server = shared::zookeeper().expect("the shared ZooKeeper server");
    let address: SocketAddr = server.address().parse().expect("a socket address");
    FaultProxy::start(address).expect("a proxy")
}

#[test]
fn a_lost_connection_of_hidden_hosts_is_never_logged() {
    // The control: after the cut, zookeeper-client's session (on the runtime's thread) logs the
    // ordinary URL's hosts as it tries again.
    let shown = proxy();
    let address = shown.address().to_string();
    let started = std::time::Instant::now();
    let logged = cut_and_log(&format!("zk://{address}/locks"), &shown, Duration::from_secs(20), |logged| {
        logged.contains(&address)
    });
    assert!(logged.contains(&address), "the capture sees the session's logs after the cut:\n{logged}");
    let took = started.elapsed();
    // The same with hosts that may hold a password, given twice as long to show.
    let hidden = proxy();
    let address = hidden.address().to_string();
    let logged = cut_and_log(&format!("zk://{address}/et99@127.0.0.1:1/locks"), &hidden, took * 2, |_| false);
    assert!(!logged.contains(&address), "hosts that may hold a password were shown:\n{logged}");
}
