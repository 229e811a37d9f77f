//! The delivery queue in the `deliveries` table: claim with a lease, record an attempt,
//! sweep expired leases. The writing functions run on the writer thread inside its batch
//! transaction; the reading ones run on read-only connections.
//!
//! States: `pending` (due at `next_attempt_at`) → `in_flight` (claimed until `lease_until`)
//! → `delivered` | `pending` again (a retry) | `dead`; with ordering, `pending` →
//! `superseded` when a newer version of its key was already delivered. The attempt number
//! is counted at claim, so an attempt cut short by a crash still counts, and a delivery
//! that crashes the process every time still reaches `dead`. A paused target's deliveries
//! (`paused_targets`, see [`super::pause`]) stay `pending` and are neither claimed nor due.

use std::time::SystemTime;

use rusqlite::{Connection, OptionalExtension, params};

use crate::clock;
use crate::store::{
    ClaimRequest, Claimed, Claims, EventData, Finished, Next, Paused, Recorded, SUPERSEDED,
    Settled, Turn,
};

/// The rows of one target that a claim may take, apart from being due: unordered ones, and
/// for each order key the pending delivery with the lowest version (then id), unless one of
/// that key is in flight. `d` is the candidate row.
///
/// Two lookups, each with its state as an equality, so that each is a seek in
/// `deliveries_order (source, target, order_key, state)`: one `state IN (…)` test walked
/// every row of the key, delivered history included, for every candidate, and a key with
/// thousands of pending versions made each claim quadratic (BENCHMARKS.md, "Forwarding").
const CLAIMABLE: &str = "(d.order_key IS NULL OR (
        NOT EXISTS (
        SELECT 1 FROM deliveries o
         WHERE o.source = d.source AND o.target = d.target
           AND o.order_key = d.order_key AND o.state = 'in_flight')
        AND NOT EXISTS (
        SELECT 1 FROM deliveries o
         WHERE o.source = d.source AND o.target = d.target
           AND o.order_key = d.order_key AND o.state = 'pending' AND o.id <> d.id
           AND (o.order_version < d.order_version
                OR (o.order_version = d.order_version AND o.id < d.id)))))";

/// The target (`?1`, `?2` in the statements using it) is not paused. Part of the claim's
/// own statement, so a pause committed before the claim always holds (see
/// [`super::pause`]). Written over the parameters rather than the row, so that its
/// subquery runs once per statement; SQLite still tests the result on every candidate row,
/// though, so with the target paused a statement would walk its whole backlog to find
/// nothing (6.6 ms for 47,000 pending deliveries). The SQLite functions below therefore
/// ask [`is_paused`] first, in the same transaction, and stop there.
const NOT_PAUSED: &str =
    "NOT EXISTS (SELECT 1 FROM paused_targets p WHERE p.source = ?1 AND p.target = ?2)";

/// Whether the target is paused: one lookup in `paused_targets`' key.
fn is_paused(conn: &Connection, source: &str, target: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM paused_targets WHERE source = ?1 AND target = ?2")?
        .exists([source, target])
}

/// A delivery `d` under ordering whose key already delivered a version at least as new:
/// sending it would undo the newer one, so it is superseded instead. Versions compare only
/// within one kind, numbers with numbers and text with text: a version of the other kind is
/// never taken as older. Replay leaves such a delivery alone for the same reason.
/// PostgreSQL's is [`crate::store::postgres::OUTDATED`], over its two version columns.
pub(crate) const OUTDATED: &str = "(d.order_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM order_keys k
         WHERE k.source = d.source AND k.target = d.target AND k.order_key = d.order_key
           AND ((typeof(k.last_version) IN ('integer', 'real'))
                = (typeof(d.order_version) IN ('integer', 'real')))
           AND k.last_version >= d.order_version))";

