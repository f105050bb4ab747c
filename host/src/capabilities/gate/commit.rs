//! A write on its way to disk that the reconcile's gate must see durable
//! before any effect (the state capability's commits, docs/design.md).

use crate::capabilities::error::CapError;

/// A write the backend has checked and applied, on its way to disk: the
/// caller is answered once the write is known to be allowed, and awaits
/// [`Commit::durable`] before anything relies on the write surviving a crash
/// (the gate, before any effect: [`super::Gate::keep_pending`]).
#[must_use = "a write is durable only once its commit is awaited"]
pub struct Commit(Option<tokio::sync::oneshot::Receiver<Result<(), CapError>>>);

impl Commit {
    /// Durable already (or in memory, for a fake).
    pub fn done() -> Commit {
        Commit(None)
    }

    /// Durable when `finished` answers Ok.
    pub fn pending(finished: tokio::sync::oneshot::Receiver<Result<(), CapError>>) -> Commit {
        Commit(Some(finished))
    }

    pub async fn durable(mut self) -> Result<(), CapError> {
        self.finished().await
    }

    /// [`Commit::durable`] without giving the commit up: a waiter cancelled
    /// (cut off by a deadline) leaves it to be awaited again. Not to be
    /// awaited again once it answered.
    pub async fn finished(&mut self) -> Result<(), CapError> {
        match &mut self.0 {
            None => Ok(()),
            Some(finished) => finished.await.unwrap_or_else(|_| {
                Err(CapError::Unavailable(
                    "state store: the commit ended without an answer".into(),
                ))
            }),
        }
    }
}
