//! What the front door keeps between runs, by name (the `kept` table): the ACME account and
//! certificates, the address lists providers publish. Replicas share it through the inbox.

use crate::store::db::{Db, DbError};

/// One kept value and when it was written (inbox time text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub value: String,
    pub updated_at: String,
}

/// The value kept under `name`, if any.
pub fn get(db: Db, name: &str) -> Result<Option<Kept>, DbError> {
    db.row(
        "SELECT value, updated_at FROM kept WHERE name = ?1",
        &[&name],
        |r| {
            Ok(Kept {
                value: r.get(0)?,
                updated_at: r.get(1)?,
            })
        },
    )
}

/// Keeps `value` under `name`, replacing what was there.
pub fn put(db: Db, name: &str, value: &str, now: &str) -> Result<(), DbError> {
    db.execute(
        "INSERT INTO kept (name, value, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        &[&name, &value, &now],
    )?;
    Ok(())
}

/// Keeps `value` under `name` only if what is kept there is still `expected` (`None`:
/// nothing is), and says whether it did: a compare-and-set, so that of replicas racing for
/// the same row one wins. (PostgreSQL re-reads the row a concurrent update changed before
/// applying the `WHERE`, so the loser's update matches nothing.)
pub fn replace_if(
    db: Db,
    name: &str,
    expected: Option<&str>,
    value: &str,
    now: &str,
) -> Result<bool, DbError> {
    let changed = match expected {
        None => db.execute(
            "INSERT INTO kept (name, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO NOTHING",
            &[&name, &value, &now],
        )?,
        Some(old) => db.execute(
            "UPDATE kept SET value = ?2, updated_at = ?3 WHERE name = ?1 AND value = ?4",
            &[&name, &value, &now, &old],
        )?,
    };
    Ok(changed == 1)
}

/// Forgets what is kept under `name`.
pub fn delete(db: Db, name: &str) -> Result<(), DbError> {
    db.execute("DELETE FROM kept WHERE name = ?1", &[&name])?;
    Ok(())
}

/// Every kept name whose name starts with `prefix`, with its value, in name order.
pub fn with_prefix(db: Db, prefix: &str) -> Result<Vec<(String, Kept)>, DbError> {
    // `substr` rather than LIKE: a name may hold `%` or `_`. The casts tell PostgreSQL the
    // parameter's type, which `length`'s overloads leave it unable to infer.
    db.rows(
        "SELECT name, value, updated_at FROM kept
         WHERE substr(name, 1, length(CAST(?1 AS TEXT))) = CAST(?1 AS TEXT) ORDER BY name",
        &[&prefix],
        |r| {
            Ok((
                r.get(0)?,
                Kept {
                    value: r.get(1)?,
                    updated_at: r.get(2)?,
                },
            ))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Synchronous;

    #[test]
    fn a_value_is_replaced_and_found_by_prefix_even_with_like_wildcards() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::sqlite::schema::open_writer(
            &dir.path().join("inbox.db"),
            Synchronous::Full,
            true,
        )
        .unwrap();
        let db = Db::Sqlite(&conn);
        let (t1, t2) = ("2026-12-07T07:00:00.000Z", "2026-12-07T08:00:00.000Z");
        assert_eq!(get(db, "acme:account").unwrap(), None);
        put(db, "acme:account", "one", t1).unwrap();
        put(db, "acme:account", "two", t2).unwrap();
        put(db, "allow:git_hub", "[]", t1).unwrap();
        put(db, "allow:gitxhub", "[]", t1).unwrap();
        assert_eq!(
            get(db, "acme:account").unwrap(),
            Some(Kept {
                value: "two".into(),
                updated_at: t2.into()
            })
        );
        let names: Vec<String> = with_prefix(db, "allow:git_")
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["allow:git_hub"]);
    }

    #[test]
    fn replace_if_wins_only_against_the_value_it_expected() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::sqlite::schema::open_writer(
            &dir.path().join("inbox.db"),
            Synchronous::Full,
            true,
        )
        .unwrap();
        let db = Db::Sqlite(&conn);
        let t = "2026-12-07T07:00:00.000Z";
        assert!(replace_if(db, "acme:lease", None, "a 1", t).unwrap());
        assert!(!replace_if(db, "acme:lease", None, "b 1", t).unwrap());
        assert!(!replace_if(db, "acme:lease", Some("b 1"), "b 2", t).unwrap());
        assert!(replace_if(db, "acme:lease", Some("a 1"), "b 2", t).unwrap());
        assert_eq!(get(db, "acme:lease").unwrap().unwrap().value, "b 2");
    }
}
