//! Renewal batches: the leases of one batch are extended in ONE pipeline per node, the
//! pipelines of several nodes (a cluster's primaries) at once, each read with one deadline.

use std::sync::Arc;
use std::thread;

use lock_core::{check_lease, Error, Extension, Result};
use redis::{RedisResult, ServerErrorKind, Value};

use super::{RedisBackend, RedisLease};
use crate::error::{self, error_chain, BACKEND};
use crate::millis;
use crate::topology::Node;

/// The leases of one batch that live on one node, by their index in the batch.
struct NodeBatch {
    node: Arc<Node>,
    items: Vec<usize>,
}

impl RedisBackend {
    /// Extends every lease of `batch`: one pipeline per node, sent to all nodes at once, so a
    /// batch costs one round trip (and, against a node that stopped answering, one read
    /// timeout) whatever its size and however many nodes it spans. A lease whose slot moved
    /// meanwhile (its reply is a redirect) is extended on its own, following the redirect.
    pub(super) fn extend_batch(&self, batch: &mut [Extension<'_, RedisLease>]) -> Vec<Result<bool>> {
        let mut outcomes: Vec<Option<Result<bool>>> =
            batch.iter().map(|item| check_lease(item.ttl).err().map(Err)).collect();
        let mut groups: Vec<NodeBatch> = Vec::new();
        for index in 0..batch.len() {
            if outcomes[index].is_some() {
                continue;
            }
            match self.inner.nodes.hop(&batch[index].lease.keys) {
                Ok(hop) => match groups.iter_mut().find(|group| Arc::ptr_eq(&group.node, &hop.node)) {
                    Some(group) => group.items.push(index),
                    None => groups.push(NodeBatch { node: hop.node, items: vec![index] }),
                },
                Err(error) => outcomes[index] = Some(Err(error)),
            }
        }
        let requests: Vec<Vec<u8>> =
            groups.iter().map(|group| self.extend_request(batch, &group.items)).collect();
        let replies: Vec<Result<Vec<Value>>> = match groups.as_slice() {
            [] => Vec::new(),
            [group] => vec![exchange(group, &requests[0])],
            _ => thread::scope(|scope| {
                let running: Vec<_> = groups
                    .iter()
                    .zip(&requests)
                    .map(|(group, request)| scope.spawn(move || exchange(group, request)))
                    .collect();
                running
                    .into_iter()
                    .map(|thread| {
                        thread.join().unwrap_or_else(|_| {
                            Err(Error::Backend {
                                backend: BACKEND,
                                source: "a renewal thread panicked".into(),
                            })
                        })
                    })
                    .collect()
            }),
        };
        for (group, replies) in groups.iter().zip(replies) {
            match replies {
                // The first reply is the script load's.
                Ok(values) => {
                    for (&index, value) in group.items.iter().zip(values.into_iter().skip(1)) {
                        let reply = redis::from_redis_value::<RedisResult<i64>>(value)
                            .unwrap_or_else(|e| Err(e.into()));
                        let item = &mut batch[index];
                        outcomes[index] = Some(match reply {
                            Ok(extended) => {
                                if extended == 1 {
                                    item.lease.confirmed(item.ttl);
                                }
                                Ok(extended == 1)
                            }
                            Err(e) if is_redirect(&e) => {
                                lock_core::DistributedLock::extend(self, item.lease, item.ttl)
                            }
                            Err(e) => Err(error::map("extend", e)),
                        });
                    }
                }
                Err(error) => {
                    if error.is_retryable() {
                        self.nodes().node_failed(&group.node);
                    }
                    // One failure for the node's part of the batch; each of its leases gets it
                    // (the error is not Clone, so each gets the same description and meaning).
                    for &index in &group.items {
                        outcomes[index] = Some(Err(same_error(&error)));
                    }
                }
            }
        }
        outcomes.into_iter().map(|outcome| outcome.unwrap_or_else(|| Ok(false))).collect()
    }

    /// `SCRIPT LOAD` of the extend script, then one `EVALSHA` per item: EVALSHA in a pipeline
    /// is not retried on NOSCRIPT (a restarted server, SCRIPT FLUSH), so the load goes first in
    /// the same round trip.
    fn extend_request(&self, batch: &[Extension<'_, RedisLease>], items: &[usize]) -> Vec<u8> {
        let scripts = self.scripts();
        let mut request = scripts.extend.load();
        for &index in items {
            let item = &batch[index];
            let mut command = scripts.extend.invoke(&[item.lease.keys.lock()]);
            request.extend(command.arg(&item.lease.token).arg(millis(item.ttl)).get_packed_command());
        }
        request
    }
}

/// Sends a node's part of a batch and reads its replies with one connect and one read timeout
/// (the trait's no-hang rule).
fn exchange(group: &NodeBatch, request: &[u8]) -> Result<Vec<Value>> {
    let mut connection = group.node.pool.get()?;
    connection.exchange(request, 1 + group.items.len()).map_err(|e| error::map("extend", e))
}

/// Whether a reply says the lease's keys are served elsewhere now, or not at this moment.
fn is_redirect(error: &redis::RedisError) -> bool {
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

/// A copy of `error` for another item of the same failed batch: same variant (so the same
/// meaning and `is_retryable`), with the original's message as the source.
fn same_error(error: &Error) -> Error {
    let source = || -> lock_core::BoxError { error_chain(error).into() };
    match error {
        Error::Connection { backend, .. } => Error::Connection { backend, source: source() },
        Error::Authentication { backend, .. } => Error::Authentication { backend, source: source() },
        Error::Timeout { backend, operation, .. } => {
            Error::Timeout { backend, operation, source: Some(source()) }
        }
        Error::InvalidConfig { reason } => Error::InvalidConfig { reason: reason.clone() },
        _ => Error::Backend { backend: BACKEND, source: source() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_error_is_copied_with_its_meaning() {
        let timeout = Error::Timeout { backend: BACKEND, operation: "extend", source: None };
        assert!(matches!(same_error(&timeout), Error::Timeout { operation: "extend", .. }));
        let refused = Error::Connection { backend: BACKEND, source: "refused".into() };
        let copy = same_error(&refused);
        assert!(copy.is_retryable());
        assert!(std::error::Error::source(&copy).unwrap().to_string().contains("refused"));
    }

    #[test]
    fn redirects_are_told_from_refusals() {
        let reply = |text: &[u8]| match redis::parse_redis_value(text).unwrap() {
            Value::ServerError(error) => redis::RedisError::from(error),
            other => panic!("{other:?}"),
        };
        assert!(is_redirect(&reply(b"-MOVED 3999 127.0.0.1:6381\r\n")));
        assert!(is_redirect(&reply(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n")));
        assert!(!is_redirect(&reply(b"-NOPERM no rights\r\n")));
    }
}
