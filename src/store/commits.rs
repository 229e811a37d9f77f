//! Who wants to hear that new events of a source were committed: the delivery worker's
//! target loops, so that delivery starts at once instead of at the next poll.
//!
//! The writer's handle announces a commit here; listeners subscribe by source name. So the
//! receiver never knows the delivery worker (a commit notifies through the store), and a
//! reload that changes the targets only changes who listens.

use std::collections::HashMap;
use std::sync::RwLock;

use tokio::sync::watch;

/// Per source, a channel: a send marks every subscriber's receiver changed, and a change
/// seen late is still seen (unlike a bare `Notify`). Its value counts the
/// [`Commits::all`]s, so that a loop can tell a change of state it must look at (a resume)
/// from one more commit, which a paused target's loop need not look at.
#[derive(Debug, Default)]
pub struct Commits {
    sources: RwLock<HashMap<String, watch::Sender<u64>>>,
}

impl Commits {
    /// A receiver that changes whenever a new event of `source` is committed (and on
    /// [`Commits::all`]).
    pub fn subscribe(&self, source: &str) -> watch::Receiver<u64> {
        let mut sources = self
            .sources
            .write()
            .expect("no panics while holding the lock");
        sources
            .entry(source.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// New events of `source` were committed.
    pub fn committed(&self, source: &str) {
        let sources = self
            .sources
            .read()
            .expect("no panics while holding the lock");
        if let Some(tx) = sources.get(source) {
            tx.send_modify(|_| {});
        }
    }

    /// Every subscriber has something to look at (leases expired and deliveries came back,
    /// an operator resumed or replayed).
    pub fn all(&self) {
        let sources = self
            .sources
            .read()
            .expect("no panics while holding the lock");
        for tx in sources.values() {
            tx.send_modify(|steered| *steered += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_subscriber_of_a_source_hears_its_commit_even_late() {
        let commits = Commits::default();
        let (mut a, mut b, mut other) = (
            commits.subscribe("sw"),
            commits.subscribe("sw"),
            commits.subscribe("github"),
        );
        commits.committed("sw");
        // Seen although nobody was waiting when it was sent.
        a.changed().await.unwrap();
        b.changed().await.unwrap();
        assert!(!other.has_changed().unwrap());
        assert_eq!(*a.borrow(), 0, "a commit is no call to look");
        commits.all();
        other.changed().await.unwrap();
        a.changed().await.unwrap();
        assert_eq!((*a.borrow(), *other.borrow()), (1, 1));
    }
}
