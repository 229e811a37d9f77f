//! Group commit as its callers see it, the same on both backends: jobs wait in a bounded
//! queue for the one task or thread that commits them in batches, and each caller hears its
//! own result only after the commit that holds it (SQLite: [`super::sqlite::writer`];
//! PostgreSQL: [`super::postgres::batch`]).

use tokio::sync::{mpsc, oneshot};

use super::model::{COMMIT_WAIT, WriteError};

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
