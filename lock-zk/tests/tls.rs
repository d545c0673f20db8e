//! TLS on real TLS-only harness servers (issue 21): a lock over TLS works (with a client
//! certificate the server requires, with digest credentials); a wrong CA, a certificate that
//! does not name the host, a missing client certificate and a plaintext client at the TLS port
//! are typed errors within the connect timeout; `verify-ca` accepts the unlisted host name; no
//! password shows in an error or a `Debug`.
//!
//! The shared server is `shared::zookeeper_tls()` (or `$DISTLOCK_ZOOKEEPER_TLS_URL`); the
//! host-name tests expect the harness's certificate, which names `127.0.0.1` only.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, LockClient, LockOptions, TlsMode, TlsOptions};
use lock_testkit::harness::{shared, TestCa, ZooKeeperServer};
use lock_testkit::suite::unique_name;
use lock_zk::{ZooKeeperBackend, ZooKeeperLockBuilder};

/// The connect timeout of every backend here (generous: CI machines are loaded), and how much
/// later than it an error may come.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const SLACK: Duration = Duration::from_secs(1);

/// The lease of the locks held across liveness checks.
const LEASE: Duration = Duration::from_secs(2);

fn tls_url() -> String {
    shared::zookeeper_tls().expect("shared TLS-only ZooKeeper").address().to_owned()
}

fn ca() -> &'static TestCa {
    TestCa::shared().expect("the test CA")
}

/// `url` with its host `127.0.0.1` spelled `localhost`, a name the certificate does not list.
fn unlisted_host(url: &str) -> String {
    url.replacen(TestCa::SERVER_HOST, TestCa::UNLISTED_HOST, 1)
}

fn builder(url: &str) -> ZooKeeperLockBuilder {
    ZooKeeperLockBuilder::from_url(url)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .connect_timeout(CONNECT_TIMEOUT)
}

/// Builds, expecting a failure, and checks it came within the connect timeout.
fn build_error(what: &str, builder: ZooKeeperLockBuilder) -> Error {
    let started = Instant::now();
    let error = builder.build().map(drop).expect_err(what);
    let took = started.elapsed();
    assert!(took < CONNECT_TIMEOUT + SLACK, "{what}: the error took {took:?}: {error}");
    eprintln!("{what} ({took:?}): {error}");
    error
}

/// Acquires a lock with a 2 s lease, holds it across two and a half leases (checked alive over
/// TLS), checks that a second client cannot take it meanwhile, releases it, and checks the
/// second client then can.
fn lock_renew_release(backend: ZooKeeperBackend, rival: ZooKeeperBackend) {
    let options = LockOptions::builder().lease(LEASE).build().unwrap();
    let client = LockClient::with_options(backend, options.clone());
    let rival = LockClient::with_options(rival, options);
    let name = unique_name("tls");
    let guard = client.lock_named(name.as_str()).unwrap().lock().unwrap();
    thread::sleep(LEASE * 5 / 2);
    assert!(guard.is_held(), "liveness checks over TLS kept the hold");
    assert!(
        rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().is_none(),
        "the held lock was taken"
    );
    guard.unlock().unwrap();
    let taken = rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().expect("free after the release");
    taken.unlock().unwrap();
}

#[test]
fn a_lock_over_tls_works() {
    let url = tls_url();
    let backend = || builder(&url).build().expect("a backend over TLS");
    lock_renew_release(backend(), backend());
}

#[test]
fn a_lock_over_tls_works_with_a_client_certificate_the_server_requires() {
    let server = ZooKeeperServer::start_tls_requiring_client_certificates()
        .expect("a TLS-only ZooKeeper requiring client certificates");
    let ca = ca();
    let error = build_error("no client certificate", builder(&server.url()));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    let with_url =
        format!("{}&cert={}&key={}", server.url(), ca.client_cert().display(), ca.client_key().display());
    let with_builder = builder(&server.url()).tls(ca.client_options());
    lock_renew_release(builder(&with_url).build().unwrap(), with_builder.build().unwrap());
}

