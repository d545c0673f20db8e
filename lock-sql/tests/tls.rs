//! TLS on both databases, against the harness's TLS-only servers (`PostgresServer::start_tls`,
//! `MariaDbServer::start_tls`: certificates of the test binary's own CA, for 127.0.0.1 only;
//! plaintext TCP refused):
//!
//! - a lock over TLS works (acquire, hold, renew, release) on every kind, with the password and
//!   with the client certificate alone (and without the certificate that user is refused);
//! - a wrong CA is `Error::Tls`, within the connect timeout, naming the handshake once;
//! - plaintext to the TLS-only server is `Error::Tls` saying the server wants encryption on
//!   PostgreSQL, and on MariaDB (which answers it as a wrong password) `Error::Authentication`
//!   with a hint saying so;
//! - `verify-full` with the host name `localhost` (not in the certificate) is `Error::Tls`, while
//!   `verify-ca` with it works on PostgreSQL; MySQL/MariaDB refuse chain-only verification
//!   (`VERIFY_CA`, `REQUIRED` with `ssl-ca`) with `Error::InvalidConfig`, since the driver also
//!   trusts the public roots;
//! - `require` without a root certificate works (nothing checked);
//! - `prefer` uses TLS with the TLS server and plaintext with the plaintext one;
//! - the builder's `tls` takes precedence over the URL's mode;
//! - no password shows in errors or `Debug`, whatever the URL form.
//!
//! A server that cannot start fails the test.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::{DistributedLock, Error, OwnerToken, TlsMode, TlsOptions};
use lock_sql::mysql::{MySqlBackend, MySqlLockKind};
use lock_sql::postgres::{PostgresBackend, PostgresLockKind};
use lock_sql::testkit::{SqlKind, SqlTarget, TIMEOUT};
use lock_testkit::harness::{shared, PostgresServer, TestCa};
use lock_testkit::suite::{unique_name, SuiteTarget as _};

/// How much longer than the connect timeout a failed handshake may take to be reported.
const MARGIN: Duration = Duration::from_secs(1);

/// One database's TLS vocabulary and servers.
struct Database {
    /// The TLS-only server's URL without its query (the password user).
    tls_base: String,
    /// The plaintext shared server's URL.
    plain: String,
    /// The mode parameter's name and its values from `disable` to `verify-full`.
    mode: &'static str,
    modes: [&'static str; 5],
    /// The root certificate parameter's name.
    root: &'static str,
    /// Whether chain-only verification is offered (MySQL's driver trusts the public roots too,
    /// so `VERIFY_CA` is refused there).
    chain_only: bool,
    /// Whether the TLS-only server's refusal of a plaintext login is told apart from a wrong
    /// password (`Error::Tls`); MariaDB answers both with access denied.
    plaintext_is_tls: bool,
}

fn postgres() -> Database {
    let server = shared::postgres_tls().expect("the shared TLS-only PostgreSQL server");
    let plain = shared::postgres().expect("the shared PostgreSQL server");
    Database {
        tls_base: base(server.address()),
        plain: plain.address().to_owned(),
        mode: "sslmode",
        modes: ["disable", "prefer", "require", "verify-ca", "verify-full"],
        root: "sslrootcert",
        chain_only: true,
        plaintext_is_tls: true,
    }
}

fn mariadb() -> Database {
    let server = shared::mariadb_tls().expect("the shared TLS-only MariaDB server");
    let plain = shared::mariadb().expect("the shared MariaDB server");
    Database {
        tls_base: base(server.address()),
        plain: plain.address().to_owned(),
        mode: "ssl-mode",
        modes: ["DISABLED", "PREFERRED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"],
        root: "ssl-ca",
        chain_only: false,
        plaintext_is_tls: false,
    }
}

fn base(url: &str) -> String {
    url.split_once('?').map_or(url, |(base, _)| base).to_owned()
}

fn index(mode: TlsMode) -> usize {
    [TlsMode::Disable, TlsMode::Prefer, TlsMode::Require, TlsMode::VerifyCa, TlsMode::VerifyFull]
        .iter()
        .position(|m| *m == mode)
        .expect("a known mode")
}

impl Database {
    /// The TLS server's URL with `mode` and, if given, a root certificate.
    fn url(&self, mode: TlsMode, root: Option<&std::path::Path>) -> String {
        let mut url = format!("{}?{}={}", self.tls_base, self.mode, self.modes[index(mode)]);
        if let Some(root) = root {
            url.push_str(&format!("&{}={}", self.root, root.display()));
        }
        url
    }

