//! What a Redis URL points at: one server, a Sentinel-managed primary, or a Redis Cluster.
//!
//! | URL | deployment |
//! | --- | --- |
//! | `redis://[[user]:password@]host[:port][/db]`, `rediss://…` | one server |
//! | `redis+sentinel://[[user]:password@]s1[:port],s2[:port],…/<master-name>[/db]` | the primary that Sentinel names |
//! | `redis+cluster://[[user]:password@]n1[:port],n2[:port],…[/]` | a Redis Cluster, seeded by these nodes |
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to the data nodes (and the sentinels);
//! TLS parameters (`?cacert=…&cert=…&key=…&sslmode=…`, `#insecure`) are `crate::tls`'s, and
//! apply to every server the URL leads to.
//! The credentials are the data nodes'; sentinels that require their own take
//! `?sentinel_username=…&sentinel_password=…`. The list syntax is Lettuce's
//! (`redis-sentinel://h1,h2#master`) with the master name in the path, as the issue tracker's
//! `redis+sentinel://` spelling and Celery/Kombu's `sentinel://` style do; default ports are
//! 26379 for sentinels and 6379 for data nodes. redis-rs itself has no URL for either.

use std::fmt;
use std::sync::Arc;

use lock_core::TlsOptions;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo as _};

use crate::tls::{self, TlsConfig};

/// Rewrites the address of every server a backend connects to
/// ([`RedisLockBuilder::map_addresses`](crate::RedisLockBuilder::map_addresses)).
pub(crate) type AddressMap = Arc<dyn Fn(&str, u16) -> (String, u16) + Send + Sync>;

/// Sentinel's default port.
const SENTINEL_PORT: u16 = 26379;

/// A Redis data node's default port.
const REDIS_PORT: u16 = 6379;

/// A parsed Redis URL.
#[derive(Clone)]
pub(crate) enum Target {
    /// One server.
    Single(Client),
    /// The primary of `master`, as the sentinels say.
    Sentinel { sentinels: Vec<Client>, master: String, nodes: NodeTemplate },
    /// A cluster, found through these seed nodes.
    Cluster { seeds: Vec<ConnectionInfo>, nodes: NodeTemplate },
}

/// How to reach a data node whose address a sentinel or the cluster names: the URL's
/// credentials, database and TLS settings, with the address replaced.
#[derive(Clone)]
pub(crate) struct NodeTemplate {
    info: ConnectionInfo,
    map: Option<AddressMap>,
}

impl fmt::Debug for NodeTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTemplate").field("address", &self.info.addr().to_string()).finish_non_exhaustive()
    }
}

impl NodeTemplate {
    fn new(info: ConnectionInfo) -> Self {
        Self { info, map: None }
    }

    /// The connection info of the data node at `host:port` (as the deployment names it; the
    /// address map applied).
    pub(crate) fn at(&self, host: &str, port: u16) -> ConnectionInfo {
        let (host, port) = match &self.map {
            Some(map) => map(host, port),
            None => (host.to_owned(), port),
        };
        with_addr(&self.info, &host, port)
    }
}

/// `info` pointing at `host:port` instead, TLS settings kept.
fn with_addr(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    {
        let addr = match info.addr() {
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        info.clone().set_addr(addr)
    }
}

impl NodeTemplate {
    /// Whether connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.info.addr(), ConnectionAddr::TcpTls { .. })
    }
}

impl Target {
    /// Parses `url`, with TLS as `tls` says or else as the URL says (its scheme and TLS
    /// parameters), and reads the certificate files.
    ///
    /// # Errors
    /// A description of what is wrong (never the password).
    pub(crate) fn parse(url: &str, tls: Option<&TlsOptions>) -> Result<Self, String> {
        let (url, url_tls) = tls::split_url(url)?;
        let target = Self::parse_without_tls(&url)?;
        match tls.or(url_tls.as_ref()) {
            Some(options) => target.with_tls(&TlsConfig::load(options)?),
            None => Ok(target),
        }
    }

    /// Where `url` points, without credentials, for `Debug` (no certificate file is read).
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub(crate) fn address_of(url: &str) -> Result<String, String> {
        let (url, _) = tls::split_url(url)?;
        Ok(Self::parse_without_tls(&url)?.display())
    }

