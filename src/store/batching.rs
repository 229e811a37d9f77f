//! Group commit as its callers see it, the same on both backends: jobs wait in a bounded
//! queue for the one task or thread that commits them in batches, and each caller hears its
//! own result only after the commit that holds it (SQLite: [`super::sqlite::writer`];
//! PostgreSQL: [`super::postgres::batch`]).

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::model::WriteError;

/// The most jobs in one transaction. Beyond a few hundred rows the fsync is no longer what
/// dominates a commit (reference/reliability-perf.md §1.5), and a bound keeps one commit's
/// latency, which every request in it waits for, in check.
pub const MAX_BATCH: usize = 512;

/// Jobs waiting for the writer. When it is full the disk is far behind the network, and a
/// new request is answered 503 at once rather than queued into a provider's timeout.
pub const QUEUE_CAPACITY: usize = 4096;

/// How long a caller waits for its commit before giving up (a request answers 503). A
/// commit can still land after that; the provider then retries and hears "duplicate", which
/// is honest. A disk that takes seconds to fsync is better answered late than never.
pub const COMMIT_WAIT: Duration = Duration::from_secs(10);

/// Queues `op` and waits for its `answer`, the one way every store's callers do: a full
/// queue is refused at once unless `wait_for_room` (a request answers 503 rather than wait
/// into its provider's timeout), and no answer within [`COMMIT_WAIT`] is a timeout.
pub(crate) async fn queue_and_wait<O, T>(
    queue: &mpsc::Sender<O>,
    op: O,
    wait_for_room: bool,
    answer: oneshot::Receiver<Result<T, WriteError>>,
) -> Result<T, WriteError> {
    if wait_for_room {
        queue.send(op).await.map_err(|_| WriteError::Stopped)?;
    } else {
        queue.try_send(op).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => WriteError::QueueFull,
            mpsc::error::TrySendError::Closed(_) => WriteError::Stopped,
        })?;
    }
    match tokio::time::timeout(COMMIT_WAIT, answer).await {
        Err(_) => Err(WriteError::TimedOut),
        Ok(Err(_)) => Err(WriteError::Stopped),
        Ok(Ok(result)) => result,
    }
}
