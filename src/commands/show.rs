//! `hookinbox show ID`: one event with everything the inbox knows about it: identity,
//! stored headers, optionally the body, and every delivery with every attempt.
//!
//! The body is the exact bytes a provider signed. Piped or redirected, `show ID --body`
//! writes those bytes and nothing else, so `show ID --body > file` reproduces them; to a
//! terminal it shows them escaped inside the listing, since a body is provider-controlled.

use std::fmt::Display;
use std::io::Write;

use anyhow::Context as _;

use super::NotFound;
use crate::store::views::event::{EventDetail, MAX_MATCHES};
use crate::store::{Db, Location};
use crate::terminal::{escape, escape_block};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The event: its row id (the ID column of `hookinbox events`) or the provider's event
    /// id. Digits name the row with that id if there is one, else a provider event id
    #[arg(value_name = "ID")]
    pub id: String,
    /// Read ID as a provider event id of this source, never a row id (needed when several
    /// sources stored the same provider id)
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Also print the body. Piped or redirected, only the body's exact bytes are written
    /// (`show ID --body > file`); on a terminal it is shown escaped after the headers.
    /// --json always includes it
    #[arg(long)]
    pub body: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
    /// Whether the output is a terminal: not a flag, set by the caller (`cli` asks
    /// `IsTerminal` of stdout). Decides how --body prints; kept out of `run` so that tests
    /// can drive both ways.
    #[arg(skip)]
    pub terminal: bool,
}

/// Events listed in the error for an ambiguous provider id before "…".
const MAX_AMBIGUOUS_LISTED: i64 = MAX_MATCHES;

pub fn run(inbox: &Location, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let conn = inbox.read()?;
    let id = resolve(conn.db(), &args.id, args.source.as_deref())?;
    let shown = conn
        .db()
        .event(id)
        .with_context(|| format!("reading event {id} from {}", inbox.name()))?
        .ok_or_else(|| NotFound(format!("no event {id} in the inbox")))?;
    drop(conn);

    if args.json {
        crate::terminal::write_json(out, &shown)?;
        return Ok(());
    }
    if args.body && !args.terminal {
        let Some(body) = &shown.raw_body else {
            return Err(pruned(&shown).into());
        };
        out.write_all(body)?;
        return Ok(());
    }
    print(&shown, args.body, out)?;
    Ok(())
}

/// The row id of the event `id` names: a row id when it is digits (and no `--source`), else
/// the one event with that provider id.
pub fn resolve(db: Db, id: &str, source: Option<&str>) -> anyhow::Result<i64> {
    // Digits are a row id when such a row exists; some providers' ids are numbers too, so
    // otherwise they fall through to the provider id. (`parse` alone would take "+5".)
    let digits = !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit());
    if source.is_none()
        && digits
        && let Ok(row) = id.parse::<i64>()
        && db.has_event(row)?
    {
        return Ok(row);
    }
    let matches = db.events_with_id(id, source)?;
    match matches.as_slice() {
        [] => {
            let place = match source {
                Some(s) => format!(" in source \"{}\"", escape(s)),
                None => String::new(),
            };
            // Quoted by hand: `{:?}` would double the backslashes `escape` wrote.
            Err(NotFound(format!(
                "no event \"{}\"{place}: give a row id or a provider event id as \
                 `hookinbox events` lists them",
                escape(id)
            ))
            .into())
        }
        [(row, _, _)] => Ok(*row),
        several => {
            let mut listed: Vec<String> = several
                .iter()
                .take(MAX_AMBIGUOUS_LISTED as usize)
                .map(|(row, source, account)| {
                    format!(
                        "  source {}  account {}  id {row}",
                        escape(source),
                        if account.is_empty() {
                            "-".into()
                        } else {
                            escape(account)
                        }
                    )
                })
                .collect();
            if several.len() as i64 > MAX_AMBIGUOUS_LISTED {
                listed.push("  …".into());
            }
            anyhow::bail!(
                "event id \"{}\" matches several events:\n{}\nnarrow it with --source NAME, or \
                 show one by its row id: hookinbox show {}",
                escape(id),
                listed.join("\n"),
                several[0].0
            )
        }
    }
}