    /// Parses a URL whose TLS parameters were taken out.
    fn parse_without_tls(url: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Target::Single(open_single(url)?));
        };
        let (tls, deployment) = match scheme.to_ascii_lowercase().as_str() {
            "redis+sentinel" => (false, Deployment::Sentinel),
            "rediss+sentinel" => (true, Deployment::Sentinel),
            "redis+cluster" => (false, Deployment::Cluster),
            "rediss+cluster" => (true, Deployment::Cluster),
            _ => return Ok(Target::Single(open_single(url)?)),
        };
        let parts = Parts::split(rest)?;
        let node_scheme = if tls { "rediss" } else { "redis" };
        // redis-rs parses (and percent-decodes) the credentials and options of one node's URL.
        let node_url = |host: &str, db: &str| {
            format!("{node_scheme}://{}{host}/{db}{}", parts.userinfo_at(), parts.fragment)
        };
        match deployment {
            Deployment::Sentinel => {
                let mut path = parts.path.split('/').filter(|segment| !segment.is_empty());
                let master = path
                    .next()
                    .ok_or("a redis+sentinel:// URL names the master after the hosts: …/<master-name>")?;
                let master = percent_encoding::percent_decode_str(master)
                    .decode_utf8()
                    .map_err(|_| "the master name is not UTF-8")?
                    .into_owned();
                let db = path.next().unwrap_or("0");
                if path.next().is_some() {
                    return Err("a redis+sentinel:// path is /<master-name>[/<db>]".into());
                }
                let first = with_port(parts.hosts[0], REDIS_PORT);
                let nodes = NodeTemplate::new(info(&node_url(&first, db))?);
                let sentinel_auth = parts.sentinel_userinfo()?;
                let sentinels = parts
                    .hosts
                    .iter()
                    .map(|host| {
                        let host = with_port(host, SENTINEL_PORT);
                        open_single(&format!("{node_scheme}://{sentinel_auth}{host}/{}", parts.fragment))
                    })
                    .collect::<Result<_, _>>()?;
                Ok(Target::Sentinel { sentinels, master, nodes })
            }
            Deployment::Cluster => {
                if !parts.query.is_empty() {
                    return Err("a redis+cluster:// URL takes no options after `?`".into());
                }
                if !parts.path.trim_matches('/').is_empty() {
                    return Err(
                        "a Redis Cluster has only database 0: write redis+cluster://host:port,…/".into()
                    );
                }
                let seeds: Vec<ConnectionInfo> = parts
                    .hosts
                    .iter()
                    .map(|host| info(&node_url(&with_port(host, REDIS_PORT), "0")))
                    .collect::<Result<_, _>>()?;
                let nodes = NodeTemplate::new(seeds[0].clone());
                Ok(Target::Cluster { seeds, nodes })
            }
        }
    }

    /// The same target with `tls` on every server it connects to: the URL's, and the ones the
    /// sentinels or the cluster announce.
    fn with_tls(self, tls: &TlsConfig) -> Result<Self, String> {
        let client = |client: &Client| {
            Client::open(tls.apply(client.get_connection_info())?).map_err(|e| e.to_string())
        };
        Ok(match self {
            Target::Single(single) => Target::Single(client(&single)?),
            Target::Sentinel { sentinels, master, nodes } => Target::Sentinel {
                sentinels: sentinels.iter().map(client).collect::<Result<_, _>>()?,
                master,
                nodes: NodeTemplate { info: tls.apply(&nodes.info)?, map: nodes.map },
            },
            Target::Cluster { seeds, nodes } => Target::Cluster {
                seeds: seeds.iter().map(|seed| tls.apply(seed)).collect::<Result<_, _>>()?,
                nodes: NodeTemplate { info: tls.apply(&nodes.info)?, map: nodes.map },
            },
        })
    }

    /// The same target with `map` applied to every address it connects to: the URL's, and the
    /// ones the sentinels or the cluster announce.
    pub(crate) fn with_address_map(self, map: AddressMap) -> Self {
        let remap = |info: &ConnectionInfo| match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                let (host, port) = map(host, *port);
                with_addr(info, &host, port)
            }
            _ => info.clone(),
        };
        match self {
            Target::Single(client) => Target::Single(
                Client::open(remap(client.get_connection_info())).expect("a ConnectionInfo opens"),
            ),
            Target::Sentinel { sentinels, master, nodes } => Target::Sentinel {
                sentinels: sentinels
                    .iter()
                    .map(|client| {
                        Client::open(remap(client.get_connection_info())).expect("a ConnectionInfo opens")
                    })
                    .collect(),
                master,
                nodes: NodeTemplate { info: nodes.info, map: Some(Arc::clone(&map)) },
            },
            Target::Cluster { seeds, nodes } => Target::Cluster {
                seeds: seeds.iter().map(remap).collect(),
                nodes: NodeTemplate { info: nodes.info, map: Some(Arc::clone(&map)) },
            },
        }
    }

    /// Where the URL points, without credentials (for `Debug` and messages).
    pub(crate) fn display(&self) -> String {
        match self {
            Target::Single(client) => client.get_connection_info().addr().to_string(),
            Target::Sentinel { sentinels, master, .. } => {
                let hosts: Vec<String> =
                    sentinels.iter().map(|client| client.get_connection_info().addr().to_string()).collect();
                format!("sentinel {} / {master}", hosts.join(","))
            }
            Target::Cluster { seeds, .. } => {
                let hosts: Vec<String> = seeds.iter().map(|seed| seed.addr().to_string()).collect();
                format!("cluster {}", hosts.join(","))
            }
        }
    }

    /// Whether connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Target::Single(client) => {
                matches!(client.get_connection_info().addr(), ConnectionAddr::TcpTls { .. })
            }
            Target::Sentinel { nodes, .. } | Target::Cluster { nodes, .. } => nodes.is_tls(),
        }
    }
}