/// Claims up to `limit` due deliveries of one target: one `UPDATE … FROM … RETURNING` that
/// marks them in flight, counts the attempt and sets the lease.
///
/// With ordering, a delivery is claimable only when no other delivery of its key is in
/// flight and none with a lower version (or the same version and a lower id) is pending,
/// so one key goes one at a time in version order while other keys proceed. A row the
/// claim takes whose key already delivered a version at least as new ([`OUTDATED`]) is
/// marked `superseded` instead, in the same statement. That is the only place a delivery
/// is superseded: it is judged when it would otherwise go out, so the work stays with the
/// rows a claim takes. (A pass over every pending delivery of the target before each claim
/// walked the target's whole ordered history through `deliveries_order`, and forwarding
/// fell to a few hundred a second as the backlog grew: BENCHMARKS.md, "Forwarding".) An
/// outdated delivery holds its key's newer versions back only until its turn, like any
/// lower version.
pub fn claim(conn: &Connection, req: &ClaimRequest, now: &str) -> rusqlite::Result<Claims> {
    if is_paused(conn, &req.source, &req.target)? {
        return Ok(Claims::default());
    }
    // A source without ordering supersedes nothing, even with order keys kept from when it
    // had ordering.
    let outdated = if req.ordered { OUTDATED } else { "0" };
    let lease_until = clock::iso(SystemTime::now() + req.lease);
    let mut superseded = 0;
    let mut claimed = Vec::new();
    let mut statement = conn.prepare_cached(&format!(
        "UPDATE deliveries
            SET state = iif(c.outdated, 'superseded', 'in_flight'),
                attempts = attempts + NOT c.outdated,
                lease_until = iif(c.outdated, NULL, ?4),
                last_error = iif(c.outdated, '{SUPERSEDED}', last_error),
                updated_at = ?3
           FROM (SELECT d.id, {outdated} AS outdated FROM deliveries d
                  WHERE d.source = ?1 AND d.target = ?2 AND d.state = 'pending'
                    AND d.next_attempt_at <= ?3 AND {CLAIMABLE} AND {NOT_PAUSED}
                  ORDER BY d.next_attempt_at, d.id
                  LIMIT ?5) AS c
          WHERE deliveries.id = c.id
         RETURNING id, event, attempts, schedule_base, idempotency_key, state"
    ))?;
    let mut rows = statement.query(params![
        req.source,
        req.target,
        now,
        lease_until,
        req.limit as i64
    ])?;
    while let Some(r) = rows.next()? {
        if r.get_ref(5)?.as_str()? == "superseded" {
            superseded += 1;
            continue;
        }
        claimed.push(Claimed {
            delivery: r.get(0)?,
            event: r.get(1)?,
            attempt: r.get(2)?,
            schedule_base: r.get(3)?,
            idempotency_key: r.get(4)?,
        });
    }

    // An attempt beyond the schedule can only come from a lease that expired on the last
    // attempt (a crash, every time): give up rather than loop forever.
    let (exhausted, ready): (Vec<Claimed>, Vec<Claimed>) = claimed
        .into_iter()
        .partition(|c| c.in_schedule() > req.max_attempts);
    let given_up = exhausted.len();
    for c in exhausted {
        conn.prepare_cached(
            "UPDATE deliveries SET state = 'dead', lease_until = NULL, updated_at = ?2,
                    last_error = 'gave up: the last attempt never finished (its lease expired)'
              WHERE id = ?1",
        )?
        .execute(params![c.delivery, now])?;
    }
    Ok(Claims {
        claimed: ready,
        superseded,
        given_up,
        rate_wait: None,
    })
}

/// Records an attempt and moves its delivery to the next state. When the delivery had
/// meanwhile been claimed again (this attempt's lease expired), the attempt is still
/// recorded, but the newer claim decides the state.
pub fn finish(conn: &Connection, f: &Finished, now: &str) -> rusqlite::Result<Recorded> {
    conn.prepare_cached(
        "INSERT INTO attempts (delivery, number, started_at, duration_ms, outcome, status, error,
                               output, ambiguous)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        f.delivery,
        f.attempt,
        f.started_at,
        f.duration_ms,
        f.next.word(),
        f.status,
        f.error,
        f.output,
        f.ambiguous
    ])?;
    let (state, next_at) = match &f.next {
        Next::Delivered => ("delivered", None),
        Next::Retry(at) => ("pending", Some(at.as_str())),
        Next::Dead => ("dead", None),
    };
    // The attempt still owns the delivery if nothing claimed it since (`attempts` is still
    // its number). That includes a delivery the sweeper returned to the queue because this
    // attempt outlived its lease, and that nobody claimed yet: the late result (delivered,
    // a Retry-After, a 410) is still the truth.
    let changed = conn
        .prepare_cached(
            "UPDATE deliveries
                SET state = ?3, next_attempt_at = coalesce(?4, next_attempt_at),
                    lease_until = NULL, last_error = ?5, updated_at = ?6
              WHERE id = ?1 AND attempts = ?2 AND schedule_base = ?7
                AND state IN ('in_flight', 'pending')",
        )?
        .execute(params![
            f.delivery,
            f.attempt,
            state,
            next_at,
            f.error,
            now,
            f.schedule_base
        ])?;
    let applied = changed == 1;
    let mut resolved_ambiguity = false;
    if applied && f.next == Next::Delivered {
        resolved_ambiguity = conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM attempts
                                 WHERE delivery = ?1 AND number < ?2 AND ambiguous)",
            )?
            .query_row(params![f.delivery, f.attempt], |r| r.get(0))?;
        conn.prepare_cached(
            "INSERT INTO order_keys (source, target, order_key, last_version, updated_at)
             SELECT source, target, order_key, order_version, ?2 FROM deliveries
              WHERE id = ?1 AND order_key IS NOT NULL
             ON CONFLICT (source, target, order_key) DO UPDATE
                SET last_version = max(last_version, excluded.last_version),
                    updated_at = excluded.updated_at",
        )?
        .execute(params![f.delivery, now])?;
    }
    Ok(Recorded {
        applied,
        resolved_ambiguity,
    })
}

