//! Secrets learnt from a handshake (Asana's `X-Hook-Secret`), and the windows in which a
//! handshake may teach one (`hookinbox arm`). A window is used once: learning a secret
//! closes it, in the same transaction, so two handshakes cannot both be trusted.

use rusqlite::{Connection, OptionalExtension, params};

/// Opens (or reopens) `source`'s window until `until` (ISO-8601 text).
pub fn arm(conn: &Connection, source: &str, now: &str, until: &str) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO armed (source, armed_at, until) VALUES (?1, ?2, ?3)
         ON CONFLICT (source) DO UPDATE SET armed_at = excluded.armed_at, until = excluded.until",
        params![source, now, until],
    )?;
    Ok(())
}

/// Stores `secret` for `source` if its window is open at `now`, closing it; false when no
/// window was open (nothing is changed then).
pub fn learn(
    conn: &Connection,
    source: &str,
    secret: &[u8],
    remote_addr: &str,
    now: &str,
) -> rusqlite::Result<bool> {
    let closed = conn.execute(
        "DELETE FROM armed WHERE source = ?1 AND until > ?2",
        params![source, now],
    )?;
    if closed == 0 {
        return Ok(false);
    }
    conn.execute(
        "INSERT INTO learnt_secrets (source, secret, learnt_at, remote_addr)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (source) DO UPDATE SET secret = excluded.secret,
             learnt_at = excluded.learnt_at, remote_addr = excluded.remote_addr",
        params![source, secret, now, remote_addr],
    )?;
    Ok(true)
}

/// Every learnt secret, by source.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<(String, Vec<u8>)>> {
    let mut stmt = conn.prepare("SELECT source, secret FROM learnt_secrets")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// When `source` learnt its secret, if it has.
pub fn learnt_at(conn: &Connection, source: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT learnt_at FROM learnt_secrets WHERE source = ?1",
        [source],
        |r| r.get(0),
    )
    .optional()
}
