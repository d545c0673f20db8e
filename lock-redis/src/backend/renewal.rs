//! Renewal batches: the leases of one batch are extended in ONE pipeline per node, the
//! pipelines of several nodes (a cluster's primaries) at once, each read with one deadline.

use std::sync::Arc;
use std::thread;

use lock_core::{check_lease, DistributedLock as _, DoubtMark, Error, Extension, Result};
use redis::{RedisResult, ServerErrorKind, Value};

use super::{RedisBackend, RedisLease};
use crate::error::{self, detached, BACKEND};
use crate::lua::LuaScript;
use crate::topology::Node;

/// The leases of one batch that live on one node, by their index in the batch.
struct NodeBatch {
    node: Arc<Node>,
    items: Vec<usize>,
}

impl RedisBackend {
    /// Extends every lease of `batch`: one pipeline per node, sent to all nodes at once, so a
    /// batch costs one round trip (and, against a node that stopped answering, one read
    /// timeout) whatever its size and however many nodes it spans.
    ///
    /// A lease whose slot moved (`MOVED`: the map is corrected from the reply) goes out again
    /// in a second round of pipelines, with the others that moved; a lease whose slot is
    /// migrating and whose keys moved already (`ASK`) is extended on its own on the importing
    /// node — one request per lease of a migrating slot; a lease whose keys the migration split
    /// or whose primary is failing over (`TRYAGAIN`, `CLUSTERDOWN`, `READONLY`) gets a retryable
    /// error: the renewal thread tries it again soon, and its lease stays valid meanwhile. So a
    /// batch costs two rounds at most, plus one request per lease of a migrating slot.
    pub(super) fn extend_batch(&self, batch: &mut [Extension<'_, RedisLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| check_lease(item.ttl).err().map(Err)).collect();
        let mut pending: Vec<usize> = (0..batch.len()).filter(|&index| outcomes[index].is_none()).collect();
        let mut asked = Vec::new();
        for round in 0..2 {
            if pending.is_empty() {
                break;
            }
            let moved = self.extend_round(batch, &pending, &mut outcomes, round == 0, &mut asked);
            pending = moved;
        }
        // Leases of a slot being migrated whose keys moved already: one each, after `ASKING`,
        // on the importing node (`routed`), so no lease runs out however long the migration.
        // Once one of them gets no answer, the rest fail at once (retryable: the renewal thread
        // tries again soon): k leases against a silent importing node cost one timeout, not k.
        let mut silent = false;
        for index in asked {
            let item = &mut batch[index];
            outcomes[index] = Some(if silent {
                Err(Error::Timeout {
                    backend: BACKEND,
                    operation: "extend",
                    source: Some("the importing node did not answer an earlier lease of the batch".into()),
                })
            } else {
                let outcome = self.extend(item.lease, item.ttl);
                silent = matches!(outcome, Err(Error::Timeout { .. }));
                outcome
            });
        }
        outcomes.into_iter().map(|outcome| outcome.unwrap_or_else(|| Ok(false))).collect()
    }

    /// One round of [`extend_batch`](Self::extend_batch) over the items `pending`; returns the
    /// items whose slot moved, when `may_retry` (else they get a retryable error), and adds to
    /// `asked` those the node sent elsewhere with `ASK` (their keys migrated already).
    fn extend_round(
        &self,
        batch: &mut [Extension<'_, RedisLease>],
        pending: &[usize],
        outcomes: &mut [Option<Result<bool>>],
        may_retry: bool,
        asked: &mut Vec<usize>,
    ) -> Vec<usize> {
        let mut groups: Vec<NodeBatch> = Vec::new();
        for &index in pending {
            match self.inner.nodes.hop(&batch[index].lease.keys) {
                Ok(hop) => match groups.iter_mut().find(|group| Arc::ptr_eq(&group.node, &hop.node)) {
                    Some(group) => group.items.push(index),
                    None => groups.push(NodeBatch { node: hop.node, items: vec![index] }),
                },
                Err(error) => outcomes[index] = Some(Err(error)),
            }
        }
        let marks: Vec<Option<DoubtMark>> = batch.iter().map(|item| item.lease.doubt_mark()).collect();
        let (requests, loads): (Vec<Vec<u8>>, Vec<usize>) =
            groups.iter().map(|group| self.extend_request(batch, &group.items)).unzip();
        let replies = exchange_all(&groups, &requests, &loads);
        let mut moved = Vec::new();
        for ((group, replies), loads) in groups.iter().zip(replies).zip(loads) {
            match replies {
                // The first replies are the script loads'.
                Ok(values) => {
                    for (&index, value) in group.items.iter().zip(values.into_iter().skip(loads)) {
                        let reply = redis::from_redis_value::<RedisResult<i64>>(value)
                            .unwrap_or_else(|e| Err(e.into()));
                        let item = &mut batch[index];
                        outcomes[index] = Some(match reply {
                            Ok(1) => {
                                item.lease.confirmed(
                                    item.ttl,
                                    marks[index],
                                    &group.node,
                                    &self.inner.heartbeat,
                                );
                                Ok(true)
                            }
                            Ok(_) => Ok(false),
                            Err(e) if may_retry && self.follow_move(&e) => {
                                moved.push(index);
                                continue;
                            }
                            Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::Ask) => {
                                asked.push(index);
                                continue;
                            }
                            Err(e) if is_elsewhere_or_unavailable(&e) => Err(not_renewed_here(&e)),
                            Err(e) => Err(error::map("extend", e)),
                        });
                    }
                }
                Err(error) => {
                    if error.is_retryable() {
                        self.nodes().node_failed(&group.node);
                        for &index in &group.items {
                            batch[index].lease.unconfirmed();
                        }
                    }
                    // One failure for the node's part of the batch; each of its leases gets it
                    // (the error is not Clone, so each gets the same description and meaning).
                    for &index in &group.items {
                        outcomes[index] = Some(Err(detached(&error)));
                    }
                }
            }
        }
        moved
    }

    /// Takes a `MOVED` reply into the slot map; whether it was one.
    fn follow_move(&self, error: &redis::RedisError) -> bool {
        match (self.nodes().cluster(), error.kind(), error.redirect_node()) {
            (Some(cluster), redis::ErrorKind::Server(ServerErrorKind::Moved), Some((address, slot))) => {
                cluster.moved(slot, address);
                true
            }
            _ => false,
        }
    }

    /// `SCRIPT LOAD` of each extend script the items need (the mutex's; a read-write lock's or
    /// a semaphore's), then one `EVALSHA` per item: EVALSHA in a pipeline is not retried on
    /// NOSCRIPT (a restarted server, SCRIPT FLUSH), so the loads go first in the same round
    /// trip. Returns the request and how many loads lead it.
    fn extend_request(&self, batch: &[Extension<'_, RedisLease>], items: &[usize]) -> (Vec<u8>, usize) {
        let commands: Vec<_> =
            items.iter().map(|&index| self.extend_command(batch[index].lease, batch[index].ttl)).collect();
        let mut loaded: Vec<&LuaScript> = Vec::new();
        for (script, _) in &commands {
            if !loaded.iter().any(|seen| std::ptr::eq(*seen, *script)) {
                loaded.push(script);
            }
        }
        let mut request: Vec<u8> = loaded.iter().flat_map(|script| script.load()).collect();
        for (_, command) in &commands {
            request.extend(command.get_packed_command());
        }
        (request, loaded.len())
    }
}

/// Sends every node's part of a round at once (a thread per node beyond the first), each read
/// with one connect and one read timeout (the trait's no-hang rule).
fn exchange_all(groups: &[NodeBatch], requests: &[Vec<u8>], loads: &[usize]) -> Vec<Result<Vec<Value>>> {
    let sends: Vec<_> = groups
        .iter()
        .zip(requests)
        .zip(loads)
        .map(|((group, request), &loads)| (group, request, loads))
        .collect();
    if sends.len() <= 1 {
        return sends.into_iter().map(|(group, request, loads)| exchange(group, request, loads)).collect();
    }
    thread::scope(|scope| {
        let running: Vec<_> = sends
            .into_iter()
            .map(|(group, request, loads)| {
                // No thread to be had: that node's part is sent here, in turn.
                thread::Builder::new()
                    .name(RENEWAL_THREAD_NAME.into())
                    .spawn_scoped(scope, move || exchange(group, request, loads))
                    .map_err(|_| (group, request, loads))
            })
            .collect();
        running
            .into_iter()
            .map(|running| match running {
                Ok(thread) => thread.join().unwrap_or_else(|_| {
                    Err(Error::Backend { backend: BACKEND, source: "a renewal thread panicked".into() })
                }),
                Err((group, request, loads)) => exchange(group, request, loads),
            })
            .collect()
    })
}

/// The name of the threads that send a batch's pipelines to the second and later primaries.
const RENEWAL_THREAD_NAME: &str = "distlock-rrenew";

/// Sends a node's part of a batch (`loads` script loads, then one request per item) and reads
/// its replies with one connect and one read timeout (the trait's no-hang rule).
fn exchange(group: &NodeBatch, request: &[u8], loads: usize) -> Result<Vec<Value>> {
    let mut connection = group.node.pool.get()?;
    connection.exchange(request, loads + group.items.len()).map_err(|e| error::map("extend", e))
}

/// A lease not renewed because its node answered that its keys are elsewhere or unavailable
/// for now: a retryable error (the renewal thread tries again soon; the lease stays valid).
fn not_renewed_here(error: &redis::RedisError) -> Error {
    Error::Connection { backend: BACKEND, source: format!("not renewed this round: {error}").into() }
}

/// Whether a reply says the lease's keys are served elsewhere now, or not at this moment.
fn is_elsewhere_or_unavailable(error: &redis::RedisError) -> bool {
    matches!(
        error.kind(),
        redis::ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::ReadOnly
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_error_is_copied_with_its_meaning() {
        let timeout = Error::Timeout { backend: BACKEND, operation: "extend", source: None };
        assert!(matches!(detached(&timeout), Error::Timeout { operation: "extend", .. }));
        let refused = Error::Connection { backend: BACKEND, source: "refused".into() };
        let copy = detached(&refused);
        assert!(copy.is_retryable());
        assert!(std::error::Error::source(&copy).unwrap().to_string().contains("refused"));
    }

    #[test]
    fn redirects_are_told_from_refusals() {
        let reply = |text: &[u8]| match redis::parse_redis_value(text).unwrap() {
            Value::ServerError(error) => redis::RedisError::from(error),
            other => panic!("{other:?}"),
        };
        assert!(is_elsewhere_or_unavailable(&reply(b"-MOVED 3999 127.0.0.1:6381\r\n")));
        assert!(is_elsewhere_or_unavailable(&reply(
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
        )));
        assert!(!is_elsewhere_or_unavailable(&reply(b"-NOPERM no rights\r\n")));
    }
}
