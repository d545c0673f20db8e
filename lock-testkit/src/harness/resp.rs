//! Just enough of the Redis protocol (RESP2) to probe and steer the harness's own servers
//! without a client library: the harness has no Redis client among its dependencies (only the
//! backends' tests do), and readiness probes, `CLUSTER …` and `SENTINEL …` requests need no more
//! than a blocking request and its reply.

use std::io::{self, BufRead as _, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::tls_client::{self, TlsStream};
use super::{HarnessError, ServerKind, TestCa};

/// Connect, read and write timeout of a probe's connection, so a stuck server cannot stall it.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Nesting deeper than this is not a reply the harness asked for.
const MAX_DEPTH: usize = 8;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+…`
    Simple(String),
    /// `-…`: the server refused the request.
    Error(String),
    /// `:…`
    Integer(i64),
    /// `$…`
    Bulk(Vec<u8>),
    /// `*…`
    Array(Vec<Reply>),
    /// `$-1` or `*-1`
    Nil,
}

impl Reply {
    /// The text of a simple or bulk reply; anything else (an error reply included) is an error.
    pub fn into_text(self) -> Result<String, String> {
        match self {
            Reply::Simple(text) => Ok(text),
            Reply::Bulk(bytes) => String::from_utf8(bytes).map_err(|_| "reply is not UTF-8".to_owned()),
            other => Err(other.unexpected("text")),
        }
    }

    /// The elements of an array reply; anything else is an error.
    pub fn into_array(self) -> Result<Vec<Reply>, String> {
        match self {
            Reply::Array(items) => Ok(items),
            other => Err(other.unexpected("an array")),
        }
    }

    /// `Ok` for `+OK` (or another simple reply in `accepted`), else the reply as an error.
    pub fn expect_simple(self, accepted: &[&str]) -> Result<(), String> {
        match self {
            Reply::Simple(text) if text == "OK" || accepted.contains(&text.as_str()) => Ok(()),
            other => Err(other.unexpected("+OK")),
        }
    }

    fn unexpected(&self, wanted: &str) -> String {
        match self {
            Reply::Error(message) => message.clone(),
            other => format!("expected {wanted}, got {other:?}"),
        }
    }
}

/// A connection to a server on 127.0.0.1.
pub(crate) struct Connection {
    reader: BufReader<Stream>,
}

impl Connection {
    /// Connects to `port`; `timeout` bounds the connect and every later read and write.
    pub fn open(port: u16, timeout: Duration) -> Result<Self, String> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let stream = TcpStream::connect_timeout(&address, timeout).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        Ok(Connection { reader: BufReader::new(Stream::Plain(stream)) })
    }

    /// Connects to the TLS-only server on `port`, trusting `ca` (see [`tls_client`]).
    pub fn open_tls(port: u16, timeout: Duration, ca: &TestCa) -> Result<Self, String> {
        let stream = tls_client::connect(port, timeout, ca)?;
        Ok(Connection { reader: BufReader::new(Stream::Tls(Box::new(stream))) })
    }

    /// Sends `args` as one command and reads its reply. `Err` only for I/O and protocol
    /// failures: an error reply is `Ok(Reply::Error(…))`.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, String> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            let arg = arg.as_ref();
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        let stream = self.reader.get_mut();
        // A TLS stream sends what it buffered on flush.
        stream.write_all(&request).and_then(|()| stream.flush()).map_err(|e| e.to_string())?;
        self.read_reply(0)
    }

    /// [`call`](Self::call), with an error reply turned into `Err`.
    pub fn request<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, String> {
        match self.call(args)? {
            Reply::Error(message) => Err(message),
            reply => Ok(reply),
        }
    }

    fn read_reply(&mut self, depth: usize) -> Result<Reply, String> {
        if depth > MAX_DEPTH {
            return Err("reply nested too deeply".into());
        }
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("connection closed".into());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        let (kind, rest) = line.split_at(line.len().min(1));
        let length = || rest.parse::<i64>().map_err(|_| format!("bad length in {line:?}"));
        match kind {
            "+" => Ok(Reply::Simple(rest.to_owned())),
            "-" => Ok(Reply::Error(rest.to_owned())),
            ":" => Ok(Reply::Integer(length()?)),
            "$" => match usize::try_from(length()?) {
                Err(_) => Ok(Reply::Nil),
                Ok(length) => {
                    // The payload is followed by CRLF.
                    let mut payload = vec![0; length + 2];
                    self.reader.read_exact(&mut payload).map_err(|e| e.to_string())?;
                    payload.truncate(length);
                    Ok(Reply::Bulk(payload))
                }
            },
            "*" => match usize::try_from(length()?) {
                Err(_) => Ok(Reply::Nil),
                Ok(count) => {
                    (0..count).map(|_| self.read_reply(depth + 1)).collect::<Result<_, _>>().map(Reply::Array)
                }
            },
            _ => Err(format!("not a RESP reply: {line:?}")),
        }
    }
}

/// A plain or TLS connection, read and written alike.
enum Stream {
    /// Plaintext TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.read(buffer),
            Stream::Tls(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.write(buffer),
            Stream::Tls(stream) => stream.write(buffer),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.flush(),
            Stream::Tls(stream) => stream.flush(),
        }
    }
}

/// Opens a connection to `port` (with [`PROBE_TIMEOUT`]), sends one command and returns its
/// reply, with an error reply as `Err`.
pub(crate) fn request<A: AsRef<[u8]>>(port: u16, args: &[A]) -> Result<Reply, String> {
    Connection::open(port, PROBE_TIMEOUT)?.request(args)
}

/// [`request`] for a harness operation on a Redis server: failures become
/// [`HarnessError::Request`] naming the server and the command.
pub(crate) fn command(port: u16, args: &[&str]) -> Result<Reply, HarnessError> {
    request(port, args).map_err(|reason| failed(port, args, reason))
}

/// A [`HarnessError::Request`] for `args` sent to the Redis server on `port`.
pub(crate) fn failed(port: u16, args: &[&str], reason: String) -> HarnessError {
    HarnessError::Request { kind: ServerKind::Redis, port, request: args.join(" "), reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// Answers one request on a fresh port with `reply` and returns the port and what was sent.
    fn serve_once(reply: &'static [u8]) -> (u16, thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = vec![0; 256];
            let read = stream.read(&mut request).unwrap();
            request.truncate(read);
            stream.write_all(reply).unwrap();
            request
        });
        (port, server)
    }

    #[test]
    fn parses_nested_replies_and_encodes_requests() {
        let (port, server) = serve_once(b"*4\r\n+OK\r\n:-7\r\n*2\r\n$5\r\nhello\r\n$-1\r\n*0\r\n");
        let reply = Connection::open(port, PROBE_TIMEOUT).unwrap().call(&["CLUSTER", "SLOTS"]).unwrap();
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Simple("OK".into()),
                Reply::Integer(-7),
                Reply::Array(vec![Reply::Bulk(b"hello".to_vec()), Reply::Nil]),
                Reply::Array(vec![]),
            ])
        );
        assert_eq!(server.join().unwrap(), b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n");
    }

    #[test]
    fn error_replies_are_errors_for_requests() {
        let (port, server) = serve_once(b"-MOVED 3999 127.0.0.1:6381\r\n");
        assert_eq!(request(port, &["GET", "x"]).unwrap_err(), "MOVED 3999 127.0.0.1:6381");
        server.join().unwrap();
    }
}
