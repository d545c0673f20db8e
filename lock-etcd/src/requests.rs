//! The unary requests of the recipes, from blocking threads: each bounded by a deadline and
//! sent again while it fails unsent.
//!
//! etcd-client puts every endpoint behind one tonic channel, which picks a member per request
//! and, when that member refuses the connection, fails the request ("tcp connect error")
//! instead of trying another: with one member of three down, about a request in three would
//! fail. A request that never left is sent again (after [`UNSENT_PAUSE`]), which picks a member
//! anew — what Go's client does for requests that did not reach a server.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_client::{Error as EtcdError, GetOptions, GetResponse, Txn, TxnResponse};

use crate::error::{is_unsent, Failure};
use crate::session::Session;

/// How long a request that never left waits before it is sent again.
const UNSENT_PAUSE: Duration = Duration::from_millis(25);

/// Runs the request `make` makes, again while it fails unsent and `deadline` leaves time for
/// another try; the last outcome otherwise.
pub(crate) async fn retry_unsent<T, Fut>(
    deadline: Instant,
    mut make: impl FnMut() -> Fut,
) -> Result<T, EtcdError>
where
    Fut: Future<Output = Result<T, EtcdError>>,
{
    loop {
        let outcome = make().await;
        match &outcome {
            Err(error) if is_unsent(error) && Instant::now() + UNSENT_PAUSE < deadline => {
                tokio::time::sleep(UNSENT_PAUSE).await;
            }
            _ => return outcome,
        }
    }
}

impl Session {
    /// `txn`, by `deadline`.
    pub(crate) fn txn(&self, deadline: Instant, txn: Txn) -> Result<TxnResponse, Failure> {
        self.call_until(deadline, self.txn_request(deadline, txn))
    }

    /// `txn` as a future of the runtime (to run beside another), sent again while unsent.
    pub(crate) fn txn_request(
        &self,
        deadline: Instant,
        txn: Txn,
    ) -> impl Future<Output = Result<TxnResponse, EtcdError>> + Send + 'static {
        let kv = self.client().kv_client();
        retry_unsent(deadline, move || {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
    }

    /// A range read of `key`, by `deadline`.
    pub(crate) fn get(
        &self,
        deadline: Instant,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, Failure> {
        let (kv, key) = (self.client().kv_client(), key.into());
        self.call_until(
            deadline,
            retry_unsent(deadline, || {
                let (mut kv, key, options) = (kv.clone(), key.clone(), options.clone());
                async move { kv.get(key, options).await }
            }),
        )
    }

    /// Revokes the lease `id` (its keys go with it), by `deadline`.
    pub(crate) fn revoke(&self, deadline: Instant, id: i64) -> Result<(), Failure> {
        let leases = self.client().lease_client();
        let revoked = retry_unsent(deadline, || {
            let mut leases = leases.clone();
            async move { leases.revoke(id).await }
        });
        self.call_until(deadline, revoked).map(drop)
    }
}
