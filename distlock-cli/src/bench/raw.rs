//! The raw records of `distlock bench --raw-dir DIR`: every sample of a workload as JSON, in
//! `DIR/<kind>/<workload>_r<run>.json`, with the round trip it was compared with.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{RoundTrip, Workload};
use crate::kinds::Opened;

/// Writes one workload's record.
///
/// # Errors
/// When the directory or file cannot be written.
#[allow(clippy::too_many_arguments)] // One record's fields; a struct for them would be used once.
pub(super) fn write(
    dir: &Path,
    kind: &str,
    opened: &Opened,
    single_node_w1_p50: Option<Duration>,
    limit: Option<&str>,
    workload: Workload,
    run: usize,
    mut record: Value,
    round_trip: Option<RoundTrip>,
) -> Result<(), String> {
    let dir = dir.join(kind);
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    if let Value::Object(fields) = &mut record {
        fields.insert("backend".into(), opened.target.label().into());
        fields.insert("run".into(), run.into());
        fields.insert(
            "peer".into(),
            serde_json::json!({
                "measured": limit.unwrap_or("in-process (no server round trip)"),
                "single_node_w1_p50_ns": single_node_w1_p50.map(|p50| p50.as_nanos() as u64),
            }),
        );
        if let Some(rtt) = round_trip {
            for (key, value) in [("before", rtt.before), ("after", rtt.after), ("mean", rtt.mean())] {
                fields.insert(format!("round_trip_{key}_ns"), (value.as_nanos() as u64).into());
            }
        }
    }
    let name = format!("{}_r{run}.json", format!("{workload:?}").to_lowercase());
    let path = dir.join(name);
    fs::write(&path, record.to_string()).map_err(|e| format!("write {}: {e}", path.display()))
}
