//! Making sure the server programs the tests start are installed.
//!
//! The test harness (lock-testkit) starts its own throwaway servers, in temporary directories on
//! free ports, so the tests need the server *programs*, not running services. On Debian and
//! Ubuntu missing programs are installed with `apt-get`; elsewhere the user is told what to
//! install, or which environment variables point the tests at servers that already run.
//!
//! The check is idempotent: every program is looked for first, and only the packages of missing
//! ones are installed, so on a prepared machine this step changes nothing.

use std::env;
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd::{self, Failure};

/// A program the tests need, where to look for it, and the Debian package that provides it.
struct Program {
    /// What the log calls it.
    name: &'static str,
    /// Where it may be, tried in order: absolute paths (a `*` in a path component matches any
    /// characters; of several matches the highest-numbered, i.e. newest, wins) and bare names,
    /// looked up on `PATH`.
    candidates: &'static [&'static str],
    /// The argument that makes it print its version, for the log; `None` if it has none.
    version_argument: Option<&'static str>,
    /// The Debian package that provides it.
    package: &'static str,
}

/// A server the tests start, and how to do without installing it.
struct Server {
    /// What the log calls it.
    name: &'static str,
    /// The environment variable that points the tests at an already running server; when it is
    /// set, the tests start no server of this kind, so its programs are not needed.
    environment_variable: &'static str,
    /// The programs the test harness runs to start this server.
    programs: &'static [Program],
}

/// Every server the tests need.
const SERVERS: &[Server] = &[
    Server {
        name: "Redis",
        environment_variable: "DISTLOCK_REDIS_URL",
        programs: &[
            Program {
                name: "redis-server",
                candidates: &["/usr/bin/redis-server", "redis-server"],
                version_argument: Some("--version"),
                package: "redis-server",
            },
            Program {
                name: "redis-benchmark",
                candidates: &["/usr/bin/redis-benchmark", "redis-benchmark"],
                version_argument: Some("--version"),
                package: "redis-tools",
            },
            // Joins the harness's Redis Cluster (`--cluster create`).
            Program {
                name: "redis-cli",
                candidates: &["/usr/bin/redis-cli", "redis-cli"],
                version_argument: Some("--version"),
                package: "redis-tools",
            },
        ],
    },
    Server {
        name: "PostgreSQL",
        environment_variable: "DISTLOCK_POSTGRES_URL",
        programs: &[
            Program {
                name: "initdb",
                candidates: &[
                    "/usr/lib/postgresql/*/bin/initdb",
                    "/opt/homebrew/opt/postgresql@*/bin/initdb",
                    "/usr/local/opt/postgresql@*/bin/initdb",
                    "initdb",
                ],
                version_argument: Some("--version"),
                package: "postgresql",
            },
            Program {
                name: "postgres",
                candidates: &[
                    "/usr/lib/postgresql/*/bin/postgres",
                    "/opt/homebrew/opt/postgresql@*/bin/postgres",
                    "/usr/local/opt/postgresql@*/bin/postgres",
                    "postgres",
                ],
                version_argument: Some("--version"),
                package: "postgresql",
            },
        ],
    },
    Server {
        name: "PgBouncer",
        environment_variable: "DISTLOCK_PGBOUNCER_URL",
        programs: &[Program {
            name: "pgbouncer",
            candidates: &["/usr/sbin/pgbouncer", "pgbouncer"],
            version_argument: Some("--version"),
            // Its system service (on port 6432) is kept from starting while it installs.
            package: "pgbouncer",
        }],
    },
    Server {
        name: "MariaDB",
        environment_variable: "DISTLOCK_MYSQL_URL",
        programs: &[
            Program {
                name: "mariadbd",
                candidates: &["/usr/sbin/mariadbd", "mariadbd"],
                version_argument: Some("--version"),
                package: "mariadb-server",
            },
            Program {
                name: "mariadb-install-db",
                candidates: &["/usr/bin/mariadb-install-db", "mariadb-install-db"],
                version_argument: None,
                package: "mariadb-server",
            },
        ],
    },
    Server {
        name: "ZooKeeper",
        environment_variable: "DISTLOCK_ZOOKEEPER",
        programs: &[
            Program {
                name: "zookeeper",
                // Debian's `zookeeper` package: the jars and scripts, and no system service
                // (that is `zookeeperd`, which would start one on port 2181).
                candidates: &["/usr/share/zookeeper/bin/zkServer.sh", "zkServer", "zkServer.sh"],
                version_argument: None,
                package: "zookeeper",
            },
            Program {
                name: "java",
                candidates: &["java", "/usr/bin/java"],
                version_argument: Some("-version"),
                // `zookeeper` depends on it; named for when Java alone is missing.
                package: "default-jre-headless",
            },
        ],
    },
    Server {
        name: "etcd",
        environment_variable: "DISTLOCK_ETCD_URL",
        programs: &[
            Program {
                name: "etcd",
                candidates: &["/usr/bin/etcd", "etcd"],
                version_argument: Some("--version"),
                // Its system service (on port 2379) is kept from starting while it installs.
                package: "etcd-server",
            },
            Program {
                name: "etcdctl",
                candidates: &["/usr/bin/etcdctl", "etcdctl"],
                // etcdctl v3 has a `version` command and no `--version` flag.
                version_argument: Some("version"),
                package: "etcd-client",
            },
        ],
    },
    Server {
        name: "Protocol Buffers (the etcd-client crate's build script compiles etcd's .proto files)",
        // prost-build runs the `protoc` this names instead of the one on `PATH`.
        environment_variable: "PROTOC",
        programs: &[
            Program {
                name: "protoc",
                candidates: &["/usr/bin/protoc", "protoc"],
                version_argument: Some("--version"),
                package: "protobuf-compiler",
            },
            Program {
                // etcd's protos import Google's well-known types, which `protobuf-compiler`
                // does not ship.
                name: "google/protobuf/descriptor.proto",
                candidates: &["/usr/include/google/protobuf/descriptor.proto"],
                version_argument: None,
                package: "libprotobuf-dev",
            },
        ],
    },
    Server {
        name: "Chromium (renders the HTML report of `distlock compare` in the CLI's test)",
        environment_variable: "DISTLOCK_CHROMIUM",
        programs: &[Program {
            name: "chromium",
            candidates: &["/usr/bin/chromium", "chromium"],
            version_argument: Some("--version"),
            package: "chromium",
        }],
    },
    Server {
        name: "Apache Curator (the Java client of the ZooKeeper interop tests, Z03–Z05)",
        environment_variable: "DISTLOCK_CURATOR_CLASSPATH",
        programs: &[
            Program {
                name: "curator-recipes.jar",
                candidates: &["/usr/share/java/curator-recipes.jar"],
                version_argument: None,
                package: "libcurator-recipes-java",
            },
            Program {
                name: "slf4j-nop.jar",
                candidates: &["/usr/share/java/slf4j-nop.jar"],
                version_argument: None,
                package: "libslf4j-java",
            },
            Program {
                name: "javac",
                candidates: &["javac", "/usr/bin/javac"],
                version_argument: Some("-version"),
                // Z03–Z05 compile their small Curator programs.
                package: "default-jdk-headless",
            },
        ],
    },
];

