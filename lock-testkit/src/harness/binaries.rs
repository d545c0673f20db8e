//! Finding installed server binaries, with an error that names the Debian package to install.

use std::env;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use super::HarnessError;

/// An installed file the harness needs, and where Debian puts it.
pub(crate) struct Binary {
    /// File name, e.g. `redis-server`.
    pub name: &'static str,
    /// The Debian package that ships it.
    pub package: &'static str,
    /// Dirs to try after `PATH` (or instead of it, see [`Binary::search_path`]).
    pub dirs: &'static [&'static str],
    /// Whether to search `PATH`; off for files that are not commands, like jars.
    pub search_path: bool,
}

pub(crate) const REDIS_SERVER: Binary = Binary {
    name: "redis-server",
    package: "redis-server",
    dirs: &["/usr/bin", "/usr/local/bin"],
    search_path: true,
};

/// The Redis command-line client: `redis-cli --cluster create` joins a cluster's nodes.
pub(crate) const REDIS_CLI: Binary = Binary {
    name: "redis-cli",
    package: "redis-tools",
    dirs: &["/usr/bin", "/usr/local/bin"],
    search_path: true,
};

pub(crate) const MARIADBD: Binary = Binary {
    name: "mariadbd",
    package: "mariadb-server",
    dirs: &["/usr/sbin", "/usr/local/sbin", "/usr/bin"],
    search_path: true,
};

pub(crate) const MARIADB_INSTALL_DB: Binary = Binary {
    name: "mariadb-install-db",
    package: "mariadb-server",
    dirs: &["/usr/bin", "/usr/local/bin", "/usr/sbin"],
    search_path: true,
};

pub(crate) const JAVA: Binary =
    Binary { name: "java", package: "default-jre-headless", dirs: &["/usr/bin"], search_path: true };

pub(crate) const ZOOKEEPER_JAR: Binary =
    Binary { name: "zookeeper.jar", package: "zookeeper", dirs: &["/usr/share/java"], search_path: false };

/// Netty's codecs: ZooKeeper's TLS port runs on Netty (`NettyServerCnxnFactory`), which needs
/// them, but Debian's `zookeeper.jar` manifest does not list the jar.
pub(crate) const NETTY_CODEC_JAR: Binary = Binary {
    name: "netty-codec.jar",
    package: "libnetty-java",
    dirs: &["/usr/share/java"],
    search_path: false,
};

/// Logging backend for ZooKeeper's SLF4J; without it ZooKeeper logs nothing.
pub(crate) const SLF4J_SIMPLE_JAR: Binary = Binary {
    name: "slf4j-simple.jar",
    package: "libslf4j-java",
    dirs: &["/usr/share/java"],
    search_path: false,
};

pub(crate) const ETCD: Binary =
    Binary { name: "etcd", package: "etcd-server", dirs: &["/usr/bin", "/usr/local/bin"], search_path: true };

/// etcd's command-line client: enables auth on a started server, and tests talk to etcd with it.
pub(crate) const ETCDCTL: Binary = Binary {
    name: "etcdctl",
    package: "etcd-client",
    dirs: &["/usr/bin", "/usr/local/bin"],
    search_path: true,
};

/// PgBouncer, the connection pooler; Debian puts it in `/usr/sbin`, off a user's `PATH`.
pub(crate) const PGBOUNCER: Binary = Binary {
    name: "pgbouncer",
    package: "pgbouncer",
    dirs: &["/usr/sbin", "/usr/local/sbin", "/usr/bin"],
    search_path: true,
};

/// Where Debian installs each PostgreSQL major version's server binaries.
const POSTGRES_VERSIONS_DIR: &str = "/usr/lib/postgresql";

/// Finds `binary`: first on `PATH` (if allowed), then in its well-known dirs.
///
/// # Errors
///
/// [`HarnessError::MissingBinary`] naming the Debian package to install.
pub(crate) fn find(binary: &Binary) -> Result<PathBuf, HarnessError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if binary.search_path {
        dirs.extend(env::var_os("PATH").iter().flat_map(env::split_paths));
    }
    dirs.extend(binary.dirs.iter().map(PathBuf::from));
    find_in(binary.name, binary.package, &dirs)
}

/// Finds the PostgreSQL server binary `name` (`initdb`, `postgres`): on `PATH`, then in the
/// newest `/usr/lib/postgresql/<major>/bin`, where Debian keeps them off `PATH`.
pub(crate) fn find_postgres(name: &'static str) -> Result<PathBuf, HarnessError> {
    let mut dirs: Vec<PathBuf> = env::var_os("PATH").iter().flat_map(env::split_paths).collect();
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(POSTGRES_VERSIONS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    dirs.extend(versions.into_iter().map(|(_, dir)| dir));
    find_in(name, "postgresql", &dirs)
}

/// The file `name` next to `found`, e.g. `postgres` beside the `initdb` that was found, so that
/// both come from one installation.
pub(crate) fn sibling(
    found: &Path,
    name: &'static str,
    package: &'static str,
) -> Result<PathBuf, HarnessError> {
    let dir = found.parent().unwrap_or(Path::new("/"));
    find_in(name, package, &[dir.to_path_buf()])
}

fn find_in(name: &str, package: &'static str, dirs: &[PathBuf]) -> Result<PathBuf, HarnessError> {
    dirs.iter().map(|dir| dir.join(name)).find(|path| is_usable(path, name)).ok_or_else(|| {
        HarnessError::MissingBinary {
            binary: name.to_owned(),
            package,
            searched: dirs.iter().map(|dir| dir.display().to_string()).collect::<Vec<_>>().join(":"),
        }
    })
}

/// A regular file, executable unless it is a jar.
fn is_usable(path: &Path, name: &str) -> bool {
    let Ok(metadata) = fs::metadata(path) else {
        return false;
    };
    metadata.is_file() && (name.ends_with(".jar") || metadata.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_its_package() {
        let missing = Binary {
            name: "distlock-no-such-server",
            package: "distlock-server",
            dirs: &["/nonexistent"],
            search_path: true,
        };
        let message = find(&missing).unwrap_err().to_string();
        assert!(message.contains("`distlock-no-such-server` not found"), "{message}");
        assert!(message.contains("/nonexistent"), "{message}");
        assert!(message.contains("install the Debian package `distlock-server`"), "{message}");
    }

    #[test]
    fn finds_commands_on_path() {
        let sh = Binary { name: "sh", package: "dash", dirs: &[], search_path: true };
        assert!(find(&sh).unwrap().ends_with("sh"));
    }
}
