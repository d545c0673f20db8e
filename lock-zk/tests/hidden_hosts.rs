//! A URL whose host list may hold part of a password (an `@` after its hosts: `zk://u:pa/ss@h/x`
//! reads as host `u`, port `pa`) never shows those hosts: not in errors or `Debug` (the builder's
//! tests), and not in what the `zookeeper-client` crate logs about its connects either. Its own
//! binary: the log subscriber is process-wide, since the client's session runs on threads of
//! its own.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_zk::ZooKeeperLockBuilder;
use tracing_subscriber::util::SubscriberInitExt;

/// The file where every crate's events at every level go (tracing-subscriber writes to a locked
/// file itself).
fn log_file() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("distlock-hidden-hosts-{}.log", std::process::id()));
        let file = std::fs::File::create(&path).expect("a log file");
        tracing_subscriber::fmt()
            .with_env_filter("trace")
            .with_ansi(false)
            .without_time()
            .with_writer(Mutex::new(file))
            .finish()
            .init();
        path
    })
}

fn logged() -> String {
    std::fs::read_to_string(log_file()).expect("the log file")
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
    std::fs::remove_file(log_file()).expect("the log file");
}