/// What to tell users of systems without `apt-get`.
const OTHER_SYSTEMS_HELP: &str = "\
This system has no apt-get, so the xtask cannot install the servers the tests start.
Install them yourself, e.g. on macOS:

    brew install redis postgresql@15 mariadb zookeeper etcd protobuf

or point the tests at servers that are already running:

    DISTLOCK_REDIS_URL=redis://127.0.0.1:6379/
    DISTLOCK_POSTGRES_URL=postgres://user:password@127.0.0.1:5432/database
    DISTLOCK_MYSQL_URL=mysql://user:password@127.0.0.1:3306/database
    DISTLOCK_ZOOKEEPER=127.0.0.1:2181
    DISTLOCK_ETCD_URL=etcd://127.0.0.1:2379

The ZooKeeper interop tests (Z03–Z05) also need a JDK and Apache Curator's jars (brew install
openjdk, and the jars from Maven Central), named by
DISTLOCK_CURATOR_CLASSPATH=/path/curator-recipes.jar:/path/curator-framework.jar:…

(or skip this check with `cargo xtask test --no-install`).";

/// Debian's hook that maintainer scripts ask before starting a service (see `invoke-rc.d(8)`).
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// Looks for every program the tests need, and installs what is missing where `apt-get` can.
///
/// # Errors
///
/// If programs are missing and cannot be installed: there is no `apt-get`, no root rights and no
/// `sudo`, or `apt-get` fails. The message says what to do instead.
pub fn ensure_servers() -> Result<(), Failure> {
    let missing = missing_programs();
    if missing.is_empty() {
        println!("All server programs the tests need are installed; nothing to install.");
        return Ok(());
    }
    let names = missing.iter().map(|program| program.name).collect::<Vec<_>>();
    let Some(apt_get) = cmd::find_on_path("apt-get") else {
        eprintln!("{OTHER_SYSTEMS_HELP}");
        return Err(Failure::new(format!("missing server programs: {}", names.join(", "))));
    };

    let mut packages: Vec<&str> = Vec::new();
    for program in &missing {
        if !packages.contains(&program.package) {
            packages.push(program.package);
        }
    }
    println!(
        "Installing {} with apt-get: the tests start their own throwaway servers and need {}.",
        packages.join(" "),
        names.join(", ")
    );
    let privilege = Privilege::detect(&packages)?;
    {
        let _no_services = NoServiceStart::new(&privilege);
        cmd::run(&mut privilege.apt_get(&apt_get, &["update"]))?;
        let mut install = vec!["install", "-y", "--no-install-recommends"];
        install.extend(&packages);
        cmd::run(&mut privilege.apt_get(&apt_get, &install))?;
    }

    let still_missing = missing_programs();
    if still_missing.is_empty() {
        Ok(())
    } else {
        let names = still_missing.iter().map(|program| program.name).collect::<Vec<_>>();
        Err(Failure::new(format!(
            "after installing {}, still missing: {}",
            packages.join(" "),
            names.join(", ")
        )))
    }
}

