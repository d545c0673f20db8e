//! A URL whose host list may hold part of a password (an `@` after its hosts: `zk://u:pa/ss@h/x`
//! reads as host `u`, port `pa`) never shows those hosts: not in errors or `Debug` (the builder's
//! tests), and not in what the `zookeeper-client` crate logs about its connects either. Its own
//! binary: the log subscriber is process-wide, since the client's session runs on threads of
//! its own.

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_zk::ZooKeeperLockBuilder;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Everything the subscriber writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Every crate's events at every level, as one text.
fn logs() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        tracing_subscriber::fmt()
            .with_env_filter("trace")
            .with_ansi(false)
            .without_time()
            .with_writer(captured.clone())
            .finish()
            .init();
        captured
    })
}

/// A loopback address where nothing listens: a connect there is refused at once.
fn refusing_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").to_string()
}

/// Connects to `url`, which must fail (nothing listens), and returns what was logged meanwhile.
fn connect_and_log(url: &str) -> String {
    let captured = logs();
    let before = captured.0.lock().unwrap().len();
    let built = ZooKeeperLockBuilder::from_url(url)
        .expect("a valid URL")
        .connect_timeout(Duration::from_secs(2))
        .build();
    let error = built.map(drop).expect_err("nothing listens there");
    // The session's threads may log a moment after the connect failed.
    std::thread::sleep(Duration::from_millis(200));
    let logged = String::from_utf8_lossy(&captured.0.lock().unwrap()[before..]).into_owned();
    format!("error: {error}\nDebug: {error:?}\n{logged}")
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
