//! Moving one hash slot between primaries by hand, in the steps `redis-cli --cluster reshard`
//! takes, so a test can act while the slot is half moved (clients then get `ASK` redirects,
//! and `TRYAGAIN` for multi-key commands over keys on both sides).

use std::time::Duration;

use super::topology::SLOTS;
use super::RedisCluster;
use crate::harness::resp::{self, Connection, Reply};
use crate::harness::HarnessError;

/// How many keys one `MIGRATE` moves.
const BATCH: usize = 100;

/// `MIGRATE`'s own timeout, in ms, for its connection to the target.
const MIGRATE_TIMEOUT_MS: u32 = 5000;

/// How long the harness waits for a `MIGRATE` reply: its own timeout plus slack.
const MIGRATE_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long every node may take to learn a slot's new owner after the move.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// A slot on its way from one primary to another, from
/// [`RedisCluster::begin_slot_migration`]: the target imports it, the source migrates it.
/// Until [`RedisCluster::finish_slot_migration`], the source answers requests for keys it no
/// longer has with `ASK <slot> 127.0.0.1:<target>`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotMigration {
    /// The slot.
    pub slot: u16,
    /// The port of the primary that served the slot.
    pub source: u16,
    /// The port of the primary that takes the slot over.
    pub target: u16,
    source_id: String,
    target_id: String,
}

impl RedisCluster {
    /// Moves `slot` with its keys to the primary on `to_port`:
    /// [`begin_slot_migration`](Self::begin_slot_migration), then
    /// [`move_slot_keys`](Self::move_slot_keys) until none is left, then
    /// [`finish_slot_migration`](Self::finish_slot_migration).
    ///
    /// # Errors
    ///
    /// As for those three.
    pub fn migrate_slot(&self, slot: u16, to_port: u16) -> Result<(), HarnessError> {
        let migration = self.begin_slot_migration(slot, to_port)?;
        self.move_slot_keys(&migration, usize::MAX)?;
        self.finish_slot_migration(&migration)
    }

    /// Opens the move of `slot` to the primary on `to_port`: `CLUSTER SETSLOT <slot>
    /// IMPORTING <source-id>` on the target, then `CLUSTER SETSLOT <slot> MIGRATING
    /// <target-id>` on the slot's current primary. No key moves yet.
    ///
    /// # Errors
    ///
    /// [`HarnessError::UnexpectedState`] if `slot` is out of range, or `to_port` is not a
    /// primary of this cluster other than the slot's; [`HarnessError::Request`] if a node
    /// refuses or does not answer.
    pub fn begin_slot_migration(&self, slot: u16, to_port: u16) -> Result<SlotMigration, HarnessError> {
        let unexpected = |detail: String| HarnessError::UnexpectedState { detail };
        if slot >= SLOTS {
            return Err(unexpected(format!("slot {slot} is past the last slot, {}", SLOTS - 1)));
        }
        let topology = self.topology()?;
        let source =
            topology.owner(slot).ok_or_else(|| unexpected(format!("no primary serves slot {slot}")))?;
        if source == to_port {
            return Err(unexpected(format!("slot {slot} is already on {to_port}")));
        }
        let id = |port: u16| {
            topology.primary_id(port).map(str::to_owned).ok_or_else(|| {
                unexpected(format!("the node on port {port} is no primary of this Redis Cluster"))
            })
        };
        let migration =
            SlotMigration { slot, source, target: to_port, source_id: id(source)?, target_id: id(to_port)? };
        let slot = slot.to_string();
        // The target first: once the source migrates, its ASK redirects must find the target ready.
        setslot(to_port, &slot, "IMPORTING", &migration.source_id)?;
        setslot(source, &slot, "MIGRATING", &migration.target_id)?;
        Ok(migration)
    }

    /// Moves up to `limit` of the slot's keys from the source to the target (`CLUSTER
    /// GETKEYSINSLOT`, then `MIGRATE … KEYS`, 100 at a time); returns how many moved. With a
    /// small `limit` the slot's keys end up on both sides.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Request`] if the source refuses or does not answer.
    pub fn move_slot_keys(&self, migration: &SlotMigration, limit: usize) -> Result<usize, HarnessError> {
        let (source, target) = (migration.source, migration.target.to_string());
        let mut moved = 0;
        while moved < limit {
            let batch = (limit - moved).min(BATCH).to_string();
            let listing = ["CLUSTER", "GETKEYSINSLOT", &migration.slot.to_string(), &batch];
            let keys = resp::command(source, &listing)?
                .into_array()
                .and_then(|keys| keys.into_iter().map(key_bytes).collect::<Result<Vec<_>, _>>())
                .map_err(|reason| resp::failed(source, &listing, reason))?;
            if keys.is_empty() {
                break;
            }
            let timeout = MIGRATE_TIMEOUT_MS.to_string();
            let mut request: Vec<&[u8]> =
                vec![b"MIGRATE", b"127.0.0.1", target.as_bytes(), b"", b"0", timeout.as_bytes(), b"KEYS"];
            request.extend(keys.iter().map(Vec::as_slice));
            let shown = ["MIGRATE", "127.0.0.1", &target, "\"\"", "0", &timeout, "KEYS", "…"];
            Connection::open(source, MIGRATE_REPLY_TIMEOUT)
                .and_then(|mut connection| connection.request(&request))
                // NOKEY: the keys expired meanwhile.
                .and_then(|reply| reply.expect_simple(&["NOKEY"]))
                .map_err(|reason| resp::failed(source, &shown, reason))?;
            moved += keys.len();
        }
        Ok(moved)
    }

    /// Hands the slot to the target: `CLUSTER SETSLOT <slot> NODE <target-id>` on the target,
    /// the source and every other running primary; then waits until every running node says
    /// the target serves it.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Request`] if a node refuses (the source does while it still holds keys
    /// of the slot) or does not answer; [`HarnessError::NotConverged`] if the nodes do not all
    /// learn the new owner within 10 s.
    pub fn finish_slot_migration(&self, migration: &SlotMigration) -> Result<(), HarnessError> {
        let others: Vec<u16> = self
            .primaries()?
            .iter()
            .map(|primary| primary.port)
            .filter(|port| ![migration.source, migration.target].contains(port))
            .filter(|port| self.live_nodes().any(|node| node.port() == *port))
            .collect();
        let slot = migration.slot.to_string();
        for port in [migration.target, migration.source].into_iter().chain(others) {
            setslot(port, &slot, "NODE", &migration.target_id)?;
        }
        let goal = format!("every node sees slot {slot} on {}", migration.target);
        self.wait_for(&goal, SETTLE_TIMEOUT, |reports| {
            for report in reports {
                let view = report
                    .view
                    .as_ref()
                    .map_err(|why| format!("node {} does not answer: {why}", report.port))?;
                let owner = view.topology.owner(migration.slot);
                if owner != Some(migration.target) {
                    return Err(format!("node {} sees slot {slot} on {owner:?}", report.port));
                }
            }
            Ok(())
        })
    }
}

/// `CLUSTER SETSLOT <slot> <state> <node-id>` on `port`.
fn setslot(port: u16, slot: &str, state: &str, node_id: &str) -> Result<(), HarnessError> {
    let request = ["CLUSTER", "SETSLOT", slot, state, node_id];
    resp::command(port, &request)?.expect_simple(&[]).map_err(|reason| resp::failed(port, &request, reason))
}

fn key_bytes(reply: Reply) -> Result<Vec<u8>, String> {
    match reply {
        Reply::Bulk(key) => Ok(key),
        other => Err(format!("expected a key, got {other:?}")),
    }
}
