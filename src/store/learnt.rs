//! Secrets learnt from a handshake (Asana's `X-Hook-Secret`), and the windows in which a
//! handshake may teach one (`hookinbox arm`). A window is used once: learning a secret
//! closes it, in the same transaction, so two handshakes cannot both be trusted.

use crate::store::db::{Db, DbError};

/// Opens (or reopens) `source`'s window until `until` (ISO-8601 text).
pub fn arm(db: Db, source: &str, now: &str, until: &str) -> Result<(), DbError> {
    db.execute(
        "INSERT INTO armed (source, armed_at, until) VALUES (?1, ?2, ?3)
         ON CONFLICT (source) DO UPDATE SET armed_at = excluded.armed_at, until = excluded.until",
        &[&source, &now, &until],
    )?;
    Ok(())
}

/// Stores `secret` for `source` if its window is open at `now`, closing it; false when no
/// window was open (nothing is changed then).
pub fn learn(
    db: Db,
    source: &str,
    secret: &[u8],
    remote_addr: &str,
    now: &str,
) -> Result<bool, DbError> {
    // With replicas, two handshakes at once: the window's row is deleted by one of them.
    let closed = db.execute(
        "DELETE FROM armed WHERE source = ?1 AND until > ?2",
        &[&source, &now],
    )?;
    if closed == 0 {
        return Ok(false);
    }
    db.execute(
        "INSERT INTO learnt_secrets (source, secret, learnt_at, remote_addr)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (source) DO UPDATE SET secret = excluded.secret,
             learnt_at = excluded.learnt_at, remote_addr = excluded.remote_addr",
        &[&source, &secret, &now, &remote_addr],
    )?;
    Ok(true)
}

/// The secret `source` learnt, if it learnt one.
pub fn secret(db: Db, source: &str) -> Result<Option<Vec<u8>>, DbError> {
    db.row(
        "SELECT secret FROM learnt_secrets WHERE source = ?1",
        &[&source],
        |r| r.get(0),
    )
}

/// Every learnt secret, by source.
pub fn all(db: Db) -> Result<Vec<(String, Vec<u8>)>, DbError> {
    db.rows("SELECT source, secret FROM learnt_secrets", &[], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
}

/// When `source` learnt its secret, if it has.
pub fn learnt_at(db: Db, source: &str) -> Result<Option<String>, DbError> {
    db.row(
        "SELECT learnt_at FROM learnt_secrets WHERE source = ?1",
        &[&source],
        |r| r.get(0),
    )
}