enum Deployment {
    Sentinel,
    Cluster,
}

/// The pieces of `[userinfo@]host,host,…[/path][?query][#fragment]`.
struct Parts<'a> {
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    path: &'a str,
    query: &'a str,
    /// `#…` as written (redis-rs reads `#insecure` there), or empty.
    fragment: &'a str,
}

impl<'a> Parts<'a> {
    fn split(rest: &'a str) -> Result<Self, String> {
        let (rest, fragment) = match rest.find('#') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        // The authority ends at the first `/` or `?` (a password holds them percent-encoded, as
        // redis-rs requires); in it, the credentials end at the last `@` (a raw `@` in a password
        // stays in the password).
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, rest) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).filter(|host| !host.is_empty()).collect();
        if hosts.is_empty() {
            return Err("the URL names no host: write host:port[,host:port…]".into());
        }
        Ok(Parts { userinfo, hosts, path, query, fragment })
    }

    fn userinfo_at(&self) -> String {
        self.userinfo.map(|userinfo| format!("{userinfo}@")).unwrap_or_default()
    }

    /// `user:password@` for the sentinels, from `?sentinel_username=…&sentinel_password=…`.
    fn sentinel_userinfo(&self) -> Result<String, String> {
        let mut username = "";
        let mut password = None;
        for pair in self.query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_username", value)) => username = value,
                Some(("sentinel_password", value)) => password = Some(value),
                _ => {
                    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                    return Err(format!(
                        "unknown option {key:?} in a redis+sentinel:// URL (sentinel_username, sentinel_password)"
                    ));
                }
            }
        }
        Ok(match password {
            Some(password) => format!("{username}:{password}@"),
            None if !username.is_empty() => format!("{username}@"),
            None => String::new(),
        })
    }
}

/// `host` with `port` added when it has none (`[::1]` and `[::1]:7000` both work).
fn with_port(host: &str, port: u16) -> String {
    let has_port = match host.rfind(']') {
        Some(bracket) => host[bracket..].contains(':'),
        None => host.contains(':'),
    };
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    }
}

fn open_single(url: &str) -> Result<Client, String> {
    Client::open(url).map_err(|error| format!("invalid Redis URL: {error}"))
}

