//! TLS on real TLS-only harness servers (issue 21): a lock over TLS works (both layouts, with a
//! client certificate, with a password, over Redlock); a wrong CA, a certificate that does not
//! name the host, and a plaintext client at the TLS port are typed errors within the connect
//! timeout; `#insecure` and `sslmode=verify-ca` accept the unlisted host name; no password
//! shows in an error or a `Debug`.
//!
//! The shared server is `shared::redis_tls()` (or `$DISTLOCK_REDIS_TLS_URL`); the host-name
//! tests expect the harness's certificate, which names `127.0.0.1` only.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{Error, LockClient, LockOptions, TlsMode, TlsOptions};
use lock_redis::{RedisBackend, RedisLockBuilder, RedisLockKind, RedlockBackend};
use lock_testkit::harness::{shared, RedisOptions, RedisServer, TestCa};
use lock_testkit::suite::unique_name;

/// The connect timeout of every backend here (generous: CI machines are loaded, and a TLS
/// handshake in a debug build is slow), and how much later than it an error may come.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const SLACK: Duration = Duration::from_secs(1);

/// The lease of the locks held across renewals.
const LEASE: Duration = Duration::from_secs(2);

fn tls_url() -> String {
    shared::redis_tls().expect("shared TLS-only redis-server").address().to_owned()
}

fn ca() -> &'static TestCa {
    TestCa::shared().expect("the test CA")
}

/// `url` with its host `127.0.0.1` spelled `localhost`, a name the certificate does not list.
fn unlisted_host(url: &str) -> String {
    url.replacen(TestCa::SERVER_HOST, TestCa::UNLISTED_HOST, 1)
}

fn builder(url: &str) -> RedisLockBuilder {
    RedisBackend::builder(url).connect_timeout(CONNECT_TIMEOUT)
}

/// Builds, expecting a failure, and checks it came within the connect timeout.
fn build_error(what: &str, builder: RedisLockBuilder) -> Error {
    let started = Instant::now();
    let error = builder.build().map(drop).expect_err(what);
    let took = started.elapsed();
    assert!(took < CONNECT_TIMEOUT + SLACK, "{what}: the error took {took:?}: {error}");
    eprintln!("{what} ({took:?}): {error}");
    error
}

/// Acquires a lock with a 2 s lease, holds it across two and a half leases (renewed), checks
/// that a second client cannot take it meanwhile, releases it, and checks the second client
/// then can.
fn lock_renew_release(backend: RedisBackend, rival: RedisBackend) {
    let options = LockOptions::builder().lease(LEASE).build().unwrap();
    let client = LockClient::with_options(backend, options.clone());
    let rival = LockClient::with_options(rival, options);
    let name = unique_name("tls");
    let guard = client.lock_named(name.as_str()).unwrap().lock().unwrap();
    thread::sleep(LEASE * 5 / 2);
    assert!(guard.is_held(), "renewal over TLS kept the lease");
    assert!(
        rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().is_none(),
        "the renewed lock was taken"
    );
    guard.unlock().unwrap();
    let taken = rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().expect("free after the release");
    taken.unlock().unwrap();
}

#[test]
fn a_lock_over_tls_works_with_both_layouts() {
    let url = tls_url();
    for kind in [RedisLockKind::SetNx, RedisLockKind::ReentrantHash] {
        let backend = || builder(&url).kind(kind).build().expect("a backend over TLS");
        lock_renew_release(backend(), backend());
    }
}

#[test]
fn a_lock_over_tls_works_with_a_client_certificate_the_server_requires() {
    let server = RedisServer::start_with(RedisOptions::new().tls_requiring_client_certificates())
        .expect("a TLS-only redis-server requiring client certificates");
    let ca = ca();
    // Without a certificate the server refuses the handshake.
    build_error("no client certificate", builder(&server.url()));
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
    // The rustls error is the source's source, to match on.
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
    let address = url.split("://").nth(1).and_then(|rest| rest.split('/').next()).expect("host:port");
    let error = build_error("plaintext", builder(&format!("redis://{address}/")));
    assert!(matches!(error, Error::Connection { .. }), "{error:?}");
    assert!(error.to_string().contains("rediss://"), "the error does not hint at TLS: {error}");
}