/// Reports on every program the tests need, and returns those not found.
fn missing_programs() -> Vec<&'static Program> {
    let mut missing = Vec::new();
    for server in SERVERS {
        if env::var_os(server.environment_variable).is_some_and(|value| !value.is_empty()) {
            println!(
                "{}: {} is set, so the tests use that server; not checking its programs.",
                server.name, server.environment_variable
            );
            continue;
        }
        for program in server.programs {
            match locate(program) {
                Some(path) => {
                    let version = program
                        .version_argument
                        .and_then(|argument| cmd::first_line_of_output(&path, &[argument]));
                    match version {
                        Some(version) => {
                            println!("{}: {} ({version})", server.name, path.display())
                        }
                        None => println!("{}: {}", server.name, path.display()),
                    }
                }
                None => {
                    println!("{}: {} not found", server.name, program.name);
                    missing.push(program);
                }
            }
        }
    }
    missing
}

/// Where `program` is installed, if anywhere.
fn locate(program: &Program) -> Option<PathBuf> {
    program.candidates.iter().find_map(|candidate| {
        if candidate.starts_with('/') {
            expand(Path::new(candidate)).pop().filter(|path| path.is_file())
        } else {
            cmd::find_on_path(candidate)
        }
    })
}

/// The existing paths matching `pattern`, in which a path component containing one `*` matches
/// directory entries with the same text before and after it. Matches are ordered by the first
/// number in the matching component, so the newest version comes last.
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let mut matches = vec![PathBuf::new()];
    for component in pattern.iter() {
        let component = component.to_string_lossy();
        let Some((before, after)) = component.split_once('*') else {
            for path in &mut matches {
                path.push(&*component);
            }
            continue;
        };
        let mut expanded = Vec::new();
        for directory in &matches {
            let Ok(entries) = fs::read_dir(directory) else {
                continue;
            };
            let mut names = entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| {
                    name.len() >= before.len() + after.len()
                        && name.starts_with(before)
                        && name.ends_with(after)
                })
                .collect::<Vec<_>>();
            names.sort_by_key(|name| (first_number(name), name.clone()));
            expanded.extend(names.into_iter().map(|name| directory.join(name)));
        }
        matches = expanded;
    }
    matches.retain(|path| path.exists());
    matches
}

/// The first run of digits in `text` as a number (0 if none): `15` in `postgresql@15`.
fn first_number(text: &str) -> u64 {
    let digits =
        text.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect::<String>();
    digits.parse().unwrap_or(0)
}

/// How to run commands as root.
enum Privilege {
    /// We are root (the normal case in CI containers).
    Root,
    /// Through `sudo`; `-n` (never ask for a password) when nobody is at a terminal to answer.
    Sudo {
        /// Whether to pass `-n`.
        non_interactive: bool,
    },
}