fn info(url: &str) -> Result<ConnectionInfo, String> {
    url.into_connection_info().map_err(|error| format!("invalid Redis URL: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Target {
        Target::parse(url, None).unwrap_or_else(|error| panic!("{url}: {error}"))
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let Target::Sentinel { sentinels, master, nodes } =
            parse("redis+sentinel://:p%40w@s1,s2:5000/mymaster/2")
        else {
            panic!("not sentinel")
        };
        assert_eq!(master, "mymaster");
        let ports: Vec<String> =
            sentinels.iter().map(|client| client.get_connection_info().addr().to_string()).collect();
        assert_eq!(ports, ["s1:26379", "s2:5000"]);
        // The password is the data nodes', decoded; the sentinels have none.
        let node = nodes.at("10.0.0.1", 6380);
        assert_eq!(node.redis_settings().password(), Some("p@w"));
        assert_eq!(node.redis_settings().db(), 2);
        assert_eq!(node.addr().to_string(), "10.0.0.1:6380");
        assert_eq!(sentinels[0].get_connection_info().redis_settings().password(), None);
    }

    #[test]
    fn sentinels_may_have_their_own_credentials() {
        let Target::Sentinel { sentinels, .. } =
            parse("redis+sentinel://s1/m?sentinel_username=watch&sentinel_password=s%2Fecret")
        else {
            panic!("not sentinel")
        };
        let settings = sentinels[0].get_connection_info().redis_settings().clone();
        assert_eq!((settings.username(), settings.password()), (Some("watch"), Some("s/ecret")));
    }

    #[test]
    fn cluster_urls_list_seeds_and_keep_tls() {
        let Target::Cluster { seeds, nodes } = parse("rediss+cluster://u:pw@n1:7000,n2/") else {
            panic!("not cluster")
        };
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[1].addr().to_string(), "n2:6379");
        assert!(nodes.is_tls());
        assert!(matches!(nodes.at("n3", 7002).addr(), ConnectionAddr::TcpTls { .. }));
        assert_eq!(nodes.at("n3", 7002).redis_settings().username(), Some("u"));
    }

    #[test]
    fn encoded_characters_and_a_raw_at_sign_stay_in_the_password() {
        let Target::Cluster { seeds, .. } = parse("redis+cluster://:a%2Fb@n1:7000/") else { panic!() };
        assert_eq!(seeds[0].redis_settings().password(), Some("a/b"));
        let Target::Sentinel { nodes, master, .. } = parse("redis+sentinel://:p@ss@s1/master@dc1") else {
            panic!()
        };
        assert_eq!(nodes.at("h", 1).redis_settings().password(), Some("p@ss"));
        assert_eq!(master, "master@dc1", "an `@` after the hosts is not the credentials' end");
    }

    #[test]
    fn mistakes_are_described_without_the_password() {
        for url in [
            "redis+sentinel://:hunter2@s1:1/",
            "redis+sentinel://:hunter2@/m",
            "redis+cluster://:hunter2@n1:1/3",
            "redis+sentinel://:hunter2@s1/m?what=1",
            "redis+cluster://:hunter2@n1:notaport/",
            "redis+cluster://:hunter2@n1:1/?protocol=resp3",
        ] {
            let error = Target::parse(url, None).err().unwrap_or_else(|| panic!("{url} parsed"));
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_settings_reach_every_server_of_a_sentinel_or_cluster_url() {
        let ca = lock_testkit::harness::TestCa::shared().unwrap();
        let verifying = |info: &ConnectionInfo| {
            matches!(info.addr(), ConnectionAddr::TcpTls { insecure: false, tls_params: Some(_), .. })
        };
        let url = format!(
            "rediss+sentinel://:pw@s1,s2/m?sentinel_password=x&{}&sslmode=verify-ca",
            ca.cacert_query()
        );
        let Target::Sentinel { sentinels, nodes, .. } = parse(&url) else { panic!("not sentinel") };
        for sentinel in &sentinels {
            let info = sentinel.get_connection_info();
            assert!(verifying(info), "{info:?}");
            assert_eq!(info.redis_settings().password(), Some("x"));
        }
        assert!(verifying(&nodes.at("10.0.0.1", 6379)));
        assert_eq!(nodes.at("10.0.0.1", 6379).redis_settings().password(), Some("pw"));

        let url = format!("rediss+cluster://n1,n2:7001/?{}", ca.cacert_query());
        let map: AddressMap = Arc::new(|host: &str, port: u16| (format!("mapped-{host}"), port + 1));
        let Target::Cluster { seeds, nodes } = parse(&url).with_address_map(map) else {
            panic!("not cluster")
        };
        assert!(seeds.iter().all(verifying), "{seeds:?}");
        assert_eq!(seeds[1].addr().to_string(), "mapped-n2:7002");
        assert!(verifying(&nodes.at("10.0.0.2", 7000)));

        // The builder's options replace the URL's, scheme included.
        let options = TlsOptions::new(lock_core::TlsMode::VerifyFull).root_cert(ca.ca_cert());
        let Target::Cluster { seeds, .. } = Target::parse("redis+cluster://n1/", Some(&options)).unwrap()
        else {
            panic!("not cluster")
        };
        assert!(verifying(&seeds[0]));
        let plain = TlsOptions::new(lock_core::TlsMode::Disable);
        let Target::Single(client) = Target::parse("rediss://:pw@h:1/?cacert=/none", Some(&plain)).unwrap()
        else {
            panic!("not single")
        };
        assert!(matches!(client.get_connection_info().addr(), ConnectionAddr::Tcp(..)));
    }

    #[test]
    fn display_has_no_credentials() {
        for url in ["redis+sentinel://:hunter2@s1,s2/m", "redis+cluster://u:hunter2@n1:7000,n2:7001/"] {
            let shown = parse(url).display();
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }
}