#[test]
fn a_wrong_ca_is_a_tls_error_within_the_connect_timeout() {
    let url = tls_url();
    let other = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca().other_ca_cert());
    let error = build_error("wrong CA (builder)", builder(&url).tls(other));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    assert!(!error.is_retryable());
    // rustls's error is the source's source, to match on.
    let rustls = std::error::Error::source(&error)
        .and_then(std::error::Error::source)
        .and_then(|cause| cause.downcast_ref::<rustls::Error>());
    assert!(
        matches!(rustls, Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer))),
        "{rustls:?}"
    );
    let (base, _) = url.split_once('?').expect("the shared URL names its CA");
    let wrong = format!("{base}?cacert={}", ca().other_ca_cert().display());
    let error = build_error("wrong CA (URL)", builder(&wrong));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
}

#[test]
fn plaintext_to_the_tls_port_fails_clearly_within_the_connect_timeout() {
    let url = tls_url();
    let hosts = url.trim_start_matches("zk+tls://").split('/').next().expect("hosts");
    let error = build_error("plaintext", builder(&format!("zk://{hosts}")));
    assert!(matches!(error, Error::Connection { .. }), "{error:?}");
    assert!(error.to_string().contains("zk+tls://"), "the error does not hint at TLS: {error}");
}

#[test]
fn verify_full_refuses_an_unlisted_host_name_and_verify_ca_accepts_it() {
    let url = unlisted_host(&tls_url());
    let error = build_error("verify-full, wrong host name", builder(&url));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    assert!(error.to_string().contains("not valid for name"), "{error}");

    let chain_only = TlsOptions::new(TlsMode::VerifyCa).root_cert(ca().ca_cert());
    for (what, builder) in [
        ("sslmode=verify-ca", builder(&format!("{url}&sslmode=verify-ca"))),
        ("sslmode=require, with cacert", builder(&format!("{url}&sslmode=require"))),
        ("verify-ca (builder)", builder(&url).tls(chain_only.clone())),
    ] {
        let backend = builder.build().unwrap_or_else(|e| panic!("{what}: {e}"));
        let client = LockClient::new(backend);
        let guard = client.lock_named(unique_name("tls-host").as_str()).unwrap().try_lock().unwrap();
        guard.expect("a free lock").unlock().unwrap();
    }
    // verify-ca still checks the chain.
    let error =
        build_error("verify-ca, wrong CA", builder(&url).tls(chain_only.root_cert(ca().other_ca_cert())));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
}

#[test]
fn settings_zookeeper_cannot_use_are_config_errors() {
    let url = tls_url();
    let (base, _) = url.split_once('?').unwrap();
    for (what, builder) in [
        ("no cacert", builder(base)),
        ("require without cacert", builder(base).tls(TlsOptions::new(TlsMode::Require))),
        ("prefer", builder(&format!("{url}&sslmode=prefer"))),
        ("unreadable cacert", builder(&format!("{base}?cacert=/nonexistent/ca.pem"))),
    ] {
        let error = build_error(what, builder);
        assert!(matches!(error, Error::InvalidConfig { .. }), "{what}: {error:?}");
    }
    for url in [format!("{url}&cert=only-a-cert.pem"), format!("{url}&timeout=1"), format!("{base}#x")] {
        assert!(matches!(ZooKeeperLockBuilder::from_url(&url), Err(Error::InvalidConfig { .. })), "{url}");
    }
}

#[test]
fn digest_credentials_over_tls_and_no_password_in_errors_or_debug() {
    const PASSWORD: &str = "hunter2-over-tls";
    let url = tls_url().replacen("zk+tls://", &format!("zk+tls://app:{PASSWORD}@"), 1);
    let url = url.replacen("/?", &format!("/{}?", unique_name("tls-digest")), 1);
    let backend = || builder(&url).build().expect("digest over TLS");
    lock_renew_release(backend(), backend());
    let shown = format!("{:?} {:?}", builder(&url), backend());
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("VerifyFull"), "the Debug shows the TLS mode: {shown}");

    let other = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca().other_ca_cert());
    for builder in [builder(&url).tls(other), builder(&unlisted_host(&url))] {
        let shown = format!("{builder:?}");
        assert!(!shown.contains(PASSWORD), "{shown}");
        let error = builder.build().map(drop).expect_err("fails");
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(PASSWORD), "{text}");
        }
    }
    for url in [format!("{url}&sslmode=prefer"), format!("{url}&cert=c.pem"), format!("{url}#x")] {
        let error = ZooKeeperLockBuilder::from_url(&url).and_then(ZooKeeperLockBuilder::build).map(drop);
        let text =
            format!("{:?} {}", error, error.as_ref().map_or_else(ToString::to_string, |()| String::new()));
        assert!(!text.contains(PASSWORD), "{text}");
    }
}