    /// The same URL with the host name `localhost`, which the server certificate does not list.
    fn unlisted_host(url: &str) -> String {
        url.replacen(TestCa::SERVER_HOST, TestCa::UNLISTED_HOST, 1)
    }
}

fn ca() -> &'static TestCa {
    TestCa::shared().expect("the test CA")
}

/// Acquire, a second owner refused, renew, release, acquire again: a lock over this backend
/// works.
fn lock_works<B: DistributedLock>(backend: &B, label: &str) {
    let name = unique_name("tls");
    let ttl = Duration::from_secs(10);
    let mut lease = backend.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().expect("a free name");
    assert!(backend.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().is_none(), "{label}: held");
    thread::sleep(Duration::from_millis(50));
    assert!(backend.extend(&mut lease, ttl).unwrap(), "{label}: renewed");
    assert!(backend.release(lease).unwrap(), "{label}: released");
    let again = backend.try_acquire(&name, &OwnerToken::random(), ttl).unwrap().expect("free again");
    assert!(backend.release(again).unwrap());
}

/// `kind` at `url`: the lock works and its connections are encrypted (or not) as `encrypted`
/// says, which `tls_version` reads from the server.
fn works_at<K: SqlKind>(
    kind: K,
    url: &str,
    encrypted: bool,
    tls_version: fn(&K::Backend) -> lock_core::Result<Option<String>>,
) {
    // The test's own server: no lock predates it.
    let backend = SqlTarget::at(kind, url)
        .without_restart_delay()
        .backend()
        .unwrap_or_else(|error| panic!("{url}: {error}"));
    lock_works(&backend, kind.label());
    let version = tls_version(&backend).unwrap();
    assert_eq!(version.is_some(), encrypted, "{}: {url}: TLS version {version:?}", kind.label());
}

/// Building a client of `url` fails with [`Error::Tls`] within the connect timeout; returns the
/// error's text.
fn tls_error<K: SqlKind>(kind: K, url: &str) -> String {
    let started = Instant::now();
    let built = kind.build(url, TIMEOUT, 2, true);
    let took = started.elapsed();
    let error = built.err().unwrap_or_else(|| panic!("{url}: connected"));
    assert!(matches!(error, Error::Tls { .. }), "{url}: not a TLS error: {error:?}");
    assert!(!error.is_retryable());
    assert!(took < TIMEOUT + MARGIN, "{url}: reported after {took:?}");
    println!("[{}] {url}\n    -> {error} (after {took:?})", kind.label());
    // The error names its cause once ("error performing TLS handshake" once came three times).
    let text = error.to_string();
    assert_eq!(text.to_lowercase().matches("handshake").count(), 1, "{url}: {text}");
    text
}

/// Building a client of `url` fails with [`Error::InvalidConfig`] at once; returns its text.
fn invalid_config<K: SqlKind>(kind: K, url: &str) -> String {
    let error = kind.build(url, TIMEOUT, 2, true).err().unwrap_or_else(|| panic!("{url}: connected"));
    assert!(matches!(error, Error::InvalidConfig { .. }), "{url}: not InvalidConfig: {error:?}");
    println!("[{}] {url}\n    -> {error}", kind.label());
    error.to_string()
}

fn pg_version(backend: &PostgresBackend) -> lock_core::Result<Option<String>> {
    backend.tls_version()
}