/// Returns every delivery whose lease expired to the queue, due now: its attempt was cut
/// short (hookinbox stopped or crashed) and its outcome is unknown, so it is tried again
/// under the same idempotency key.
pub fn sweep(conn: &Connection, now: &str) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE deliveries
            SET state = 'pending', lease_until = NULL, next_attempt_at = ?1, updated_at = ?1,
                last_error = 'the attempt''s lease expired before its result was recorded'
          WHERE state = 'in_flight' AND lease_until < ?1",
    )?
    .execute([now])
}

/// When the next claimable delivery of a target is due (inbox text), if any. Deliveries
/// held back by an earlier version of their key do not count: they become claimable when
/// that one finishes, which wakes the target's loop. Nothing is due while the target is
/// paused.
pub fn next_due(conn: &Connection, source: &str, target: &str) -> rusqlite::Result<Option<String>> {
    next_due_after(conn, source, target, "")
}

/// [`next_due`], among the deliveries due after `after` (inbox text; "" for all).
fn next_due_after(
    conn: &Connection,
    source: &str,
    target: &str,
    after: &str,
) -> rusqlite::Result<Option<String>> {
    if is_paused(conn, source, target)? {
        return Ok(None);
    }
    conn.prepare_cached(&format!(
        // ORDER BY … LIMIT 1 rather than min(): the index is walked in due order and stops at
        // the first claimable row, instead of testing every pending row.
        "SELECT d.next_attempt_at FROM deliveries d
          WHERE d.source = ?1 AND d.target = ?2 AND d.state = 'pending'
            AND d.next_attempt_at > ?3 AND {CLAIMABLE} AND {NOT_PAUSED}
          ORDER BY d.next_attempt_at LIMIT 1"
    ))?
    .query_row([source, target, after], |r| r.get(0))
    .optional()
}

/// The events with these row ids, by id (a missing id is not in the map).
pub fn events(
    conn: &Connection,
    ids: &[i64],
) -> rusqlite::Result<std::collections::HashMap<i64, EventData>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    // The ids as one JSON array: one statement for any number of them, prepared once.
    let list = serde_json::to_string(ids).expect("integers always serialise");
    conn.prepare_cached(
        "SELECT e.id, e.source, e.event_id, p.body, p.headers, e.event_type, e.received_at,
                e.remote_addr, e.origin
           FROM events e LEFT JOIN payloads p ON p.event = e.id
          WHERE e.id IN (SELECT value FROM json_each(?1))",
    )?
    .query_map([list], |r| {
        Ok((
            r.get(0)?,
            EventData {
                source: r.get(1)?,
                event_id: r.get(2)?,
                body: r.get_ref(3)?.as_bytes_or_null()?.map(<[u8]>::to_vec),
                headers: r.get(4)?,
                event_type: r.get(5)?,
                received_at: r.get(6)?,
                remote_addr: r.get(7)?,
                origin: r.get(8)?,
            },
        ))
    })?
    .collect()
}

