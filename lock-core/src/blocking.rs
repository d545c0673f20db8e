//! Blocking on a backend's private tokio runtime from the caller's thread — and refusing to where
//! that would stall a tokio executor (feature `tokio`; lock-zk and lock-etcd drive async clients
//! this way).
//!
//! Every call of the backend blocks its thread until the servers answer (or a timeout passes).
//! Inside a tokio async task (or a runtime's `block_on`) that would stall the executor — on a
//! `current_thread` runtime every other task, the holder of the awaited lock perhaps among them —
//! and tokio's own `Runtime::block_on` panics there ("Cannot start a runtime from within a
//! runtime"). So such a call is refused with [`Error::Unsupported`] ([`refuse_async_context`]),
//! while a thread of `tokio::task::spawn_blocking` or `tokio::task::block_in_place`, where
//! blocking is what tokio asks for, may call.
//!
//! Telling the two apart: both have a current runtime handle, and tokio has no public "may this
//! thread block" query. What it does expose is the cooperative budget ([`tokio::task::coop`]):
//! an async task (and a runtime's `block_on`) is polled with a budget of at most 255 units,
//! while blocking sections run unconstrained. [`in_async_context`] takes units until the budget
//! runs out or 256 were granted, then gives every unit back.
//!
//! [`block_on`] waits by parking the thread rather than through `Runtime::block_on`, so that
//! no call can panic even where the budget probe is fooled (an async task wrapped in
//! `tokio::task::unconstrained` is taken for a blocking section: it blocks, as any blocking call
//! there would).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use tokio::runtime::Runtime;

use crate::{Error, Result};

/// What calls from an async task are refused as (an [`Error::Unsupported`] feature).
pub const ASYNC_CONTEXT: &str = "blocking calls inside a tokio async task, which they would stall; \
     make them from tokio::task::spawn_blocking (or a thread of your own)";

/// [`Error::Unsupported`] when the calling thread runs a tokio async task (see the module docs).
///
/// # Errors
/// As said.
pub fn refuse_async_context(backend: &'static str) -> Result<()> {
    match in_async_context() {
        true => Err(async_context_error(backend)),
        false => Ok(()),
    }
}

/// What a call from a tokio async task to `backend` gets.
pub fn async_context_error(backend: &'static str) -> Error {
    Error::Unsupported { backend, feature: ASYNC_CONTEXT }
}

/// Whether the calling thread is polling a tokio task or a runtime's `block_on` future right now
/// (where blocking stalls the executor), as opposed to a plain thread, or a blocking section of a
/// runtime (`spawn_blocking`, `block_in_place`). No side effect: the budget is left as found.
pub fn in_async_context() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let mut context = Context::from_waker(Waker::noop());
    // Each unit taken is given back by dropping its guard, last taken first (each guard restores
    // the budget as it was before its own unit).
    let mut taken = Vec::with_capacity(usize::from(u8::MAX) + 1);
    let constrained = loop {
        match tokio::task::coop::poll_proceed(&mut context) {
            Poll::Pending => break true,
            // Kept, not dropped: the unit stays taken until its guard goes.
            Poll::Ready(unit) => taken.push(unit),
        }
        if taken.len() > usize::from(u8::MAX) {
            break false;
        }
    };
    while let Some(unit) = taken.pop() {
        drop(unit);
    }
    constrained
}

/// Runs `future` on the calling thread with `runtime` as the current runtime (its timers and the
/// client's tasks live there), parking the thread between polls.
pub fn block_on<F: Future>(runtime: &Runtime, future: F) -> F::Output {
    let _current = runtime.enter();
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}

/// Why [`block_until`] gave no output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// The calling thread runs a tokio async task: refused at once ([`in_async_context`]).
    AsyncContext,
    /// The deadline passed first; the future was dropped.
    TimedOut,
}

/// Runs `future` on `runtime` from the calling thread ([`block_on`]) until `deadline`: its
/// output, or [`Unfinished`] — at once inside a tokio async task, else once the deadline passed.
/// The bounded call of a backend that drives an async client from blocking calls.
///
/// # Errors
/// As said.
pub fn block_until<F: Future>(
    runtime: &Runtime,
    deadline: std::time::Instant,
    future: F,
) -> std::result::Result<F::Output, Unfinished> {
    if in_async_context() {
        return Err(Unfinished::AsyncContext);
    }
    // The timer must be made inside the runtime: `block_on` enters it.
    block_on(runtime, async { tokio::time::timeout_at(deadline.into(), future).await })
        .map_err(|_elapsed| Unfinished::TimedOut)
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many budget units the current task has left (256 for none: unconstrained), taking
    /// and giving back as [`in_async_context`] does.
    fn units_left() -> usize {
        let mut context = Context::from_waker(Waker::noop());
        let mut taken = Vec::new();
        while taken.len() <= usize::from(u8::MAX) {
            match tokio::task::coop::poll_proceed(&mut context) {
                Poll::Ready(unit) => taken.push(unit),
                Poll::Pending => break,
            }
        }
        let left = taken.len();
        while let Some(unit) = taken.pop() {
            drop(unit);
        }
        left
    }

    fn runtimes() -> [Runtime; 2] {
        [
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap(),
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        ]
    }

    #[test]
    fn async_tasks_are_told_from_threads_that_may_block() {
        assert!(!in_async_context(), "a plain thread");
        for runtime in runtimes() {
            let flavor = runtime.handle().runtime_flavor();
            assert!(runtime.block_on(async { in_async_context() }), "{flavor:?}: block_on's future");
            let task = runtime.block_on(async { tokio::spawn(async { in_async_context() }).await.unwrap() });
            assert!(task, "{flavor:?}: a spawned task");
            let blocking =
                runtime.block_on(async { tokio::task::spawn_blocking(in_async_context).await.unwrap() });
            assert!(!blocking, "{flavor:?}: spawn_blocking");
            let _entered = runtime.enter();
            assert!(!in_async_context(), "{flavor:?}: a plain thread that entered the runtime");
        }
        let [multi_thread, _] = runtimes();
        let in_place = multi_thread.block_on(async {
            tokio::spawn(async { tokio::task::block_in_place(in_async_context) }).await.unwrap()
        });
        assert!(!in_place, "block_in_place");
    }

    #[test]
    fn the_probe_leaves_the_budget_as_it_found_it() {
        for runtime in runtimes() {
            runtime.block_on(async {
                tokio::task::yield_now().await;
                let before = units_left();
                assert!(before < 256, "a task has a budget");
                assert!(in_async_context());
                assert_eq!(units_left(), before);
            });
        }
        assert_eq!(units_left(), 256, "a plain thread has no budget");
    }

    #[test]
    fn block_on_runs_timers_of_the_runtime_even_inside_another_runtime() {
        let ours =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().unwrap();
        let sleep = || async { tokio::time::sleep(std::time::Duration::from_millis(20)).await };
        block_on(&ours, sleep());
        let [_, theirs] = runtimes();
        theirs.block_on(async { block_on(&ours, sleep()) });
        ours.shutdown_background();
    }
}