fn my_version(backend: &MySqlBackend) -> lock_core::Result<Option<String>> {
    backend.tls_version()
}

const PG_KINDS: [PostgresLockKind; 3] =
    [PostgresLockKind::Table, PostgresLockKind::Row, PostgresLockKind::Advisory];
const MY_KINDS: [MySqlLockKind; 3] = [MySqlLockKind::Table, MySqlLockKind::Row, MySqlLockKind::Advisory];

#[test]
fn postgres_locks_work_over_tls_on_every_kind_with_a_password_or_a_client_certificate() {
    let db = postgres();
    let verified = db.url(TlsMode::VerifyFull, Some(&ca().ca_cert()));
    let server = shared::postgres_tls().unwrap().server().expect("the harness's own TLS server");
    let cert = server.cert_url().expect("a TLS server");
    for kind in PG_KINDS {
        works_at(kind, &verified, true, pg_version);
        works_at(kind, &cert, true, pg_version);
    }
    let without_cert = cert.split("&sslcert=").next().unwrap();
    let refused = PostgresLockKind::Table.build(without_cert, TIMEOUT, 2, true).expect_err("refused");
    println!("[pg] the certificate user without its certificate: {refused}");
    assert!(matches!(refused, Error::Authentication { .. }), "{refused:?}");
}

#[test]
fn mariadb_locks_work_over_tls_on_every_kind_with_a_password_or_a_client_certificate() {
    let db = mariadb();
    let verified = db.url(TlsMode::VerifyFull, Some(&ca().ca_cert()));
    let server = shared::mariadb_tls().unwrap().server().expect("the harness's own TLS server");
    let cert = server.cert_url().expect("a TLS server");
    for kind in MY_KINDS {
        works_at(kind, &verified, true, my_version);
        works_at(kind, &cert, true, my_version);
    }
    let without_cert = cert.split("&ssl-cert=").next().unwrap();
    let refused = MySqlLockKind::Table.build(without_cert, TIMEOUT, 2, true).expect_err("refused");
    println!("[mysql] the certificate user without its certificate: {refused}");
    assert!(matches!(refused, Error::Authentication { .. }), "{refused:?}");
}