fn pruned(shown: &EventDetail) -> NotFound {
    NotFound(format!(
        "event {} has no body any more: it was pruned at {} (the source's keep_payload); \
         its identity and deliveries remain",
        shown.id,
        shown.pruned_at.as_deref().unwrap_or("an unknown time")
    ))
}

/// The text form: `label  value` lines, every provider-controlled value escaped.
fn print(s: &EventDetail, with_body: bool, out: &mut impl Write) -> std::io::Result<()> {
    /// Where values start: after the deepest indent (4) and the longest label
    /// ("idempotency key" at 2), and a space.
    const VALUE_COLUMN: usize = 19;
    fn field(
        out: &mut impl Write,
        indent: &str,
        label: &str,
        value: impl Display,
    ) -> std::io::Result<()> {
        let width = VALUE_COLUMN - 1 - indent.len();
        writeln!(out, "{indent}{label:<width$} {value}")
    }
    fn or_dash(v: &Option<String>) -> std::borrow::Cow<'_, str> {
        v.as_deref().map_or("-".into(), escape)
    }

    writeln!(out, "event {}", s.id)?;
    field(out, "  ", "source", escape(&s.source))?;
    field(
        out,
        "  ",
        "account",
        if s.account.is_empty() {
            "-".into()
        } else {
            escape(&s.account)
        },
    )?;
    field(out, "  ", "event id", escape(&s.event_id))?;
    field(out, "  ", "type", or_dash(&s.event_type))?;
    field(out, "  ", "size", format_args!("{} bytes", s.size))?;
    field(out, "  ", "sha256", escape(&s.sha256))?;
    field(out, "  ", "received at", escape(&s.received_at))?;
    let origin = match s.origin.as_str() {
        "api" => "api (fetched from the provider's API by recover, not signed)",
        _ => "webhook (signed)",
    };
    field(out, "  ", "origin", origin)?;
    field(out, "  ", "provider time", or_dash(&s.provider_time))?;
    match (&s.pruned_at, s.pruned) {
        (_, false) => field(out, "  ", "payload", "stored")?,
        (Some(at), true) => field(
            out,
            "  ",
            "payload",
            format_args!("pruned at {}", escape(at)),
        )?,
        (None, true) => field(out, "  ", "payload", "pruned")?,
    }

    writeln!(out, "headers")?;
    match &s.headers {
        None => writeln!(out, "  (pruned)")?,
        Some(serde_json::Value::Array(pairs)) => {
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([serde_json::Value::String(n), serde_json::Value::String(v)]) => {
                        writeln!(out, "  {}: {}", escape(n), escape(v))?
                    }
                    _ => writeln!(out, "  {}", escape(&pair.to_string()))?,
                }
            }
        }
        Some(serde_json::Value::String(raw)) => writeln!(out, "  {}", escape(raw))?,
        Some(other) => writeln!(out, "  {}", escape(&other.to_string()))?,
    }

    if with_body {
        writeln!(out, "body")?;
        match &s.raw_body {
            None => writeln!(out, "  (pruned)")?,
            Some(b) => {
                let text = String::from_utf8_lossy(b);
                if matches!(text, std::borrow::Cow::Owned(_)) {
                    writeln!(
                        out,
                        "  (not UTF-8: invalid bytes are shown as \u{fffd}; `hookinbox show {} \
                         --body > FILE` writes the exact bytes)",
                        s.id
                    )?;
                }
                for line in escape_block(&text).lines() {
                    writeln!(out, "  {line}")?;
                }
            }
        }
    }

    if s.deliveries.is_empty() {
        writeln!(out, "deliveries")?;
        writeln!(out, "  (none: the source has no targets)")?;
    }
    for d in &s.deliveries {
        writeln!(
            out,
            "delivery {} to {}: {}",
            d.id,
            escape(&d.target),
            escape(&d.state)
        )?;
        if let (Some(since), Some(by)) = (&d.paused_since, &d.paused_by) {
            field(
                out,
                "  ",
                "target",
                format_args!("paused since {} by {}", escape(since), escape(by)),
            )?;
        }
        field(out, "  ", "attempts", d.attempts)?;
        // Only a pending delivery has a next attempt; a settled one keeps the column's last
        // value, which would read as a schedule.
        if d.state == "pending" {
            field(out, "  ", "next attempt at", escape(&d.next_attempt_at))?;
        }
        field(out, "  ", "lease until", or_dash(&d.lease_until))?;
        field(out, "  ", "last error", or_dash(&d.last_error))?;
        field(out, "  ", "idempotency key", escape(&d.idempotency_key))?;
        field(out, "  ", "updated at", escape(&d.updated_at))?;
        for a in &d.history {
            let status = a.status.map_or("-".into(), |s| s.to_string());
            writeln!(
                out,
                "  attempt {}  {}  {}  status {status}  {} ms",
                a.number,
                escape(&a.started_at),
                escape(&a.outcome),
                a.duration_ms
            )?;
            if a.error.is_some() {
                field(out, "    ", "error", or_dash(&a.error))?;
            }
            if a.output.is_some() {
                field(out, "    ", "output", or_dash(&a.output))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::views::event::{AttemptDetail, DeliveryDetail};

    fn event(body: Option<&[u8]>) -> EventDetail {
        EventDetail {
            id: 7,
            source: "sw".into(),
            account: String::new(),
            event_id: "evt\u{202e}1".into(),
            event_type: Some("\x1b[2Jwipe".into()),
            size: 3,
            sha256: "ab".into(),
            received_at: "2026-11-30T07:31:02.123Z".into(),
            provider_time: None,
            origin: "webhook".into(),
            pruned: body.is_none(),
            pruned_at: body.is_none().then(|| "2026-12-30T00:00:00.000Z".into()),
            headers: Some(serde_json::json!([["x-note", "a\u{1b}]0;title\u{7}"]])),
            body: None,
            body_encoding: None,
            deliveries: vec![DeliveryDetail {
                id: 1,
                target: "app".into(),
                state: "dead".into(),
                attempts: 1,
                next_attempt_at: "2026-11-30T07:31:02.123Z".into(),
                lease_until: None,
                last_error: Some("410 Gone\r\nfake: line".into()),
                idempotency_key: "k".into(),
                created_at: "2026-11-30T07:31:02.123Z".into(),
                updated_at: "2026-11-30T07:31:02.123Z".into(),
                paused_since: Some("2026-11-30T07:40:00.000Z".into()),
                paused_by: Some("eve\x1b[2J".into()),
                history: vec![AttemptDetail {
                    number: 1,
                    started_at: "2026-11-30T07:31:02.200Z".into(),
                    outcome: "dead".into(),
                    status: Some(410),
                    duration_ms: 4,
                    error: None,
                    output: Some("\u{9b}31mred".into()),
                }],
            }],
            raw_body: body.map(<[u8]>::to_vec),
        }
    }

    fn text(s: &EventDetail, with_body: bool) -> String {
        let mut out = Vec::new();
        print(s, with_body, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_terminal_listing_escapes_every_provider_string() {
        let t = text(&event(Some(b"{\n\"a\":\"\x1b[31m\"}\xff")), true);
        for bad in ['\x1b', '\u{202e}', '\r', '\x07', '\u{9b}'] {
            assert!(!t.contains(bad), "{bad:?} in {t}");
        }
        assert!(
            t.contains(r"\x1b[2Jwipe") && t.contains(r"evt\u{202e}1"),
            "{t}"
        );
        assert!(
            t.contains(r"  target           paused since 2026-11-30T07:40:00.000Z by eve\x1b[2J"),
            "{t}"
        );
        // The body keeps its lines, indented; the invalid byte is announced.
        assert!(t.contains("  {\n  \"a\":\"\\x1b[31m\"}\u{fffd}\n"), "{t}");
        assert!(t.contains("not UTF-8"), "{t}");
    }

    #[test]
    fn a_pruned_event_says_so() {
        let t = text(&event(None), true);
        assert!(t.contains("pruned at 2026-12-30"), "{t}");
        assert!(pruned(&event(None)).0.contains("keep_payload"));
    }
}
