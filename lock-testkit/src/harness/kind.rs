//! The kinds of server the harness can start.

use std::fmt;

/// Which server software a handle or an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// `redis-server`.
    Redis,
    /// PostgreSQL's `postgres`.
    Postgres,
    /// MariaDB's `mariadbd`.
    MariaDb,
    /// Apache ZooKeeper (`QuorumPeerMain` on a JVM).
    ZooKeeper,
    /// `etcd`.
    Etcd,
    /// PgBouncer, a connection pooler in front of PostgreSQL.
    PgBouncer,
}

impl ServerKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ServerKind; 6] = [
        ServerKind::Redis,
        ServerKind::Postgres,
        ServerKind::MariaDb,
        ServerKind::ZooKeeper,
        ServerKind::Etcd,
        ServerKind::PgBouncer,
    ];

    /// A short lowercase name without dashes, used in temp-dir names.
    pub fn slug(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Postgres => "postgres",
            ServerKind::MariaDb => "mariadb",
            ServerKind::ZooKeeper => "zookeeper",
            ServerKind::Etcd => "etcd",
            ServerKind::PgBouncer => "pgbouncer",
        }
    }

    /// The kind whose [`slug`](Self::slug) is `slug`.
    pub fn from_slug(slug: &str) -> Option<ServerKind> {
        Self::ALL.into_iter().find(|kind| kind.slug() == slug)
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::Redis => "Redis",
            ServerKind::Postgres => "PostgreSQL",
            ServerKind::MariaDb => "MariaDB",
            ServerKind::ZooKeeper => "ZooKeeper",
            ServerKind::Etcd => "etcd",
            ServerKind::PgBouncer => "PgBouncer",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_round_trip_and_have_no_dashes() {
        for kind in ServerKind::ALL {
            assert_eq!(ServerKind::from_slug(kind.slug()), Some(kind));
            // Temp-dir names are split on '-' to find the owner's pid.
            assert!(!kind.slug().contains('-'));
        }
    }
}
