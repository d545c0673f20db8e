//! PostgreSQL and MariaDB, plaintext and TLS-only.

use super::*;

#[test]
fn postgres_answers_rejects_a_wrong_password_restarts_and_is_gone_with_its_backends() {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let port = server.port();
    let select_one = || {
        let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        let row = client.query_one("SELECT 1, current_database()", &[]).unwrap();
        assert_eq!(row.get::<_, i32>(0), 1);
        assert_eq!(row.get::<_, String>(1), PostgresServer::DATABASE);
        client
    };
    let client = select_one();

    let wrong = format!("postgres://{}:wrong@127.0.0.1:{port}/distlock", PostgresServer::USER);
    let error = postgres::Client::connect(&wrong, postgres::NoTls)
        .map(|_| ())
        .expect_err("a wrong password must be rejected");
    assert_eq!(error.code(), Some(&postgres::error::SqlState::INVALID_PASSWORD), "{error}");

    // The postmaster, its helpers and the backend serving `client`: all die with a kill9.
    let pids = server.process().pids();
    assert!(pids.len() > 2, "expected a postmaster with children, got {pids:?}");
    server.process().kill9().unwrap();
    assert_reaped(pids[0]);
    assert_gone(&pids, port);
    drop(client);
    server.process().restart().expect("restart PostgreSQL");
    let client = select_one();

    let pids = server.process().pids();
    drop(server);
    assert_reaped(pids[0]);
    assert_gone(&pids, port);
    drop(client);
}

#[test]
fn mariadb_answers_rejects_a_wrong_password_restarts_and_is_gone_after_drop() {
    let server = MariaDbServer::start().expect("start MariaDB");
    let port = server.port();
    let connect = |url: &str| mysql::Conn::new(mysql::Opts::from_url(url).expect("valid MySQL URL"));

    let mut connection = connect(&server.url()).unwrap();
    let one: Option<i32> = connection.query_first("SELECT 1").unwrap();
    assert_eq!(one, Some(1));
    let locked: Option<i32> = connection.query_first("SELECT GET_LOCK('harness', 0)").unwrap();
    assert_eq!(locked, Some(1));
    // The lock user may kill its own other connections, as lock tests do.
    let mut victim = connect(&server.url()).unwrap();
    connection.query_drop(format!("KILL {}", victim.connection_id())).expect("KILL of an own connection");
    assert!(victim.query_drop("SELECT 1").is_err(), "the killed connection still works");
    let mut root = connect(&server.root_url()).expect("root logs in over TCP");
    root.query_drop("SELECT 1").unwrap();

    let wrong = format!("mysql://{}:wrong@127.0.0.1:{port}/distlock", MariaDbServer::USER);
    match connect(&wrong) {
        Err(mysql::Error::MySqlError(error)) => assert_eq!(error.code, 1045, "{error}"),
        Err(other) => panic!("expected access denied, got {other}"),
        Ok(_) => panic!("a wrong password must be rejected"),
    }

    let pid = server.process().pid().expect("running");
    server.process().kill9().unwrap();
    assert_reaped(pid);
    assert_gone(&[pid], port);
    server.process().restart().expect("restart MariaDB");
    let one: Option<i32> = connect(&server.url()).unwrap().query_first("SELECT 1").unwrap();
    assert_eq!(one, Some(1));

    let pid = server.process().pid().expect("running");
    drop(server);
    assert_reaped(pid);
    assert_gone(&[pid], port);
}

/// A TLS-only PostgreSQL server: a login over TLS, verifying the test CA's certificate, works
/// (also after a restart: the readiness probe speaks TLS); a plaintext one is refused by
/// `pg_hba.conf`, and says so.
#[test]
fn postgres_tls_server_takes_tls_logins_only_and_restarts() {
    let server = PostgresServer::start_tls().expect("start a TLS-only PostgreSQL");
    assert!(server.is_tls());
    let ca = TestCa::shared().unwrap();
    let url = server.url();
    assert!(url.contains("sslmode=verify-full&sslrootcert="), "{url}");
    assert!(url.ends_with(&ca.ca_cert().display().to_string()), "{url}");
    let config = || {
        let mut config = postgres::Config::new();
        config
            .host(TestCa::SERVER_HOST)
            .port(server.port())
            .user(PostgresServer::USER)
            .password(PostgresServer::PASSWORD)
            .dbname(PostgresServer::DATABASE);
        config
    };
    let encrypted = || {
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(ca.rustls_client_config().unwrap());
        let mut client = config().ssl_mode(postgres::config::SslMode::Require).connect(tls).unwrap();
        let row = client.query_one("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]);
        let row = row.unwrap();
        assert!(row.get::<_, bool>(0), "the session is not encrypted");
        row.get::<_, String>(1)
    };
    println!("TLS version: {}", encrypted());

    let refused = config().connect(postgres::NoTls).map(|_| ()).expect_err("plaintext must be refused");
    println!("plaintext: {refused}");
    let database = refused.as_db_error().expect("the server's refusal");
    assert_eq!(database.code(), &postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
    assert!(database.message().ends_with("no encryption"), "{refused}");

    server.process().kill9().unwrap();
    server.process().restart().expect("restart the TLS-only PostgreSQL");
    encrypted();
}

/// A TLS-only MariaDB server: a login over TLS, verifying the test CA's certificate, works
/// (also after a restart); a plaintext one is refused (`require_secure_transport`).
#[test]
fn mariadb_tls_server_takes_tls_logins_only_and_restarts() {
    let server = MariaDbServer::start_tls().expect("start a TLS-only MariaDB");
    assert!(server.is_tls());
    let ca = TestCa::shared().unwrap();
    let url = server.url();
    assert!(url.contains("ssl-mode=VERIFY_IDENTITY&ssl-ca="), "{url}");
    let options = |ssl: Option<mysql::SslOpts>| {
        mysql::OptsBuilder::new()
            .ip_or_hostname(Some(TestCa::SERVER_HOST))
            .tcp_port(server.port())
            .user(Some(MariaDbServer::USER))
            .pass(Some(MariaDbServer::PASSWORD))
            .db_name(Some(MariaDbServer::DATABASE))
            .prefer_socket(false)
            .ssl_opts(ssl)
    };
    let encrypted = || {
        let ssl = mysql::SslOpts::default().with_root_cert_path(Some(ca.ca_cert()));
        let mut connection = mysql::Conn::new(options(Some(ssl))).expect("a login over TLS");
        let version: Option<(String, String)> =
            connection.query_first("SHOW SESSION STATUS LIKE 'Ssl_version'").unwrap();
        let version = version.expect("a status row").1;
        assert!(!version.is_empty(), "the session is not encrypted");
        version
    };
    println!("TLS version: {}", encrypted());

    match mysql::Conn::new(options(None)) {
        Err(mysql::Error::MySqlError(error)) => println!("plaintext: code {}: {error}", error.code),
        Err(other) => panic!("expected the server's refusal, got {other}"),
        Ok(_) => panic!("a plaintext login must be refused"),
    }

    server.process().kill9().unwrap();
    server.process().restart().expect("restart the TLS-only MariaDB");
    encrypted();
}
