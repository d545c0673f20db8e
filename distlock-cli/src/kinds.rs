//! The table of backend kinds: each row names a kind, the Cargo feature that builds it in, and
//! how to make its target — on the harness's throwaway servers or on a user's own.
//!
//! Adding a backend kind is one row here (and its `open` function in a module of `kinds/`).

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::time::Duration;

use distlock::Result;
use lock_testkit::suite::SuiteTarget;
use lock_testkit::workload::{self, RoundTripProbe, W1Report, W2Report, W3Report, W4Report};

/// Where a kind's servers are.
#[derive(Debug, Clone, Copy)]
pub enum Servers<'a> {
    /// Throwaway servers the harness starts on free loopback ports (or the ones the
    /// `DISTLOCK_*` variables name).
    Harness,
    /// The user's own servers: a URL, or a comma-separated list for multi-node kinds.
    Url(&'a str),
}

/// A kind's target, ready to be measured.
pub struct Opened {
    /// The target.
    pub target: Box<dyn BenchTarget>,
    /// A single-node W1 pair p50 measured while opening, for kinds compared against one
    /// (Redlock: "pair p50 ≤ 2 × single-node").
    pub single_node_w1_p50: Option<Duration>,
}

/// Makes a kind's target.
type Open = fn(Servers<'_>) -> std::result::Result<Opened, String>;

/// One backend kind.
pub struct Kind {
    /// The name on the command line (`redis-hash`).
    pub name: &'static str,
    /// The Cargo feature of `distlock-cli` that builds it in; `None` for always-present kinds.
    pub feature: Option<&'static str>,
    /// What it is, in a few words.
    pub about: &'static str,
    /// How to make its target; `None` when this binary was built without its feature.
    open: Option<Open>,
}

/// A row of [`KINDS`] for a kind behind `$feature`, whose `open` function exists only with it.
macro_rules! kind {
    ($name:literal, $feature:literal, $about:literal, $open:path) => {
        Kind {
            name: $name,
            feature: Some($feature),
            about: $about,
            #[cfg(feature = $feature)]
            open: Some($open),
            #[cfg(not(feature = $feature))]
            open: None,
        }
    };
}

/// Every backend kind distlock knows, whether or not this binary was built with it.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "memory",
        feature: None,
        about: "the in-process reference backend",
        open: Some(open_memory),
    },
    kind!("redis", "redis", "Redis, one server, SET NX PX layout", redis::set_nx),
    kind!("redis-hash", "redis", "Redis, one server, reentrant-hash layout", redis::reentrant_hash),
    kind!("redlock", "redis", "Redlock over five independent Redis servers", redis::redlock),
    kind!("pg-table", "postgres", "PostgreSQL lock table on the database clock", postgres::table),
    kind!("pg-row", "postgres", "PostgreSQL SELECT ... FOR UPDATE row lock", postgres::row),
    kind!("pg-advisory", "postgres", "PostgreSQL advisory lock", postgres::advisory),
    kind!("mysql-table", "mysql", "MySQL/MariaDB lock table on the database clock", mysql::table),
    kind!("mysql-row", "mysql", "MySQL/MariaDB SELECT ... FOR UPDATE row lock", mysql::row),
    kind!("mysql-advisory", "mysql", "MySQL/MariaDB GET_LOCK advisory lock", mysql::advisory),
    kind!(
        "zookeeper",
        "zookeeper",
        "ZooKeeper, Curator-compatible ephemeral-sequential lock",
        zookeeper::curator_mutex
    ),
];

impl Kind {
    /// The kind called `name`, if this binary was built with it.
    ///
    /// # Errors
    /// A message listing the kinds this binary knows, when `name` is unknown or its feature is
    /// off.
    pub fn find(name: &str) -> std::result::Result<&'static Kind, String> {
        let built: Vec<&str> =
            KINDS.iter().filter(|kind| kind.open.is_some()).map(|kind| kind.name).collect();
        match KINDS.iter().find(|kind| kind.name == name) {
            Some(kind) if kind.open.is_some() => Ok(kind),
            Some(kind) => Err(format!(
                "backend kind `{name}` needs distlock-cli's `{}` feature, which this binary was built without; it knows: {}",
                kind.feature.unwrap_or("?"),
                built.join(", ")
            )),
            None => Err(format!("unknown backend kind `{name}`; this binary knows: {}", built.join(", "))),
        }
    }

    /// Makes this kind's target on `servers`.
    ///
    /// # Errors
    /// When the servers cannot be started or reached, or the kind was not built in.
    pub fn open(&self, servers: Servers<'_>) -> std::result::Result<Opened, String> {
        let open = self.open.ok_or_else(|| format!("backend kind `{}` is not built in", self.name))?;
        open(servers)
    }
}

/// Prints [`KINDS`] as a table: name, feature, whether built in, what it is.
pub fn print_table() {
    for kind in KINDS {
        let built = if kind.open.is_some() { "built in" } else { "not built in" };
        let feature =
            kind.feature.map_or_else(|| "always".to_owned(), |feature| format!("feature {feature}"));
        println!("{:<15} {:<16} {:<13} {}", kind.name, feature, built, kind.about);
    }
}

fn open_memory(servers: Servers<'_>) -> std::result::Result<Opened, String> {
    if let Servers::Url(url) = servers {
        return Err(format!("the memory backend lives in this process: it takes no URL (got {url})"));
    }
    Ok(Opened { target: Box::new(lock_testkit::suite::MemoryTarget::new()), single_node_w1_p50: None })
}

/// A [`SuiteTarget`] with its backend type erased, as the benchmark runs it.
pub trait BenchTarget {
    /// The name shown in reports.
    fn label(&self) -> String;
    /// The physical limit: one server round trip; `None` in process.
    fn round_trip(&self) -> Option<RoundTripProbe>;
    /// W1, uncontended pairs.
    fn w1(&self) -> Result<W1Report>;
    /// W2, eight workers on one name.
    fn w2(&self) -> Result<W2Report>;
    /// W3, eight workers on eight names.
    fn w3(&self) -> Result<W3Report>;
    /// Why W4 does not apply, if it does not.
    fn w4_not_applicable(&self) -> Result<Option<&'static str>>;
    /// W4, 10,000 leases renewed.
    fn w4(&self) -> Result<W4Report>;
}

impl<T: SuiteTarget> BenchTarget for T {
    fn label(&self) -> String {
        SuiteTarget::label(self)
    }
    fn round_trip(&self) -> Option<RoundTripProbe> {
        SuiteTarget::round_trip(self)
    }
    fn w1(&self) -> Result<W1Report> {
        workload::w1_uncontended(self)
    }
    fn w2(&self) -> Result<W2Report> {
        workload::w2_contended(self)
    }
    fn w3(&self) -> Result<W3Report> {
        workload::w3_independent(self)
    }
    fn w4_not_applicable(&self) -> Result<Option<&'static str>> {
        workload::w4_not_applicable(self)
    }
    fn w4(&self) -> Result<W4Report> {
        workload::w4_renewal_scale(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lookups_list_the_known_kinds() {
        let mut names: Vec<&str> = KINDS.iter().map(|kind| kind.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len(), "duplicate kind names");
        assert!(Kind::find("memory").is_ok());
        let error = Kind::find("etcd").err().expect("unknown kind");
        assert!(error.contains("unknown backend kind `etcd`") && error.contains("memory"), "{error}");
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn a_kind_whose_feature_is_off_says_which_feature() {
        let error = Kind::find("redis").err().expect("not built in");
        assert!(error.contains("`redis` feature"), "{error}");
    }
}
