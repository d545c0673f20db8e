//! Live progress of `distlock compare` on stderr: a bar with the running step and the elapsed
//! time on a terminal (indicatif), one plain line per finished step otherwise (logs, CI).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Where progress goes.
pub struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
}

impl Progress {
    /// Progress over `steps` steps: a bar if stderr is a terminal, plain lines otherwise.
    pub fn new(steps: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(steps as u64);
            let style = ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self { bar, started: Instant::now() }
    }

    /// A step starts (shown on the bar).
    pub fn start(&self, step: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(step.to_owned());
        }
    }

    /// A step that is not counted (starting servers) is under way.
    pub fn note(&self, what: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(what.to_owned()),
            None => eprintln!("[{:>6.1}s] {what}", self.started.elapsed().as_secs_f64()),
        }
    }

    /// A step ended with `outcome`.
    pub fn finish(&self, step: &str, outcome: &str) {
        match &self.bar {
            Some(bar) => {
                if outcome.starts_with("FAIL:") || outcome.starts_with("NOT caught") {
                    bar.println(format!("{step}: {outcome}"));
                }
                bar.inc(1);
            }
            None => eprintln!("[{:>6.1}s] {step}: {outcome}", self.started.elapsed().as_secs_f64()),
        }
    }

    /// Clears the bar.
    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
