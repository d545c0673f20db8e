//! distlock's `tracing` spans: `acquire`, `release` and `renew` under the target `distlock`,
//! with backend, kind, name, mode, outcome, wait and fencing token — and with `redact_names`,
//! no name.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use distlock::{LockClient, LockOptions, MemoryBackend};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Everything the subscriber writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// What the `distlock` spans and lock-core's events of `work` print (spans when they close).
/// The subscriber is process-wide, since renewals run on distlock's own threads: each test's
/// lines are told apart by its lock name.
fn spans_of(work: impl FnOnce()) -> String {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    let captured = CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        tracing_subscriber::fmt()
            .with_env_filter("distlock=debug,lock_core=debug")
            .with_span_events(FmtSpan::CLOSE)
            .with_ansi(false)
            .with_writer(captured.clone())
            .finish()
            .init();
        captured
    });
    work();
    // The renewal thread's last span closes just after the work.
    std::thread::sleep(Duration::from_millis(50));
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    text
}

fn client(redact: bool) -> LockClient<MemoryBackend> {
    let options =
        LockOptions::builder().lease(Duration::from_millis(300)).redact_names(redact).build().unwrap();
    LockClient::with_options(MemoryBackend::new(), options)
}

#[test]
fn acquire_release_and_renew_spans_carry_their_fields() {
    let output = spans_of(|| {
        let client = client(false);
        let lock = client.lock_named("invoices:2026-11").unwrap();
        let guard = lock.lock().unwrap();
        // Renewed every 100 ms.
        std::thread::sleep(Duration::from_millis(250));
        assert!(lock.try_lock().unwrap().is_some(), "reentrant");
        guard.unlock().unwrap();
    });
    let line = |span: &str| {
        output
            .lines()
            .find(|line| {
                line.contains(&format!("{span}{{"))
                    && line.contains("close")
                    // Renew spans carry no name; the other test's renewals find their lock gone.
                    && (if span == "renew" { line.contains("confirmed=1") } else { line.contains("invoices:2026-11") })
            })
            .unwrap_or_else(|| panic!("no closed {span} span in:\n{output}"))
    };
    let acquire = line("acquire");
    for field in [
        "backend=\"memory\"",
        "kind=\"memory\"",
        "name=invoices:2026-11",
        "mode=\"mutex\"",
        "outcome=\"acquired\"",
        "wait_ms=",
        "token=",
    ] {
        assert!(acquire.contains(field), "{field} missing from {acquire}");
    }
    let release = line("release");
    for field in ["name=invoices:2026-11", "outcome=\"released\"", "token="] {
        assert!(release.contains(field), "{field} missing from {release}");
    }
    let renew = line("renew");
    for field in ["leases=1", "lost=0", "failed=0"] {
        assert!(renew.contains(field), "{field} missing from {renew}");
    }
    let acquisitions =
        output.lines().filter(|line| line.contains("acquire{") && line.contains("invoices:2026-11"));
    assert_eq!(acquisitions.count(), 1, "a re-entry asks no server:\n{output}");
}

#[test]
fn redacted_names_never_reach_spans_or_events() {
    let output = spans_of(|| {
        let client = client(true);
        let backend = client.backend().clone();
        let lock = client.lock_named("customer:alice@example.com").unwrap();
        let guard = lock.lock().unwrap();
        backend.force_release(lock.name());
        assert!(guard.lost_signal().wait_timeout(Duration::from_secs(2)));
        // Dropped, not unlocked: the failed release is logged with its error, which names the
        // lock.
        drop(guard);
    });
    assert!(!output.contains("alice"), "the name leaked:\n{output}");
    assert!(output.contains("name=#"), "a hash stands for the name:\n{output}");
    assert!(output.contains("distributed lock lost"), "the loss is logged:\n{output}");
    assert!(
        output.contains("releasing a dropped lock guard failed"),
        "the failed release is logged:\n{output}"
    );
}
