//! `distlock compare` end to end, as a user runs it: the in-memory and the Redis single-node
//! kinds on throwaway harness servers (started by the command itself). The JSON report must have
//! every cell, the Redis broken recipes caught, and the HTML page must render in headless
//! Chromium.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Names a Chromium (or Chrome) binary instead of Debian's `/usr/bin/chromium`.
const CHROMIUM_VARIABLE: &str = "DISTLOCK_CHROMIUM";

#[test]
fn compare_quick_writes_a_complete_report_that_renders() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_distlock"))
        // Two scenarios at a time, as `cargo test` on two cores: timing bounds (S03, S11, S15)
        // must hold while the rest of the test run goes on beside this one.
        .args(["compare", "--quick", "--jobs", "2", "--backends", "memory,redis", "--out"])
        .arg(out.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "distlock compare failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("S01 mutual exclusion under contention"), "{stdout}");
    assert!(stdout.contains("caught by S06"), "{stdout}");
    assert!(stdout.contains("R03 failover before replication; WAIT"), "{stdout}");

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["mode"], "quick");
    let ids: Vec<&str> =
        report["scenarios"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), lock_testkit::suite::SCENARIOS.len());
    assert!(ids.contains(&"ML01"), "{ids:?}");
    let kinds = report["kinds"].as_array().unwrap();
    let names: Vec<&str> = kinds.iter().map(|kind| kind["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["memory", "redis"]);
    for kind in kinds {
        let cells = kind["cells"].as_array().unwrap();
        let cell_ids: Vec<&str> = cells.iter().map(|cell| cell["scenario"].as_str().unwrap()).collect();
        assert_eq!(cell_ids, ids, "{}: every scenario has a cell, in order", kind["name"]);
        for cell in cells {
            let status = cell["status"].as_str().unwrap();
            assert!(status == "pass" || status == "not_applicable", "{}: {cell}", kind["name"]);
            if status == "not_applicable" {
                assert!(
                    cell["detail"].as_str().is_some_and(|reason| !reason.is_empty()),
                    "n/a without a reason"
                );
            }
        }
        let performance = &kind["performance"];
        assert!(performance["w1"]["pairs_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(performance["w2"]["lost_updates"], 0);
        assert_eq!(performance["w2"]["overlaps"], 0);
        assert!(performance["w3"]["pairs_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(kind["properties"]["hold"], "lease");
    }
    let redis = &kinds[1];
    assert!(
        redis["performance"]["round_trip_ns"].as_u64().unwrap() > 0,
        "Redis is compared with its round trip"
    );
    assert_eq!(redis["performance"]["round_trip_beside"], "W1", "the round trip is timed beside W1's pairs");
    let ratio = redis["performance"]["w1"]["ratio_to_limit"].as_f64();
    assert!(ratio.is_some_and(|ratio| ratio > 0.0 && ratio <= 1.0), "PING bounds a pair: {ratio:?}");
    assert!(redis["performance"]["w2"]["handoff_ratio_to_rtt"].as_f64().unwrap() > 0.0);
    assert!(redis["properties"]["fencing"].as_str().unwrap().contains("INCR"));
    let recipes: Vec<(&str, bool)> = redis["recipes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|recipe| (recipe["id"].as_str().unwrap(), recipe["caught"].as_bool().unwrap()))
        .collect();
    assert_eq!(recipes, [("N01", true), ("N02", true), ("N03", true), ("N04", true), ("N07", true)]);
    let own: Vec<(&str, &str)> = redis["backend_scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cell| (cell["scenario"].as_str().unwrap(), cell["status"].as_str().unwrap()))
        .collect();
    assert_eq!(own, [("R03", "pass")], "Redis's own scenario under its kind");

    let markdown = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(markdown.contains("| S06 owner-safe release | pass | pass |"), "{markdown}");
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 2, "two charts");
    assert!(
        !html.contains("<script") && !html.contains("src=\"http") && !html.contains("href=\"http"),
        "self-contained"
    );

    // Rendered by a real browser: a screenshot of the page, of a size only a drawn page has.
    let screenshot = out.path().join("report.png");
    render(&out.path().join("report.html"), &screenshot);
    let size = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 30_000, "the screenshot has {size} bytes: the page did not render");
}

/// Takes a headless Chromium screenshot of `page` into `png`.
fn render(page: &Path, png: &Path) {
    let chromium =
        std::env::var_os(CHROMIUM_VARIABLE).map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        chromium.exists(),
        "{} is missing: install Debian's chromium (cargo xtask test does), or set {CHROMIUM_VARIABLE}",
        chromium.display()
    );
    let profile = tempfile::tempdir().unwrap();
    let status = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "chromium failed: {status}");
}

#[test]
fn on_your_own_servers_names_are_namespaced_and_cleaned_up() {
    use lock_testkit::harness::shared;
    let redis = shared::redis().unwrap().address().to_owned();
    let postgres = shared::postgres().unwrap().address().to_owned();
    let mysql = shared::mariadb().unwrap().address().to_owned();
    let run = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args(["compare", "--jobs", "2", "--backends", "redis,pg-table,mysql-row", "--only", "s01,s02,s09"])
        .args(["--redis", &redis, "--postgres", &postgres, "--mysql", &mysql])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&run.stdout));
    // S09 leaves fencing counters (Redis) and rows (SQL): something was there to delete.
    for kind in ["redis", "pg-table", "mysql-row"] {
        let deleted = stderr
            .lines()
            .find_map(|line| {
                line.strip_prefix(&format!("{kind}: deleted "))?.split(' ').next()?.parse::<u64>().ok()
            })
            .unwrap_or_else(|| panic!("no clean-up reported for {kind}: {stderr}"));
        assert!(deleted > 0, "{kind}: {stderr}");
    }
    let mut connection =
        distlock::redis::testkit::RedisTarget::at(distlock::redis::RedisLockKind::SetNx, redis)
            .probe()
            .unwrap();
    let left: Vec<String> =
        distlock::redis::redis::cmd("KEYS").arg("*distlock-compare:*").query(&mut connection).unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}
