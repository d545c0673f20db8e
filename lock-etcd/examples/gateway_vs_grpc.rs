//! Why lock-etcd speaks gRPC: one put + delete pair on a fresh key, timed through etcd's JSON
//! gateway (HTTP/1.1 keep-alive, blocking `std::net`) and through this crate's client
//! (etcd-client over tonic on the backend's private runtime), alternated, on one server.
//!
//! `cargo run --release -p lock-etcd --features testkit --example gateway_vs_grpc [ENDPOINT]`
//! (without an endpoint it starts a harness etcd server of its own).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lock_etcd::EtcdBackend;
use lock_testkit::harness::EtcdServer;

const PAIRS: usize = 2_000;
const ROUNDS: usize = 3;

/// Standard base64 (the gateway's encoding of keys and values).
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(char::from(TABLE[(n >> (18 - 6 * i)) as usize & 63])),
                false => out.push('='),
            }
        }
    }
    out
}

/// One HTTP/1.1 connection to the gateway.
struct Gateway {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Gateway {
    fn connect(endpoint: &str) -> Self {
        let stream = TcpStream::connect(endpoint).expect("connect to the gateway");
        stream.set_nodelay(true).expect("nodelay");
        Self { reader: BufReader::new(stream), host: endpoint.to_owned() }
    }

    /// POSTs `body` to `path` and reads the whole reply (the gateway answers with a length).
    fn post(&mut self, path: &str, body: &str) {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).expect("send");
        let (mut line, mut length) = (String::new(), 0usize);
        self.reader.read_line(&mut line).expect("status line");
        assert!(line.contains(" 200 "), "{line}");
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            if line == "\r\n" {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().expect("length");
            }
        }
        let mut reply = vec![0; length];
        self.reader.read_exact(&mut reply).expect("body");
    }

    fn pair(&mut self, key: &str) -> Duration {
        let key = base64(key.as_bytes());
        let started = Instant::now();
        self.post("/v3/kv/put", &format!(r#"{{"key":"{key}","value":""}}"#));
        self.post("/v3/kv/deleterange", &format!(r#"{{"key":"{key}"}}"#));
        started.elapsed()
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let own;
    let endpoint = match std::env::args().nth(1) {
        Some(endpoint) => endpoint,
        None => {
            own = EtcdServer::start().expect("a harness etcd server");
            own.endpoint()
        }
    };
    let backend =
        EtcdBackend::builder(endpoint.as_str()).namespace("gateway-vs-grpc").build().expect("connect");
    let mut gateway = Gateway::connect(&endpoint);
    println!(
        "put + delete pairs on {endpoint}, {PAIRS} each, {ROUNDS} alternated rounds (median of each round):"
    );
    for round in 0..ROUNDS {
        let json: Vec<_> =
            (0..PAIRS).map(|i| gateway.pair(&format!("gateway-vs-grpc/json-{round}-{i}"))).collect();
        let grpc: Vec<_> = (0..PAIRS).map(|_| backend.write_round_trip().expect("grpc pair") * 2).collect();
        let (json, grpc) = (median(json), median(grpc));
        println!(
            "  round {}: JSON gateway {:>7.1} µs   gRPC (lock-etcd's client) {:>7.1} µs   ratio {:.2}",
            round + 1,
            json.as_secs_f64() * 1e6,
            grpc.as_secs_f64() * 1e6,
            json.as_secs_f64() / grpc.as_secs_f64()
        );
    }
}