/// Runs a [`Turn`] inside the writer's transaction: each result, then the claim, the
/// claimed events, and (when it took fewer than asked) what the loop must know to sleep.
pub fn settle(conn: &Connection, turn: &Turn, now: &str) -> rusqlite::Result<Settled> {
    let mut settled = Settled::default();
    for f in &turn.results {
        settled.recorded.push(Ok(finish(conn, f, now)?));
    }
    let Some(req) = &turn.claim else {
        return Ok(settled);
    };
    let claims = claim(conn, req, now)?;
    let ids: Vec<i64> = claims.claimed.iter().map(|c| c.event).collect();
    settled.events = Ok(events(conn, &ids)?);
    if claims.taken() < req.limit {
        let paused = conn
            .prepare_cached(
                "SELECT paused_at, paused_by FROM paused_targets WHERE source = ?1 AND target = ?2",
            )?
            .query_row(params![req.source, req.target], |r| {
                Ok(Paused {
                    source: req.source.clone(),
                    target: req.target.clone(),
                    paused_at: r.get(0)?,
                    paused_by: r.get(1)?,
                })
            })
            .optional()?;
        let due = match paused {
            Some(_) => None,
            // The claim took every due row it could, and each is in flight now, holding its
            // key: what comes due next is due later. Looking only there skips the due rows
            // held behind a key in flight, which a key with thousands of versions waiting
            // would otherwise have read twice a turn, inside the writer's job.
            None if claims.superseded == 0 && claims.given_up == 0 => {
                next_due_after(conn, &req.source, &req.target, now)?
            }
            // A row superseded or given up frees its key's next version, which may be due.
            None => next_due(conn, &req.source, &req.target)?,
        };
        settled.look = Some((paused, due));
    }
    settled.claims = claims;
    Ok(settled)
}

/// Why a delivery of a target that left the configuration is dead.
const NOT_CONFIGURED: &str = "the target is no longer in the configuration";

/// Marks `dead` every pending delivery whose (source, target) is not in `configured`: no loop
/// would ever claim it, so it would stay pending forever and hold its event back from
/// retention. Run at start-up and on reload; `replay` brings them back once the target is
/// configured again. Finds the pairs first ([`super::read::delivery_pairs`]), so it reads
/// only the rows of targets that left, not every pending row.
pub fn retire_unknown_targets(
    conn: &Connection,
    configured: &[(String, String)],
    now: &str,
) -> rusqlite::Result<usize> {
    let unknown: Vec<(String, String)> = super::read::delivery_pairs(conn)?
        .into_iter()
        .filter(|pair| !configured.contains(pair))
        .collect();
    retire_targets(conn, &unknown, now)
}