#[test]
fn verify_full_refuses_an_unlisted_host_name_and_the_lesser_modes_accept_it() {
    let url = unlisted_host(&tls_url());
    let error = build_error("verify-full, wrong host name", builder(&url));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    assert!(error.to_string().contains("not valid for name"), "{error}");

    let (base, _) = url.split_once('?').unwrap();
    let verify_ca = format!("{url}&sslmode=verify-ca");
    let require = format!("{url}&sslmode=require"); // libpq: require with a root is verify-ca
    let insecure = format!("{base}#insecure");
    let chain_only = TlsOptions::new(TlsMode::VerifyCa).root_cert(ca().ca_cert());
    let accepting = [
        ("verify-ca", builder(&verify_ca)),
        ("require with cacert", builder(&require)),
        ("#insecure", builder(&insecure)),
        ("verify-ca (builder)", builder(&url).tls(chain_only.clone())),
    ];
    for (what, builder) in accepting {
        let backend = builder.build().unwrap_or_else(|e| panic!("{what}: {e}"));
        let client = LockClient::new(backend);
        let guard = client.lock_named(unique_name("tls-host").as_str()).unwrap().try_lock().unwrap();
        guard.expect("a free lock").unlock().unwrap();
    }
    // verify-ca still checks the chain.
    let wrong_chain = chain_only.root_cert(ca().other_ca_cert());
    let error = build_error("verify-ca, wrong CA", builder(&url).tls(wrong_chain));
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
}

#[test]
fn a_password_and_tls_together_and_no_password_in_errors_or_debug() {
    const PASSWORD: &str = "hunter2-over-tls";
    let server = RedisServer::start_with(RedisOptions::new().tls().password(PASSWORD))
        .expect("a TLS-only redis-server with a password");
    let url = server.url();
    assert!(url.contains(PASSWORD) && url.starts_with("rediss://"), "{url}");
    let backend = || builder(&url).kind(RedisLockKind::ReentrantHash).build().expect("TLS and AUTH");
    lock_renew_release(backend(), backend());
    let shown = format!("{:?} {:?}", builder(&url), backend());
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(shown.contains("VerifyFull"), "the Debug shows the TLS mode: {shown}");

    let wrong_password = url.replacen(PASSWORD, "wrong", 1);
    let error = build_error("TLS, wrong password", builder(&wrong_password));
    assert!(matches!(error, Error::Authentication { .. }), "{error:?}");

    let other = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca().other_ca_cert());
    let failing = [
        builder(&url).tls(other),
        builder(&unlisted_host(&url)),
        builder(&format!("{url}&sslmode=prefer")),
        builder(&format!("{url}&cert=only-a-cert.pem")),
        builder(&url.replacen("rediss://", "redis://", 1)),
    ];
    for builder in failing {
        let shown = format!("{builder:?}");
        assert!(!shown.contains(PASSWORD), "{shown}");
        let error = builder.build().map(drop).expect_err("fails");
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(PASSWORD), "{text}");
        }
    }
}

#[test]
fn redlock_over_tls_nodes() {
    let servers: Vec<RedisServer> =
        (0..3).map(|_| RedisServer::start_tls().expect("a TLS-only redis-server")).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    // A node timeout far above the default 50 ms: a loaded machine must not fail a renewal.
    let redlock = || {
        RedlockBackend::builder(&urls)
            .connect_timeout(CONNECT_TIMEOUT)
            .io_timeout(Duration::from_millis(500))
            .build()
            .expect("Redlock over TLS")
    };
    let options = LockOptions::builder().lease(LEASE).build().unwrap();
    let client = LockClient::with_options(redlock(), options.clone());
    let rival = LockClient::with_options(redlock(), options);
    let name = unique_name("tls-redlock");
    let guard = client.lock_named(name.as_str()).unwrap().lock().unwrap();
    thread::sleep(LEASE * 5 / 2);
    assert!(guard.is_held());
    assert!(rival.lock_named(name.as_str()).unwrap().try_lock().unwrap().is_none());
    guard.unlock().unwrap();

    let other = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca().other_ca_cert());
    let started = Instant::now();
    let error = RedlockBackend::builder(&urls).connect_timeout(CONNECT_TIMEOUT).tls(other).build().map(drop);
    let error = error.expect_err("no node trusts the other CA");
    assert!(matches!(error, Error::Tls { .. }), "{error:?}");
    assert!(started.elapsed() < CONNECT_TIMEOUT + SLACK, "{:?}", started.elapsed());
}
