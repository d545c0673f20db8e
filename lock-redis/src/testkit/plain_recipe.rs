//! The plain Redis lock recipe every comparison here is made against: `SET key token NX PX` to
//! acquire and a Lua compare-and-delete to release, on one connection, with neither fencing token
//! nor wait queue. [`plain_pair`](super::plain_pair) times its uncontended pair beside the lock's;
//! [`run_contended`] runs W2 with it, retrying after 1 ms as rslock does, beside the lock's W2.

use std::time::Duration;

use lock_core::OwnerToken;
use lock_testkit::suite::unique_name;
use lock_testkit::workload::{w2_contenders, Contender, Scale, W2Report, LEASE, W2_WORKERS};

use crate::redis;

/// How long a contended worker sleeps after a refused `SET NX` before it asks again (rslock's
/// `retryDelay`).
pub const RETRY: Duration = Duration::from_millis(1);

/// The connect, read and write timeout of the recipe's connections.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection speaking the plain recipe.
pub(crate) struct PlainRecipe {
    connection: redis::Connection,
    delete: redis::Script,
}

impl PlainRecipe {
    /// A connection of its own to `url` (TLS as the URL says).
    ///
    /// # Errors
    /// The server cannot be reached within [`IO_TIMEOUT`].
    pub(crate) fn connect(url: &str) -> Result<Self, String> {
        let client = crate::tls::open_client(url)?;
        let connection = client.get_connection_with_timeout(IO_TIMEOUT).map_err(|e| e.to_string())?;
        // A server that stops answering ends the run with errors, not a hang.
        connection.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        connection.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        let delete = redis::Script::new(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
        );
        Ok(Self { connection, delete })
    }

    /// `SET key token NX PX lease`: whether it was set.
    ///
    /// # Errors
    /// The command failed.
    pub(crate) fn set_nx_px(&mut self, key: &str, token: &str, lease: Duration) -> Result<bool, String> {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .query(&mut self.connection)
            .map_err(|e| e.to_string())?;
        Ok(set.is_some())
    }

    /// Deletes `key` if it still holds `token`: whether it did.
    ///
    /// # Errors
    /// The script failed.
    pub(crate) fn compare_and_delete(&mut self, key: &str, token: &str) -> Result<bool, String> {
        let deleted: i64 =
            self.delete.key(key).arg(token).invoke(&mut self.connection).map_err(|e| e.to_string())?;
        Ok(deleted == 1)
    }
}

/// A W2 worker of the plain recipe: a fresh token per hold, `SET NX PX` retried after [`RETRY`].
struct PlainWorker {
    recipe: PlainRecipe,
    key: String,
}

impl Contender for PlainWorker {
    type Held = String;

    fn acquire(&mut self) -> Result<String, String> {
        let token = OwnerToken::random().to_hex();
        loop {
            match self.recipe.set_nx_px(&self.key, &token, LEASE) {
                Ok(true) => return Ok(token),
                Ok(false) => std::thread::sleep(RETRY),
                // Counted by the loop, which asks again at once: not in a tight loop.
                Err(error) => {
                    std::thread::sleep(RETRY);
                    return Err(error);
                }
            }
        }
    }

    fn release(&mut self, token: String) -> Result<(), String> {
        if self.recipe.compare_and_delete(&self.key, &token)? {
            Ok(())
        } else {
            Err("the plain recipe's hold was gone at its release".into())
        }
    }
}

/// W2 with the plain recipe on the server at `url`: [`W2_WORKERS`] connections contending for
/// one key under `distlock-plain:` (deleted by its last release; one whose release failed lapses
/// after the workloads' 10 s lease), for `scale`'s W2 duration.
///
/// # Errors
/// A connection that cannot be opened.
pub fn run_contended(url: &str, scale: Scale) -> Result<W2Report, String> {
    let key = format!("distlock-plain:{}", unique_name("w2"));
    let workers = (0..W2_WORKERS)
        .map(|_| Ok(PlainWorker { recipe: PlainRecipe::connect(url)?, key: key.clone() }))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(w2_contenders(workers, scale.w2_duration))
}
