//! Background tasks tied to the life of what holds them: an
//! [`AbortOnDrop`] stops its spawned task when dropped (a source's pulls
//! with the source, a tenant's driver with the tenant, the pruner with
//! `run`). It owns nothing else.

/// Aborts a spawned task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::AbortHandle);

impl AbortOnDrop {
    /// Ties the task `handle` aborts to this value's life.
    pub fn new(handle: tokio::task::AbortHandle) -> Self {
        Self(handle)
    }
}

impl<T> From<tokio::task::JoinHandle<T>> for AbortOnDrop {
    fn from(task: tokio::task::JoinHandle<T>) -> Self {
        Self(task.abort_handle())
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
