//! TLS to etcd's client port (`etcds://`): locks over a verified connection, and typed errors
//! for a server certificate signed by another CA or naming another host.
//!
//! The harness's etcd has no TLS option yet, so this file starts its own TLS-only etcd with the
//! harness's test CA.

#![cfg(feature = "tls")]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, LockClient};
use lock_etcd::EtcdBackend;
use lock_testkit::harness::{free_port, TestCa};

/// A TLS-only etcd on a free loopback port, stopped (and its dir removed) on drop.
struct TlsEtcd {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl TlsEtcd {
    fn start(ca: &TestCa) -> Self {
        let (port, peer) = (free_port().unwrap(), free_port().unwrap());
        let nanos = std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("lock-etcd-tls-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let client_url = format!("https://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "tls", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("tls={peer_url}"), "--unsafe-no-fsync"])
            .arg("--cert-file")
            .arg(ca.server_cert())
            .arg("--key-file")
            .arg(ca.server_key())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log")).unwrap())
            .spawn()
            .expect("etcd (Debian: etcd-server)");
        let server = TlsEtcd { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not listen on {port}");
            thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn url(&self, host: &str, cacert: PathBuf) -> String {
        format!("etcds://{host}:{}?cacert={}", self.port, cacert.display())
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn locks_work_over_verified_tls_and_bad_certificates_are_typed_errors() {
    let ca = TestCa::shared().unwrap();
    let server = TlsEtcd::start(ca);
    // The server may take a moment to elect itself after it listens.
    let deadline = Instant::now() + Duration::from_secs(20);
    let backend = loop {
        match EtcdBackend::from_url(&server.url(TestCa::SERVER_HOST, ca.ca_cert())) {
            Ok(backend) => break backend,
            Err(error) if Instant::now() < deadline => {
                eprintln!("waiting for the TLS etcd: {error}");
                thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("{error}"),
        }
    };
    let client = LockClient::new(backend);
    client.lock_named("tls").unwrap().lock().unwrap().unlock().unwrap();

    for (what, url) in [
        ("another CA", server.url(TestCa::SERVER_HOST, ca.other_ca_cert())),
        ("another host name", server.url(TestCa::UNLISTED_HOST, ca.ca_cert())),
    ] {
        let started = Instant::now();
        let error = lock_etcd::EtcdLockBuilder::from_url(&url)
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .unwrap_err();
        eprintln!("{what}: {error} after {:?}", started.elapsed());
        assert!(matches!(error, Error::Tls { .. }), "{what}: {error:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{what}: {:?}", started.elapsed());
    }
    let plaintext = EtcdBackend::builder(format!("127.0.0.1:{}", server.port))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_err();
    eprintln!("plaintext to a TLS port: {plaintext}");
    assert!(!matches!(plaintext, Error::InvalidConfig { .. }), "{plaintext:?}");
}