/// (b) A wrong CA, (c) plaintext, (d) a host name the certificate does not list.
fn handshake_failures<K: SqlKind>(
    db: &Database,
    kind: K,
    tls_version: fn(&K::Backend) -> lock_core::Result<Option<String>>,
) {
    let ca = ca();
    for mode in [TlsMode::VerifyCa, TlsMode::VerifyFull, TlsMode::Require] {
        let url = db.url(mode, Some(&ca.other_ca_cert()));
        if mode == TlsMode::VerifyFull || db.chain_only {
            let text = tls_error(kind, &url);
            assert!(text.contains("UnknownIssuer"), "{text}");
        } else {
            let text = invalid_config(kind, &url);
            assert!(text.contains("VERIFY_IDENTITY"), "{text}");
        }
    }
    let plaintext = db.url(TlsMode::Disable, None);
    if db.plaintext_is_tls {
        let text = tls_error(kind, &plaintext);
        assert!(text.contains("accepts only encrypted (TLS) connections"), "{text}");
        assert!(text.contains(db.modes[index(TlsMode::Require)]), "{text}");
    } else {
        let started = Instant::now();
        let error = kind.build(&plaintext, TIMEOUT, 2, true).err().expect("plaintext refused");
        println!("[{}] {plaintext}\n    -> {error} (after {:?})", kind.label(), started.elapsed());
        assert!(matches!(error, Error::Authentication { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("requires secure transport"), "{text}");
        assert!(text.contains(db.modes[index(TlsMode::Require)]), "{text}");
    }

    let unlisted = Database::unlisted_host(&db.url(TlsMode::VerifyFull, Some(&ca.ca_cert())));
    let text = tls_error(kind, &unlisted);
    assert!(text.contains("not valid for name \"localhost\""), "{text}");
    let chain_only = Database::unlisted_host(&db.url(TlsMode::VerifyCa, Some(&ca.ca_cert())));
    if db.chain_only {
        works_at(kind, &chain_only, true, tls_version);
    } else {
        invalid_config(kind, &chain_only);
        invalid_config(kind, &Database::unlisted_host(&db.url(TlsMode::Require, Some(&ca.ca_cert()))));
    }
}

#[test]
fn postgres_wrong_ca_plaintext_and_wrong_host_are_tls_errors_in_time() {
    handshake_failures(&postgres(), PostgresLockKind::Advisory, pg_version);
}

#[test]
fn mariadb_wrong_ca_and_wrong_host_are_tls_errors_in_time_plaintext_a_hinted_denial() {
    handshake_failures(&mariadb(), MySqlLockKind::Advisory, my_version);
}

/// (e) `require` without roots checks nothing; (f) `prefer` takes TLS where offered.
fn unverified_modes<K: SqlKind>(
    db: &Database,
    kind: K,
    tls_version: fn(&K::Backend) -> lock_core::Result<Option<String>>,
) {
    works_at(kind, &db.url(TlsMode::Require, None), true, tls_version);
    works_at(kind, &Database::unlisted_host(&db.url(TlsMode::Require, None)), true, tls_version);
    works_at(kind, &db.url(TlsMode::Prefer, None), true, tls_version);
    // A root file does not make `prefer` check: the wrong CA still connects.
    works_at(kind, &db.url(TlsMode::Prefer, Some(&ca().other_ca_cert())), true, tls_version);
    let plain_preferred = format!("{}?{}={}", db.plain, db.mode, db.modes[index(TlsMode::Prefer)]);
    works_at(kind, &plain_preferred, false, tls_version);
    let plain_required = format!("{}?{}={}", db.plain, db.mode, db.modes[index(TlsMode::Require)]);
    let text = tls_error(kind, &plain_required);
    println!("    (a plaintext-only server asked for TLS)");
    assert!(
        text.contains("does not support TLS") || text.contains("does not have this capability"),
        "{text}"
    );
}

#[test]
fn postgres_require_checks_nothing_and_prefer_takes_tls_where_offered() {
    unverified_modes(&postgres(), PostgresLockKind::Table, pg_version);
}

#[test]
fn mariadb_require_checks_nothing_and_preferred_takes_tls_where_offered() {
    unverified_modes(&mariadb(), MySqlLockKind::Table, my_version);
}

#[test]
fn the_builder_s_tls_options_override_the_url_s_mode() {
    let ca = ca();
    let builder_tls = TlsOptions::new(TlsMode::VerifyFull).root_cert(ca.ca_cert());
    let pg = postgres();
    let backend = PostgresBackend::builder(pg.url(TlsMode::Disable, None))
        .tls(builder_tls.clone())
        .connect_timeout(TIMEOUT)
        .build()
        .expect("TLS from the builder");
    assert!(backend.tls_version().unwrap().is_some());
    let my = mariadb();
    let backend = MySqlBackend::builder(my.url(TlsMode::Disable, None))
        .tls(builder_tls)
        .connect_timeout(TIMEOUT)
        .build()
        .expect("TLS from the builder");
    assert!(backend.tls_version().unwrap().is_some());
    // The builder's mode with the URL's root certificate and the harness's client certificate.
    let server = shared::mariadb_tls().unwrap().server().expect("the harness's own TLS server");
    let cert_user = base(&server.cert_url().unwrap());
    let with_root = format!("{cert_user}?ssl-ca={}", ca.ca_cert().display());
    let backend = MySqlBackend::builder(with_root.clone())
        .tls(TlsOptions::new(TlsMode::VerifyFull).client_cert(ca.client_cert(), ca.client_key()))
        .connect_timeout(TIMEOUT)
        .build()
        .expect("the URL's root and the builder's client certificate");
    // Its own tables: no other test's may have been made on this server yet.
    backend.ensure_schema().expect("the lock tables");
    lock_works(&backend, "mysql builder client certificate");
    // The builder's chain-only mode is refused on MySQL as the URL's is.
    let chain_only = MySqlBackend::builder(with_root)
        .tls(TlsOptions::new(TlsMode::VerifyCa).client_cert(ca.client_cert(), ca.client_key()))
        .connect_timeout(TIMEOUT)
        .build();
    assert!(matches!(chain_only, Err(Error::InvalidConfig { .. })), "{chain_only:?}");
}

/// Whatever the URL form, a password shows neither in errors nor in `Debug`, TLS parameters or
/// not: unreadable files, a malformed string, a refused handshake.
#[test]
fn passwords_stay_out_of_errors_and_debug_output() {
    const SECRET: &str = "hunter2-Secret";
    let ca = ca();
    let other = ca.other_ca_cert();
    let pg = shared::postgres_tls().unwrap().address().to_owned();
    let pg_port = pg.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).unwrap().to_owned();
    let my = shared::mariadb_tls().unwrap().address().to_owned();
    let my_port = my.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).unwrap().to_owned();
    let postgres_urls = [
        format!("postgres://distlock:{SECRET}@127.0.0.1:{pg_port}/distlock?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
        format!("postgres://distlock:{SECRET}@127.0.0.1:{pg_port}/distlock?sslmode=verify-full&sslrootcert={}", other.display()),
        format!("postgres://127.0.0.1:{pg_port}/distlock?user=distlock&password={SECRET}&sslmode=verify-full&sslrootcert={}", other.display()),
        format!("host=127.0.0.1 port={pg_port} user=distlock password={SECRET} sslmode=verify-full sslrootcert='{}'", other.display()),
        format!("host=127.0.0.1 port={pg_port} password='{SECRET}' sslmode=verify-full sslrootcert=/nonexistent/ca.pem"),
        format!("host=127.0.0.1 password='{SECRET}' sslmode=verify-full sslcert='/unterminated"),
    ];
    for url in postgres_urls {
        let builder = PostgresBackend::builder(url.clone()).connect_timeout(TIMEOUT);
        let shown = format!("{builder:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        let error = builder.build().err().unwrap_or_else(|| panic!("{url}: connected"));
        let text = format!("{error} {error:?}");
        assert!(!text.contains(SECRET), "{text}");
    }
    let mysql_urls = [
        format!("mysql://distlock:{SECRET}@127.0.0.1:{my_port}/distlock?ssl-mode=VERIFY_IDENTITY&ssl-ca=/nonexistent/ca.pem"),
        format!("mysql://distlock:{SECRET}@127.0.0.1:{my_port}/distlock?ssl-mode=VERIFY_IDENTITY&ssl-ca={}", other.display()),
        format!("mysql://distlock:{SECRET}@127.0.0.1:{my_port}/distlock?ssl-mode=DISABLED"),
        format!("mysql://distlock:{SECRET}@127.0.0.1:{my_port}/distlock?ssl-mode=bogus"),
    ];
    for url in mysql_urls {
        let builder = MySqlBackend::builder(url.clone()).connect_timeout(TIMEOUT);
        let shown = format!("{builder:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        let error = builder.build().err().unwrap_or_else(|| panic!("{url}: connected"));
        let text = format!("{error} {error:?}");
        assert!(!text.contains(SECRET), "{text}");
    }
    // A working TLS client's `Debug` neither.
    let url = format!("{}?sslmode=verify-full&sslrootcert={}", base(&pg), ca.ca_cert().display());
    let backend = PostgresBackend::builder(url).build().expect("a TLS client");
    let shown = format!("{backend:?}");
    assert!(!shown.contains(&format!(":{}@", PostgresServer::PASSWORD)), "{shown}");
}
