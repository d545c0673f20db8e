//! Throwaway `redis-server`s: standalone, replica, or several independent nodes for Redlock.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use super::binaries::{self, REDIS_SERVER};
use super::command::CommandSpec;
use super::process::Readiness;
use super::{dirs, ports, HarnessError, ServerKind, ServerProcess, TestServer};

const KIND: ServerKind = ServerKind::Redis;

/// How long a Redis server may take to answer `PING` (and, for a replica, to sync).
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Connect and read timeout of each readiness probe, so a stuck server cannot stall it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How to start a [`RedisServer`]. Every option defaults to what
/// [`RedisServer::start`] uses.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    password: Option<String>,
    primary: Option<Primary>,
}

/// The server a replica copies.
#[derive(Debug, Clone)]
struct Primary {
    port: u16,
    password: Option<String>,
}

impl RedisOptions {
    /// The defaults: no password, not a replica.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires clients to authenticate with `password` (`requirepass`), so tests can check
    /// that a wrong one is rejected. [`RedisServer::url`] then carries it. Defaults to none.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }
}

/// A private `redis-server` on a free loopback port, without persistence (`--save ""`,
/// `--appendonly no`): a [`kill9`](ServerProcess::kill9) and restart loses every key.
#[derive(Debug)]
#[must_use = "the server stops when this is dropped"]
pub struct RedisServer {
    process: ServerProcess,
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server with default options.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; otherwise see
    /// [`RedisServer::start_with`].
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions::new())
    }

    /// Starts a server with `options`, waiting until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::MissingBinary`] without `redis-server`; [`HarnessError::Exited`] or
    /// [`HarnessError::NotReady`] (with the log's tail) if it does not come up;
    /// [`HarnessError::Io`] if the temp dir or process cannot be created.
    pub fn start_with(options: RedisOptions) -> Result<Self, HarnessError> {
        let binary = binaries::find(&REDIS_SERVER)?;
        ports::retry_on_port_in_use(|| Self::start_once(&binary, &options, ports::free_port()?))
    }

    /// Starts a replica of `primary` (`--replicaof`), with the primary's password if it has
    /// one, and waits until the replication link is up, so writes to the primary reach it.
    ///
    /// # Errors
    ///
    /// As for [`RedisServer::start_with`].
    pub fn start_replica_of(primary: &RedisServer) -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions {
            password: primary.password.clone(),
            primary: Some(Primary { port: primary.port(), password: primary.password.clone() }),
        })
    }

    /// Starts `count` independent servers, as Redlock needs.
    ///
    /// # Errors
    ///
    /// As for [`RedisServer::start`]; servers started before a failure are stopped.
    pub fn start_many(count: usize) -> Result<Vec<Self>, HarnessError> {
        (0..count).map(|_| Self::start()).collect()
    }

    fn start_once(binary: &Path, options: &RedisOptions, port: u16) -> Result<Self, HarnessError> {
        let dir = dirs::create(KIND)?;
        let mut command = CommandSpec::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir.path())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Redis 7 waits 5 s by default before a diskless full sync to a new replica.
            .args(["--repl-diskless-sync-delay", "0"])
            .current_dir(dir.path());
        if let Some(password) = &options.password {
            command = command.args(["--requirepass", password]);
        }
        if let Some(primary) = &options.primary {
            command = command.args(["--replicaof", "127.0.0.1", &primary.port.to_string()]);
            if let Some(password) = &primary.password {
                command = command.args(["--masterauth", password]);
            }
        }
        let probe_password = options.password.clone();
        let is_replica = options.primary.is_some();
        let readiness = Readiness {
            probe: Box::new(move || probe(port, probe_password.as_deref(), is_replica)),
            timeout: READY_TIMEOUT,
        };
        let process = ServerProcess::start(KIND, dir, port, command, readiness)?;
        Ok(RedisServer { process, password: options.password.clone() })
    }

    /// `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/` with a password.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{}@127.0.0.1:{}/", escape_userinfo(password), self.port()),
            None => format!("redis://127.0.0.1:{}/", self.port()),
        }
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The password clients must send, if the server was started with one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's process, for fault injection.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }
}

impl TestServer for RedisServer {
    const KIND: ServerKind = KIND;

    fn start() -> Result<Self, HarnessError> {
        RedisServer::start()
    }

    fn address(&self) -> String {
        self.url()
    }

    fn process(&self) -> &ServerProcess {
        RedisServer::process(self)
    }
}

/// Ready when `PING` answers `PONG` and, for a replica, the link to the primary is up.
fn probe(port: u16, password: Option<&str>, is_replica: bool) -> Result<(), String> {
    let mut connection = Connection::open(port)?;
    if let Some(password) = password {
        connection.call_expecting(&["AUTH", password], "+OK")?;
    }
    connection.call_expecting(&["PING"], "+PONG")?;
    if is_replica {
        let info = connection.call(&["INFO", "replication"])?;
        if !info.contains("master_link_status:up") {
            return Err("replica not yet linked to its primary".into());
        }
    }
    Ok(())
}

/// Just enough of the Redis protocol (RESP) to probe a server without a client library.
struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(port: u16) -> Result<Self, String> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
        Ok(Connection { reader: BufReader::new(stream) })
    }

    /// Sends `args` as one command; returns a simple or bulk reply's text, with `+` for simple.
    fn call(&mut self, args: &[&str]) -> Result<String, String> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.reader.get_mut().write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.reader.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        match line.as_bytes().first() {
            Some(b'$') => {
                let length: usize = line[1..].parse().map_err(|_| format!("bad bulk length {line:?}"))?;
                // The payload is followed by CRLF.
                let mut payload = vec![0; length + 2];
                self.reader.read_exact(&mut payload).map_err(|e| e.to_string())?;
                payload.truncate(length);
                String::from_utf8(payload).map_err(|e| e.to_string())
            }
            Some(b'+') => Ok(line.to_owned()),
            Some(_) => Err(format!("{} answered {line:?}", args[0])),
            None => Err(format!("connection closed after {}", args[0])),
        }
    }

    fn call_expecting(&mut self, args: &[&str], reply: &str) -> Result<(), String> {
        match self.call(args)? {
            answer if answer == reply => Ok(()),
            answer => Err(format!("{} answered {answer:?}", args[0])),
        }
    }
}

/// Percent-encodes everything but unreserved characters, for a password inside a URL.
fn escape_userinfo(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_taken_port_is_reported_as_port_in_use() {
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let binary = binaries::find(&REDIS_SERVER).unwrap();
        let error = RedisServer::start_once(&binary, &RedisOptions::new(), port).unwrap_err();
        assert!(error.is_port_in_use(), "{error:?}");
    }

    #[test]
    fn passwords_are_escaped_in_urls() {
        assert_eq!(escape_userinfo("plain-1.2_3~"), "plain-1.2_3~");
        assert_eq!(escape_userinfo("a@b:c/d%"), "a%40b%3Ac%2Fd%25");
    }
}
