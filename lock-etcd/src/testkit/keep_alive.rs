//! E04 — 2,000 holds on one client cost what one hold costs: one lease, one keep-alive stream,
//! the same keep-alive requests a second. Counted by the client and by the server's own
//! metrics (`/metrics` on the client port).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::LockClient;
use lock_testkit::harness::EtcdServer;

use crate::EtcdBackend;

const HOLDS: usize = 2_000;
const THREADS: usize = 4;
const WINDOW: Duration = Duration::from_secs(8);

/// A counter of etcd's Prometheus text: the sum of `metric`'s samples whose labels contain
/// `label`.
fn metric(server: &EtcdServer, metric: &str, label: &str) -> f64 {
    let mut stream = TcpStream::connect(server.endpoint()).unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", server.endpoint()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.lines()
        .filter(|line| line.starts_with(metric) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Keep-alive requests sent by the client and received by the server, and keep-alive streams
/// the server started, during `WINDOW`.
fn traffic(server: &EtcdServer, backend: &EtcdBackend) -> (u64, f64, f64) {
    let method = "grpc_method=\"LeaseKeepAlive\"";
    let (sent, received, streams) = (
        backend.keep_alive_requests(),
        metric(server, "grpc_server_msg_received_total", method),
        metric(server, "grpc_server_started_total", method),
    );
    thread::sleep(WINDOW);
    (
        backend.keep_alive_requests() - sent,
        metric(server, "grpc_server_msg_received_total", method) - received,
        metric(server, "grpc_server_started_total", method) - streams,
    )
}

pub(super) fn two_thousand_holds_use_one_keep_alive_stream() {
    let server = EtcdServer::start().unwrap();
    let client = LockClient::new(
        EtcdBackend::builder(server.endpoint()).session_ttl(Duration::from_secs(3)).build().unwrap(),
    );
    let one = client.lock_named("e04-single").unwrap().lock().unwrap();
    let (one_sent, one_received, one_streams) = traffic(&server, client.backend());
    drop(one);

    let started = Instant::now();
    let held = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let holders: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (client, held, done) = (client.clone(), Arc::clone(&held), Arc::clone(&done));
            thread::spawn(move || {
                let guards: Vec<_> = (thread..HOLDS)
                    .step_by(THREADS)
                    .map(|index| client.lock_named(&format!("e04-{index}")).unwrap().lock().unwrap())
                    .collect();
                held.wait();
                done.wait();
                assert!(guards.iter().all(|guard| guard.is_held()), "every hold lasted");
            })
        })
        .collect();
    held.wait();
    let acquiring = started.elapsed();
    let (many_sent, many_received, many_streams) = traffic(&server, client.backend());
    done.wait();
    for holder in holders {
        holder.join().unwrap();
    }
    eprintln!(
        "E04: {HOLDS} holds acquired in {acquiring:?}; keep-alives in {WINDOW:?}: 1 hold: {one_sent} sent, \
         {one_received} received, {one_streams} new streams; {HOLDS} holds: {many_sent} sent, \
         {many_received} received, {many_streams} new streams"
    );
    assert_eq!((one_streams, many_streams), (0.0, 0.0), "the one stream stays open");
    assert_eq!(many_received as u64, many_sent, "the server saw this client's keep-alives only");
    // A keep-alive every third of the TTL, and one per renewal batch (about two per renewal
    // interval, whatever the number of holds).
    assert!(many_sent <= one_sent * 2 + 2, "{many_sent} keep-alives for {HOLDS} holds, {one_sent} for one");
    assert!((2..=20).contains(&many_sent), "{many_sent}");
}