impl Privilege {
    /// Whether we are root or can use `sudo`.
    ///
    /// # Errors
    ///
    /// If neither, with the command that installs `packages` for the user to run as root.
    fn detect(packages: &[&str]) -> Result<Self, Failure> {
        if is_root() {
            return Ok(Self::Root);
        }
        if cmd::find_on_path("sudo").is_some() {
            println!("Not running as root: using sudo.");
            let non_interactive = !std::io::stdin().is_terminal();
            return Ok(Self::Sudo { non_interactive });
        }
        eprintln!(
            "Not running as root and there is no sudo. Run this as root, then try again:\n\n    \
             apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
             --no-install-recommends {}\n",
            packages.join(" ")
        );
        Err(Failure::new("cannot install packages without root rights"))
    }

    /// `program args…`, run as root.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        match self {
            Self::Root => {
                let mut command = Command::new(program);
                command.args(args);
                command
            }
            Self::Sudo { non_interactive } => {
                let mut command = Command::new("sudo");
                if *non_interactive {
                    command.arg("-n");
                }
                command.arg(program).args(args);
                command
            }
        }
    }

    /// `apt-get args…`, run as root and never asking questions.
    fn apt_get(&self, apt_get: &Path, args: &[&str]) -> Command {
        match self {
            Self::Root => {
                let mut command = self.command(apt_get, args);
                command.env("DEBIAN_FRONTEND", "noninteractive");
                command
            }
            // sudo resets the environment; `env` sets the variable on the far side.
            Self::Sudo { .. } => {
                let mut env_args = vec!["DEBIAN_FRONTEND=noninteractive"];
                let apt_get = apt_get.to_string_lossy();
                env_args.push(&apt_get);
                env_args.extend(args);
                self.command("env", &env_args)
            }
        }
    }
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.status.success() && output.stdout.trim_ascii() == b"0")
}

/// While alive, tells Debian's maintainer scripts not to start services.
///
/// Installing `redis-server`, `postgresql`, `pgbouncer`, `mariadb-server` or `etcd-server` would otherwise
/// start a system service on the standard port, which the tests do not use (they start their own
/// servers) and which would only take memory or collide with servers already there. A
/// `policy-rc.d` that exits 101 ("action forbidden") is Debian's standard way to prevent that; it
/// is removed on drop. An existing `policy-rc.d` belongs to someone else and is left alone.
struct NoServiceStart<'a> {
    /// How to remove the hook again; `None` if we did not create it.
    created_with: Option<&'a Privilege>,
}

impl<'a> NoServiceStart<'a> {
    /// Installs the hook, warning (and carrying on) if that fails.
    fn new(privilege: &'a Privilege) -> Self {
        if Path::new(POLICY_RC_D).exists() {
            println!("{POLICY_RC_D} exists already; leaving it as it is.");
            return Self { created_with: None };
        }
        println!("Stopping the packages from starting system services while they install:");
        let script = format!("printf '#!/bin/sh\\nexit 101\\n' > {POLICY_RC_D} && chmod 755 {POLICY_RC_D}");
        match cmd::run(&mut privilege.command("sh", &["-c", &script])) {
            Ok(()) => Self { created_with: Some(privilege) },
            Err(error) => {
                eprintln!("warning: {error}; the packages may start system services");
                Self { created_with: None }
            }
        }
    }
}

impl Drop for NoServiceStart<'_> {
    fn drop(&mut self) {
        if let Some(privilege) = self.created_with {
            if let Err(error) = cmd::run(&mut privilege.command("rm", &["-f", POLICY_RC_D])) {
                eprintln!("warning: could not remove {POLICY_RC_D}: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_number_finds_the_version() {
        assert_eq!(first_number("15"), 15);
        assert_eq!(first_number("postgresql@9"), 9);
        assert_eq!(first_number("main"), 0);
    }

    #[test]
    fn expand_orders_versions_numerically() {
        let root = env::temp_dir().join(format!("xtask-expand-{}", std::process::id()));
        for version in ["9.6", "15", "13"] {
            fs::create_dir_all(root.join(version).join("bin")).unwrap();
            fs::write(root.join(version).join("bin/initdb"), "").unwrap();
        }
        fs::create_dir_all(root.join("16/bin")).unwrap(); // No initdb: not a match.
        let found = expand(&root.join("*/bin/initdb"));
        fs::remove_dir_all(&root).unwrap();
        let versions = found
            .iter()
            .map(|path| path.strip_prefix(&root).unwrap().iter().next().unwrap().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(versions, ["9.6", "13", "15"]);
    }
}
