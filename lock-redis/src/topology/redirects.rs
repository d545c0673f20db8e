//! The redirect loop: a request goes to the node that serves its keys and follows what the
//! deployment answers — `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY` (see
//! [`Nodes::after_failure`]) — within one I/O timeout and the caller's deadline.

use std::thread;
use std::time::{Duration, Instant};

use lock_core::Result;

use super::{Hop, Next, Nodes};
use crate::keys::RedisKeys;

/// The pause before the second retry of a redirected request.
const FIRST_REDIRECT_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between retries of a redirected request: a cluster failover takes about a
/// second, a Sentinel failover a few.
const MAX_REDIRECT_PAUSE: Duration = Duration::from_millis(200);

impl Nodes {
    /// Runs `request` against the node serving `keys`, following what the deployment answers
    /// for `io_timeout` and until `until`: no retry starts after either (one already under way
    /// runs to its own connect and I/O timeouts). The first redirect is followed at once; later
    /// ones after a pause that doubles up to [`MAX_REDIRECT_PAUSE`].
    pub(crate) fn routed_until<T>(
        &self,
        keys: &RedisKeys,
        io_timeout: Duration,
        until: Option<Instant>,
        mut request: impl FnMut(&Hop) -> Result<T>,
    ) -> Result<T> {
        let io_deadline = Instant::now() + io_timeout;
        let deadline = until.map_or(io_deadline, |until| until.min(io_deadline));
        let mut pause = FIRST_REDIRECT_PAUSE;
        let mut retries = 0_u32;
        let mut hop = self.hop(keys)?;
        loop {
            let failure = match request(&hop) {
                Err(failure) => failure,
                done => return done,
            };
            let Next::Retry { pause: wait, ask } = self.after_failure(&hop, &failure, pause) else {
                return Err(failure);
            };
            // Only the first retry may go at once: two redirects in a row mean the deployment
            // is changing, and a burst of requests would not help it.
            let wait = if retries == 0 { wait } else { Some(wait.unwrap_or(pause)) };
            if Instant::now() + wait.unwrap_or_default() >= deadline {
                return Err(failure);
            }
            if let Some(wait) = wait {
                thread::sleep(wait);
                pause = (pause * 2).min(MAX_REDIRECT_PAUSE);
            }
            retries += 1;
            hop = match ask {
                Some(node) => Nodes::asking(node),
                None => self.hop(keys)?,
            };
        }
    }
}