/// Marks `dead` the pending deliveries of these (source, target) pairs: targets a reload
/// removed, whose deliveries came back to `pending` after the reload retired them. Walks
/// only those pairs' rows (the `deliveries_due` index leads with source and target).
pub fn retire_targets(
    conn: &Connection,
    pairs: &[(String, String)],
    now: &str,
) -> rusqlite::Result<usize> {
    let mut retire = conn.prepare_cached(&format!(
        "UPDATE deliveries
            SET state = 'dead', updated_at = ?3,
                last_error = '{NOT_CONFIGURED}'
          WHERE source = ?1 AND target = ?2 AND state = 'pending'"
    ))?;
    let mut n = 0;
    for (source, target) in pairs {
        n += retire.execute(params![source, target, now])?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    const T0: &str = "2026-01-01T00:00:00.000Z";
    const NOW: &str = "2026-01-02T00:00:00.000Z";

    use crate::store::sqlite::schema::temp_inbox as inbox;

    /// `n` events of source `sw`, each with a delivery to `app` in `state`, the i-th of key
    /// `{prefix}{i}` at version `version`; their delivery ids.
    fn deliveries(conn: &Connection, prefix: &str, n: i64, version: i64, state: &str) -> Vec<i64> {
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
             INSERT INTO events (source, event_id, sha256, size, received_at)
             SELECT 'sw', ?1 || i || '@' || ?3, 'x', 1, ?4 FROM n",
            params![prefix, n, version, T0],
        )
        .unwrap();
        conn.prepare(
            "INSERT INTO deliveries (event, source, target, idempotency_key, state,
                                     next_attempt_at, order_key, order_version, created_at,
                                     updated_at)
             SELECT id, 'sw', 'app', event_id, ?4, ?3, substr(event_id, 1, instr(event_id, '@') - 1),
                    ?2, ?3, ?3
               FROM events WHERE event_id LIKE ?1 || '%@' || ?2
             RETURNING id",
        )
        .unwrap()
        .query_map(params![prefix, version, T0, state], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    /// Key `key` of `app` was last delivered at `version`.
    fn delivered(conn: &Connection, key: &str, version: i64) {
        conn.execute(
            "INSERT INTO order_keys (source, target, order_key, last_version, updated_at)
             VALUES ('sw', 'app', ?1, ?2, ?3)",
            params![key, version, T0],
        )
        .unwrap();
    }

    fn request() -> ClaimRequest {
        ClaimRequest {
            source: "sw".into(),
            target: "app".into(),
            limit: 10,
            lease: Duration::from_secs(30),
            max_attempts: 5,
            ordered: true,
            rate: None,
        }
    }

    fn row(conn: &Connection, id: i64) -> (String, i64, Option<String>, Option<String>) {
        conn.query_row(
            "SELECT state, attempts, last_error, lease_until FROM deliveries WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
    }

    fn claimed(claims: &Claims) -> (Vec<i64>, usize) {
        let ids = claims.claimed.iter().map(|c| c.delivery).collect();
        (ids, claims.superseded)
    }

    /// Versions 1 to `n` of key "hot" (events `hot@1` …), all due at T0, in `state`.
    fn versions_of_one_key(conn: &Connection, n: i64, state: &str) {
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
             INSERT INTO events (source, event_id, sha256, size, received_at)
             SELECT 'sw', 'hot@' || i, 'x', 1, ?2 FROM n",
            params![n, T0],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO deliveries (event, source, target, idempotency_key, state,
                                     next_attempt_at, order_key, order_version,
                                     created_at, updated_at)
             SELECT id, 'sw', 'app', event_id, ?2, ?1, 'hot',
                    CAST(substr(event_id, 5) AS INTEGER), ?1, ?1
               FROM events WHERE event_id LIKE 'hot@%'",
            params![T0, state],
        )
        .unwrap();
    }

    /// Counts the SQLite virtual machine's steps on `conn` from now on.
    fn step_counter(conn: &mut Connection) -> Arc<AtomicU64> {
        let counted = Arc::new(AtomicU64::new(0));
        let count = counted.clone();
        conn.progress_handler(
            1,
            Some(move || {
                count.fetch_add(1, Ordering::Relaxed);
                false
            }),
        )
        .unwrap();
        counted
    }

    #[test]
    fn a_claim_supersedes_the_outdated_versions_it_takes_and_claims_the_rest() {
        let (_dir, conn) = inbox();
        // Key "k1" was delivered at version 3; versions 1 and 2 came late, 5 is news. Key
        // "j1" has nothing delivered.
        delivered(&conn, "k1", 3);
        let k1 = deliveries(&conn, "k", 1, 1, "pending")[0];
        let k2 = deliveries(&conn, "k", 1, 2, "pending")[0];
        let k5 = deliveries(&conn, "k", 1, 5, "pending")[0];
        let j1 = deliveries(&conn, "j", 1, 1, "pending")[0];
        // One version of a key per claim, in version order; the other key goes at once.
        assert_eq!(
            claimed(&claim(&conn, &request(), NOW).unwrap()),
            (vec![j1], 1)
        );
        let (state, attempts, error, lease) = row(&conn, k1);
        assert_eq!((state.as_str(), attempts, lease), ("superseded", 0, None));
        assert_eq!(error.as_deref(), Some(SUPERSEDED));
        assert_eq!(
            claimed(&claim(&conn, &request(), NOW).unwrap()),
            (vec![], 1)
        );
        assert_eq!(row(&conn, k2).0, "superseded");
        assert_eq!(
            claimed(&claim(&conn, &request(), NOW).unwrap()),
            (vec![k5], 0)
        );
        let (state, attempts, _, lease) = row(&conn, k5);
        assert_eq!((state.as_str(), attempts), ("in_flight", 1));
        assert!(lease.is_some());

        // Without ordering nothing is superseded, order keys or not.
        let k0 = deliveries(&conn, "k", 1, 0, "pending")[0];
        conn.execute(
            "UPDATE deliveries SET state = 'delivered' WHERE id = ?1",
            [k5],
        )
        .unwrap();
        let unordered = ClaimRequest {
            ordered: false,
            ..request()
        };
        assert_eq!(
            claimed(&claim(&conn, &unordered, NOW).unwrap()),
            (vec![k0], 0)
        );
    }

    /// The work of one claim from an ordered source does not grow with what the target
    /// already delivered, over many keys or in one. Counted in SQLite's virtual machine
    /// steps, not time: a claim over 100 times the history may do no more than twice the
    /// steps (before, a supersede pass walked every ordered delivery of the target on each
    /// claim, and the test of each candidate's key walked every row of that key).
    #[test]
    fn a_claims_work_does_not_grow_with_the_delivered_history() {
        let steps = |history: i64| {
            let (_dir, mut conn) = inbox();
            // Each of many keys delivered once, at version 1; and one key delivered at every
            // version up to `history`.
            deliveries(&conn, "m", history, 1, "delivered");
            versions_of_one_key(&conn, history, "delivered");
            conn.execute(
                "INSERT INTO order_keys (source, target, order_key, last_version, updated_at)
                 SELECT source, target, order_key, max(order_version), ?1 FROM deliveries
                  GROUP BY source, target, order_key",
                [T0],
            )
            .unwrap();
            // Ten of the many keys have news; one more arrived late; the one key has news.
            deliveries(&conn, "m", 10, 2, "pending");
            deliveries(&conn, "m", 1, 0, "pending");
            // (`deliveries` names the key "hot1": the first of its keys.)
            let news = deliveries(&conn, "hot", 1, history + 1, "pending")[0];
            conn.execute(
                "UPDATE deliveries SET order_key = 'hot' WHERE id = ?1",
                [news],
            )
            .unwrap();
            let counted = step_counter(&mut conn);
            let request = ClaimRequest {
                limit: 20,
                ..request()
            };
            let claims = claim(&conn, &request, NOW).unwrap();
            assert_eq!((claims.claimed.len(), claims.superseded), (10, 1));
            counted.load(Ordering::Relaxed)
        };
        let (small, large) = (steps(100), steps(10_000));
        assert!(large <= 2 * small, "{small} steps, then {large}");
    }

    /// One key with `versions` versions pending, all due, the first taken by the turn's
    /// claim; and one key whose only version is due tomorrow. The turn's look then says
    /// tomorrow, and reads no more than a few rows for it: the versions held behind the one
    /// in flight are not read a second time (they were, once per turn, inside the writer's
    /// job). A superseded row frees its key's next version, due now: then the look says now.
    #[test]
    fn a_turns_look_skips_the_versions_held_behind_a_key_in_flight() {
        const TOMORROW: &str = "2026-01-03T00:00:00.000Z";
        let claiming_turn = |conn: &Connection| {
            let turn = Turn {
                results: Vec::new(),
                claim: Some(request()),
            };
            settle(conn, &turn, NOW).unwrap()
        };
        let later = |conn: &Connection| {
            let later = deliveries(conn, "later", 1, 1, "pending")[0];
            conn.execute(
                "UPDATE deliveries SET next_attempt_at = ?2 WHERE id = ?1",
                params![later, TOMORROW],
            )
            .unwrap();
        };
        // The VM steps of one turn, and of its claim alone on the same rows.
        let steps = |versions: i64| {
            let count = |turn: bool| {
                let (_dir, mut conn) = inbox();
                versions_of_one_key(&conn, versions, "pending");
                later(&conn);
                let counted = step_counter(&mut conn);
                if turn {
                    let settled = claiming_turn(&conn);
                    assert_eq!(settled.claims.claimed.len(), 1);
                    assert_eq!(settled.look, Some((None, Some(TOMORROW.to_owned()))));
                } else {
                    assert_eq!(claim(&conn, &request(), NOW).unwrap().claimed.len(), 1);
                }
                counted.load(Ordering::Relaxed)
            };
            (count(true), count(false))
        };
        for versions in [100, 10_000] {
            let (turn, claim_alone) = steps(versions);
            assert!(
                turn <= claim_alone + 2_000,
                "{versions} versions: the turn took {turn} steps, its claim {claim_alone}"
            );
        }

        // Version 1 of the key is outdated: the claim supersedes it, and version 2, due,
        // is claimable now.
        let (_dir, conn) = inbox();
        versions_of_one_key(&conn, 3, "pending");
        later(&conn);
        delivered(&conn, "hot", 1);
        let settled = claiming_turn(&conn);
        assert_eq!(claimed(&settled.claims), (vec![], 1));
        assert_eq!(settled.look, Some((None, Some(T0.to_owned()))));
    }
}
