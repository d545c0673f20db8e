//! lock-core's blocking bridge ([`lock_core::blocking`]), in this backend's name.

use lock_core::{Error, Result};

pub(crate) use lock_core::blocking::{block_on, block_until, in_async_context, Unfinished};

use crate::error::BACKEND;

/// [`Error::Unsupported`] when the calling thread runs a tokio async task.
///
/// # Errors
/// As said.
pub(crate) fn refuse_async_context() -> Result<()> {
    lock_core::blocking::refuse_async_context(BACKEND)
}

/// What a call from a tokio async task gets.
pub(crate) fn async_context_error() -> Error {
    lock_core::blocking::async_context_error(BACKEND)
}
