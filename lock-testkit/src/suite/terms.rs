//! LE01's terms of office: candidates of one client campaign in turns, and while leading each
//! leaves a file in a directory every candidate of every process shares, and counts the files
//! there — two files at once are two leaders at once.

use std::path::Path;
use std::thread;
use std::time::Duration;

use lock_core::{DistributedLock, Election, LockClient, LockName};

use crate::suite::support::ACQUIRE_BOUND;
use crate::suite::Failure;

/// What the candidates of one process saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Samples that found another leader's file beside this one's, or this leadership not
    /// leading although nobody took it.
    pub(crate) overlaps: usize,
    /// Terms served.
    pub(crate) served: usize,
}

/// `candidates` threads of `client` each serve `terms` terms of the election `name`: campaign,
/// mark, sample, resign (or drop the leadership: at random, as leaders leave either way).
pub(crate) fn serve_terms<B: DistributedLock>(
    client: &LockClient<B>,
    name: &LockName,
    (candidates, terms): (usize, usize),
    dir: &Path,
) -> Result<Terms, Failure> {
    let pid = std::process::id();
    thread::scope(|s| {
        let workers: Vec<_> = (0..candidates)
            .map(|index| {
                let election = Election::new(client, name.clone()).with_value(format!("{pid}-{index}"));
                s.spawn(move || -> Result<Terms, Failure> {
                    let marker = dir.join(format!("leader-{pid}-{index}"));
                    let mut seen = Terms { overlaps: 0, served: 0 };
                    for _ in 0..terms {
                        let leadership = election
                            .campaign_for(ACQUIRE_BOUND)?
                            .ok_or_else(|| Failure(format!("no term of {name} within {ACQUIRE_BOUND:?}")))?;
                        std::fs::write(&marker, b"")
                            .map_err(|e| Failure(format!("cannot mark a leader: {e}")))?;
                        // A few samples over a random part of the term.
                        for _ in 0..=rand::random_range(0..3u32) {
                            let leaders = std::fs::read_dir(dir).map_err(|e| Failure(e.to_string()))?.count();
                            if leaders > 1 || !leadership.is_leader() {
                                seen.overlaps += 1;
                            }
                            thread::sleep(Duration::from_millis(1));
                        }
                        std::fs::remove_file(&marker).map_err(|e| Failure(format!("cannot unmark: {e}")))?;
                        if rand::random::<bool>() {
                            leadership.resign()?;
                        } else {
                            drop(leadership);
                        }
                        seen.served += 1;
                    }
                    Ok(seen)
                })
            })
            .collect();
        workers.into_iter().try_fold(Terms { overlaps: 0, served: 0 }, |total, worker| {
            let seen = worker.join().map_err(|_| Failure("a candidate panicked".into()))??;
            Ok(Terms { overlaps: total.overlaps + seen.overlaps, served: total.served + seen.served })
        })
    })
}
