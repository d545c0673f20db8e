//! A campaign on either database: the kind's own lock on the election's key, then the first
//! leader record ("taking office"), retried while time is left when only the record failed.

use std::time::Instant;

use lock_core::{check_lease, Acquired, Deadline, DistributedLock, OwnerToken, Request, Result};

use crate::lock_key::LockKey;

/// What a backend does for [`campaign`].
pub(crate) trait Office: DistributedLock {
    /// The connection a new leader writes its first record on, checked out before the wait:
    /// a win then never waits for a connection to be opened (a pool emptied by waiting
    /// candidates and closed terms would make every hand-off wait for one).
    type Writer;

    /// Checks out a [`Writer`](Self::Writer).
    fn writer(&self) -> Result<Self::Writer>;

    /// One attempt at `key`'s lock, as [`DistributedLock::try_acquire`].
    fn try_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
    ) -> Result<Option<Self::Lease>>;

    /// A wait for `key`'s lock, as [`NativeWait::acquire_until`](lock_core::NativeWait).
    fn wait_key(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: std::time::Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Acquired<Self::Lease>>>;

    /// After a win: what the kind needs to tell this term's hold, then the first record.
    fn take_office(&self, lease: &mut Self::Lease, value: &[u8], writer: Self::Writer) -> Result<()>;
}

/// [`Elections::campaign`](lock_core::Elections::campaign) on `backend`: a win whose record
/// cannot be written is given up, never handed out half made; when that failure is one a retry
/// may cure (a pool whose connections all wait in campaigns, a slow reply) and the deadline is
/// not past, the campaign goes on.
pub(crate) fn campaign<B: Office>(
    backend: &B,
    request: &Request<'_>,
    value: &[u8],
) -> Result<Option<Acquired<B::Lease>>> {
    check_lease(request.ttl)?;
    let key = LockKey::election(request.name);
    // A fresh token for every retry: the release of a term that could not take office may be
    // re-sent late (after a stall, `crate::undo`), and must never end a later term of this
    // campaign.
    let mut owner = *request.owner;
    loop {
        let writer = backend.writer()?;
        let acquired = match request.deadline {
            Deadline::Now => {
                let sent_at = Instant::now();
                backend.try_key(&key, &owner, request.ttl)?.map(|lease| Acquired::new(lease, sent_at))
            }
            deadline => backend.wait_key(&key, &owner, request.ttl, deadline.instant())?,
        };
        let Some(mut acquired) = acquired else { return Ok(None) };
        let error = match backend.take_office(&mut acquired.lease, value, writer) {
            Ok(()) => return Ok(Some(acquired)),
            Err(error) => error,
        };
        if let Err(release) = backend.release(acquired.lease) {
            tracing::debug!(error = %release, "giving up a leadership failed; it ends with its lease");
        }
        let time_left = match request.deadline {
            Deadline::Now => false,
            Deadline::At(at) => Instant::now() < at,
            Deadline::Never => true,
        };
        if !(error.is_retryable() && time_left) {
            return Err(error);
        }
        tracing::debug!(%error, "a new leader could not take office; campaigning again");
        owner = OwnerToken::random();
    }
}
