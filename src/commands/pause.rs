//! `hookinbox pause SOURCE/TARGET` and `hookinbox resume SOURCE/TARGET`: hold a target's
//! deliveries back, pending, and release them in their order. The pause is a row in the
//! inbox ([`store::pause`]), written in one short `BEGIN IMMEDIATE` transaction next to a
//! running `serve`, so it holds across restarts; serve's loop for the target notices a
//! change within a second and logs it.

use std::io::Write;

use serde::Serialize;

use crate::config::Offline;
use crate::store::Db;
use crate::store::Location;
use crate::terminal::escape;
use crate::{clock, store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The target, as SOURCE/TARGET (the names in the config; `hookinbox check` lists them)
    #[arg(value_name = "SOURCE/TARGET")]
    pub target: String,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub which: Args,
    /// Who is pausing it, kept with the pause and shown by `show` [default: your user name]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

/// What was done, and the state it left.
#[derive(Debug, Serialize)]
struct Report {
    source: String,
    target: String,
    /// Whether the target is paused now.
    paused: bool,
    /// False when it already was as asked.
    changed: bool,
    /// The pause in force (after `pause`) or the one just lifted (after `resume`).
    paused_at: Option<String>,
    paused_by: Option<String>,
    /// Its deliveries waiting now.
    pending: i64,
}

/// Pauses (`pause`) or resumes the target `args` names; `by` is who pauses it.
pub fn run(
    inbox: &Location,
    config: Option<&Offline>,
    pause: bool,
    args: &Args,
    by: Option<&str>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let conn = inbox.write()?;
    let (source, target) = known_target(conn.db(), config, &args.target, pause)?;
    let by = by.map_or_else(user_name, str::to_owned);
    let now = clock::iso_now();
    // One short write transaction: the pause as it was, the change, and the queue it holds
    // are read together.
    let (before, changed, pending) = conn.db().write(|tx| {
        let before = store::pause::all(tx)?
            .into_iter()
            .find(|p| p.source == source && p.target == target);
        let changed = store::pause::set(tx, &source, &target, pause, &by, &now)?;
        let pending = tx.pending_count(&source, &target)?;
        anyhow::Ok((before, changed, pending))
    })?;
    let (paused_at, paused_by) = match (&before, changed && pause) {
        (_, true) => (Some(now), Some(by)),
        (Some(p), false) => (Some(p.paused_at.clone()), Some(p.paused_by.clone())),
        (None, false) => (None, None),
    };
    let report = Report {
        source,
        target,
        paused: pause,
        changed,
        paused_at,
        paused_by,
        pending,
    };
    if args.json {
        crate::terminal::write_json(out, &report)?;
    } else {
        print(&report, out)?;
    }
    Ok(())
}

fn print(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let name = format!("{}/{}", r.source, r.target);
    let since = format!(
        "since {} by {}",
        escape(r.paused_at.as_deref().unwrap_or("-")),
        escape(r.paused_by.as_deref().unwrap_or("-"))
    );
    match (r.paused, r.changed) {
        (true, true) => writeln!(
            out,
            "paused {name}: its {} pending deliveries wait until `hookinbox resume {name}`; \
             attempts already running finish",
            r.pending
        ),
        (true, false) => writeln!(out, "{name} was already paused ({since}); nothing changed"),
        (false, true) => writeln!(
            out,
            "resumed {name} (paused {since}): its {} pending deliveries go out in their order; \
             a running serve notices within a second",
            r.pending
        ),
        (false, false) => writeln!(out, "{name} is not paused; nothing changed"),
    }
}

/// The (source, target) `text` names, refused unless it is a target of the config (or,
/// without one, of the inbox), with the names there are. A pair that is paused can always
/// be resumed, even after its target left the config: otherwise its row would be stuck.
fn known_target(
    db: Db,
    config: Option<&Offline>,
    text: &str,
    pause: bool,
) -> anyhow::Result<(String, String)> {
    // The same words as `replay`'s refusal of an unknown name.
    let (mut pairs, in_what, listed_as): (Vec<(String, String)>, String, &str) = match config {
        Some(c) => (
            c.sources
                .iter()
                .flat_map(|s| s.targets.iter().map(|t| (s.name.clone(), t.clone())))
                .collect(),
            format!("configured in {}", c.path.display()),
            "the configured",
        ),
        None => (
            db.delivery_targets()?,
            "in the inbox".to_owned(),
            "the inbox's",
        ),
    };
    let paused: Vec<(String, String)> = store::pause::all(db)?
        .into_iter()
        .map(|p| (p.source, p.target))
        .collect();
    let listed = pairs
        .iter()
        .map(|(s, t)| format!("{s}/{t}"))
        .collect::<Vec<_>>();
    let listed = if listed.is_empty() {
        "none".to_owned()
    } else {
        listed.join(", ")
    };
    let Some((source, target)) = text.split_once('/') else {
        anyhow::bail!(
            "\"{}\" is not SOURCE/TARGET; {listed_as} targets are: {listed}",
            escape(text)
        );
    };
    if !pause {
        pairs.extend(paused);
    }
    if !pairs.iter().any(|(s, t)| s == source && t == target) {
        anyhow::bail!(
            "no target \"{}\" {in_what}; {listed_as} targets are: {listed}",
            escape(text)
        );
    }
    Ok((source.to_owned(), target.to_owned()))
}

/// Who runs this command, for `paused_by`: the user behind `sudo` when there is one (that
/// is the person; root is only the means), else this process's user.
fn user_name() -> String {
    let uid = nix::unistd::getuid();
    if uid.is_root()
        && let Ok(name) = std::env::var("SUDO_USER")
        && !name.is_empty()
    {
        return name;
    }
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}
