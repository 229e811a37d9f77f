//! Identities this process committed in the last minute, with their bodies' SHA-256: a
//! provider's retry of one of them is answered as the duplicate it is without a trip to the
//! writer.
//!
//! Providers retry fast (Svix after 5 s, Slack within a minute, any sender whose 200 was
//! lost at once), and each retry used to cost a writer job: the hop to the writer thread
//! and back, a transaction and two index lookups, for an answer that the last minute
//! already gave. Here a retry with the same bytes is found in memory.
//!
//! Invariant: an identity enters only after the store said it is committed (stored now, or
//! a duplicate of what is stored), so an answer from here is never earlier than the commit
//! it relies on. An entry is trusted for at most [`TTL`], and never longer than half its
//! source's `keep_identity`, so retention cannot have removed the row meanwhile. Different
//! bytes are not answered here: the store decides (a conflict is quarantined there). What
//! this does not see, the store still answers: an older identity, one another replica
//! committed, one stored before a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::event::Digest;

/// How long an identity is answered from memory after its commit was confirmed.
pub const TTL: Duration = Duration::from_secs(60);

/// The most identities remembered: about 2 MiB, a minute's worth at 270 new events a
/// second. Beyond that rate the oldest are forgotten early, which only sends their retries
/// to the store (under such load, retries come within seconds).
pub const CAPACITY: usize = 16_384;

/// An identity: the first 16 bytes of the SHA-256 of its length-prefixed parts.
pub type Key = [u8; 16];

pub fn key(source: &str, account: &str, event_id: &str) -> Key {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [source, account, event_id] {
        // Length-prefixed, so that no two different triples hash the same bytes.
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    let mut key = [0; 16];
    key.copy_from_slice(&ctx.finish().as_ref()[..16]);
    key
}

#[derive(Default)]
pub struct Recent {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Each identity's digest and when its commit was last confirmed.
    known: HashMap<Key, (Digest, Instant)>,
    /// The same, oldest first, for forgetting them in order (an identity confirmed again
    /// is here twice; only its newest entry counts).
    order: VecDeque<(Key, Instant)>,
}

impl Recent {
    /// True when `key` was confirmed committed with these same bytes within `ttl` (at most
    /// [`TTL`]).
    pub fn is_duplicate(&self, key: &Key, digest: &Digest, ttl: Duration, now: Instant) -> bool {
        let inner = self.inner.lock().expect("no panics while holding the lock");
        inner
            .known
            .get(key)
            .is_some_and(|(d, at)| d == digest && now.duration_since(*at) < ttl.min(TTL))
    }

    /// The store confirmed `key` committed with these bytes.
    pub fn confirmed(&self, key: Key, digest: Digest, now: Instant) {
        let mut inner = self.inner.lock().expect("no panics while holding the lock");
        inner.known.insert(key, (digest, now));
        inner.order.push_back((key, now));
        while let Some(&(oldest, at)) = inner.order.front() {
            if inner.order.len() <= CAPACITY && now.duration_since(at) < TTL {
                break;
            }
            inner.order.pop_front();
            if inner
                .known
                .get(&oldest)
                .is_some_and(|(_, last)| *last == at)
            {
                inner.known.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_bytes_within_the_window_are_a_known_duplicate() {
        let recent = Recent::default();
        let t0 = Instant::now();
        let (k, d) = (key("stripe", "", "evt_1"), [7; 32]);
        assert!(!recent.is_duplicate(&k, &d, TTL, t0));
        recent.confirmed(k, d, t0);
        assert!(recent.is_duplicate(&k, &d, TTL, t0 + Duration::from_secs(59)));
        assert!(
            !recent.is_duplicate(&k, &[8; 32], TTL, t0),
            "other bytes: the store decides"
        );
        assert!(!recent.is_duplicate(&k, &d, TTL, t0 + TTL), "too old");
        assert!(
            !recent.is_duplicate(
                &k,
                &d,
                Duration::from_secs(10),
                t0 + Duration::from_secs(10)
            ),
            "a source keeping identities briefly trusts them more briefly"
        );
        assert_ne!(key("ab", "c", "e"), key("a", "bc", "e"));
    }

    #[test]
    fn it_forgets_the_oldest_past_its_capacity_and_keeps_a_reconfirmed_one() {
        let recent = Recent::default();
        let t0 = Instant::now();
        let first = key("s", "", "0");
        recent.confirmed(first, [0; 32], t0);
        let again = key("s", "", "1");
        recent.confirmed(again, [1; 32], t0);
        recent.confirmed(again, [1; 32], t0 + Duration::from_secs(1));
        for i in 2..=CAPACITY {
            recent.confirmed(
                key("s", "", &i.to_string()),
                [2; 32],
                t0 + Duration::from_secs(1),
            );
        }
        let later = t0 + Duration::from_secs(2);
        assert!(
            !recent.is_duplicate(&first, &[0; 32], TTL, later),
            "forgotten first"
        );
        assert!(recent.is_duplicate(&again, &[1; 32], TTL, later));
        let inner = recent.inner.lock().unwrap();
        assert!(inner.order.len() <= CAPACITY && inner.known.len() <= CAPACITY);
    }
}
