//! Command targets (`command = ["/path/to/program", "arg"]`): a program run without a
//! shell, the raw body on its stdin, the metadata in environment variables, and nothing else
//! of hookinbox's environment (no secret leaks to the child).
//!
//! Exit 0 means delivered; any other exit, a signal or the timeout means "try again". On the
//! timeout the whole process group is killed, so a shell script's children go too.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::de::MapAccess;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{
    Attempt, AttemptResult, Context, Description, Destination, Forwarder, TargetKind, Disposition,
};
use crate::manual::{IfAbsent, Key};

/// The PATH a command gets: the system's directories, nothing from hookinbox's environment.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Bytes of stdout and of stderr kept with the attempt.
pub const OUTPUT_LIMIT: usize = 4096;
/// After the program exits, how long to wait for its output pipes to close (a background
/// child of it may hold them open).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// A command target's key, as written.
#[derive(Default)]
pub struct Written {
    argv: Vec<String>,
}

impl TargetKind for Written {
    const KEYS: &'static [Key] = &[
        Key {
            name: "command",
            form: "list of text (argv)",
            if_absent: IfAbsent::Off,
            meaning: "Run this program, without a shell, with the body on stdin and \
                          the event's metadata in HOOKINBOX_* variables. A relative path is \
                          relative to the configuration file; a bare name is looked up on \
                          PATH.",
        },
    ];

    const EXAMPLE: &'static str = "command = [\"/bin/true\"]";

    fn read<'de, A: MapAccess<'de>>(&mut self, _: &str, map: &mut A) -> Result<(), A::Error> {
        self.argv = map.next_value()?;
        Ok(())
    }

    fn check(self, cx: &Context) -> Result<Box<dyn Destination>, String> {
        let mut argv = self.argv;
        if argv.is_empty() || argv[0].is_empty() {
            return Err(format!(
                "{}.command must name a program: [\"/path/to/program\", \"arg\", …]",
                cx.at
            ));
        }
        // A relative program path is relative to the config file, like the store path;
        // a bare name is looked up on PATH.
        if argv[0].contains('/') && Path::new(&argv[0]).is_relative() {
            // components() drops the `.` inside ("examples/./on-event.sh" as shown by
            // check), keeping a leading one, which makes it a path rather than a name.
            argv[0] = cx
                .base
                .join(&argv[0])
                .components()
                .collect::<PathBuf>()
                .display()
                .to_string();
        }
        Ok(Box::new(CommandSettings { argv }))
    }
}

/// A command target, checked: its argv, the program's path resolved.
#[derive(Debug)]
pub struct CommandSettings {
    argv: Vec<String>,
}

impl Destination for CommandSettings {
    fn describe(&self) -> Description {
        Description {
            key: Written::NAME,
            json: self.argv.clone().into(),
            text: format!("{:?}", self.argv),
        }
    }

    /// Why the program cannot run, if it cannot: its deliveries would be retried for a day
    /// before they die.
    fn problem(&self) -> Result<(), String> {
        program_problem(&self.argv[0])
    }

    fn forwarder(&self, timeout: Duration) -> anyhow::Result<Box<dyn Forwarder>> {
        Ok(Box::new(CommandTarget {
            argv: self.argv.clone(),
            timeout,
        }))
    }
}

/// A command target, running: what [`run`] starts on each attempt.
pub struct CommandTarget {
    argv: Vec<String>,
    timeout: Duration,
}

impl Forwarder for CommandTarget {
    fn send<'a>(&'a self, a: &'a Attempt<'_>) -> BoxFuture<'a, AttemptResult> {
        Box::pin(run(&self.argv, self.timeout, a))
    }
}

/// Kills the process group when dropped, unless disarmed: an attempt abandoned at shutdown
/// must not leave its command running.
struct Group(Option<i32>);

impl Group {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

pub async fn run(argv: &[String], timeout: Duration, a: &Attempt<'_>) -> AttemptResult {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .env("PATH", PATH)
        .env("HOOKINBOX_IDEMPOTENCY_KEY", a.idempotency_key)
        // Ids hold no control characters (`scheme::check_id`): passed exactly as stored.
        .env("HOOKINBOX_EVENT_ID", a.event_id)
        .env("HOOKINBOX_SOURCE", a.source)
        .env("HOOKINBOX_TARGET", a.target)
        .env("HOOKINBOX_ATTEMPT", a.attempt.to_string())
        .env("HOOKINBOX_RECEIVED_AT", a.received_at)
        .env("HOOKINBOX_ORIGIN", a.origin)
        .env(
            "HOOKINBOX_HEADERS",
            serde_json::to_string(a.headers).expect("strings always serialise"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(addr) = a.remote_addr {
        cmd.env("HOOKINBOX_REMOTE_ADDR", env_text(addr).as_ref());
    }
    if let Some(t) = a.event_type {
        cmd.env("HOOKINBOX_EVENT_TYPE", env_text(t).as_ref());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        // Every variable is escaped above, so what fails here is the program itself: missing,
        // not executable, or the system out of processes.
        Err(e) => return AttemptResult::failed(format!("cannot start {:?}: {e}", argv[0])),
    };
    let mut group = Group(child.id().and_then(|id| i32::try_from(id).ok()));

    // stdin is written while the outputs are read: a child that fills its stdout pipe before
    // reading all of stdin would otherwise deadlock with us.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let body = a.body.to_vec();
    let writer = tokio::spawn(async move {
        // A child that ignores stdin closes it early: EPIPE is not an error here.
        let _ = stdin.write_all(&body).await;
    });
    let stdout = tokio::spawn(read_bounded(child.stdout.take().expect("stdout is piped")));
    let stderr = tokio::spawn(read_bounded(child.stderr.take().expect("stderr is piped")));

    let waited = tokio::time::timeout(timeout, child.wait()).await;
    if matches!(waited, Ok(Ok(_))) {
        // Reaped: its pid may be reused, so the group is no longer ours to signal, even if
        // this attempt is abandoned while its output is read.
        group.0 = None;
    }
    let ambiguous = waited.is_err();
    let (verdict, status, error) = match waited {
        Ok(Ok(exit)) => match exit.code() {
            Some(0) => (Disposition::Delivered, Some(0), None),
            Some(code) => (
                Disposition::Retry { after: None },
                Some(i64::from(code)),
                Some(format!("exited with status {code}")),
            ),
            None => (
                Disposition::Retry { after: None },
                None,
                Some(format!("ended by a signal ({exit})")),
            ),
        },
        Ok(Err(e)) => (
            Disposition::Retry { after: None },
            None,
            Some(format!("waiting for the command: {e}")),
        ),
        Err(_) => {
            group.kill();
            let _ = child.wait().await;
            (
                Disposition::Retry { after: None },
                None,
                Some(format!(
                    "timed out after {timeout:?}; its process group was killed"
                )),
            )
        }
    };
    writer.abort();
    let grace = tokio::time::sleep(OUTPUT_GRACE);
    tokio::pin!(grace);
    let mut out = String::new();
    for (name, task) in [("stdout", stdout), ("stderr", stderr)] {
        let abort = task.abort_handle();
        let text = tokio::select! {
            r = task => r.ok(),
            () = &mut grace => { abort.abort(); None }
        };
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            out.push_str(&format!("{name}:\n{text}\n"));
        }
    }
    // The program itself has ended (reaped above, or killed and reaped on the timeout).
    group.0 = None;
    AttemptResult {
        disposition: verdict,
        status,
        error,
        output: (!out.is_empty()).then_some(out),
        ambiguous,
    }
}

/// Why `program` cannot run, if it cannot. A bare name is looked up on [`PATH`].
fn program_problem(program: &str) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    let path = if program.contains('/') {
        std::path::PathBuf::from(program)
    } else {
        PATH
            .split(':')
            .map(|dir| Path::new(dir).join(program))
            .find(|p| p.exists())
            .ok_or_else(|| {
                format!(
                    "command {program:?} is not on the PATH commands run with ({}); write its \
                     full path",
                    PATH
                )
            })?
    };
    let meta = std::fs::metadata(&path).map_err(|e| format!("command {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("command {} is not a file", path.display()));
    }
    access(&path, AccessFlags::X_OK).map_err(|_| {
        format!(
            "command {} is not executable by this user (chmod +x it)",
            path.display()
        )
    })
}

/// Provider text on its way into the environment, with control characters written out
/// (`\x00`, `\n`, as `terminal::escape_controls` does): an environment cannot hold a NUL
/// byte at all, so one in an event type (`"invoice.paid\u0000"` is valid JSON) would make
/// every attempt fail to start, and a newline would confuse whoever parses `env`.
/// Everything else, invisible characters included, is passed as it is.
fn env_text(s: &str) -> std::borrow::Cow<'_, str> {
    crate::terminal::escape_controls(s)
}

/// Reads everything (so the child never blocks on a full pipe) and keeps the first
/// [`OUTPUT_LIMIT`] bytes.
async fn read_bounded(mut r: impl AsyncRead + Unpin) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    let mut truncated = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if truncated {
        text.push_str("…(truncated)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event type may hold a NUL: the command still starts, and sees it written out.
    #[tokio::test]
    async fn a_nul_in_provider_text_never_stops_the_command_from_starting() {
        let a = Attempt {
            source: "sw",
            target: "app",
            event_id: "evt_1",
            event_type: Some("invoice.paid\0"),
            received_at: "2026-12-01T00:00:00.000Z",
            idempotency_key: "hk_0",
            attempt: 1,
            body: b"{}",
            headers: &[],
            remote_addr: None,
            origin: "webhook",
        };
        let argv = ["/bin/sh", "-c", "printf %s \"$HOOKINBOX_EVENT_TYPE\""].map(String::from);
        let r = run(&argv, Duration::from_secs(10), &a).await;
        assert_eq!(r.disposition, Disposition::Delivered, "{r:?}");
        assert_eq!(r.output.as_deref(), Some("stdout:\ninvoice.paid\\x00\n"));
    }

    #[test]
    fn only_control_characters_are_written_out() {
        assert_eq!(env_text("a\0b\nc\u{85}d"), "a\\x00b\\nc\\u{85}d");
        // Invisible and bidi characters are text an id may hold: passed as they are.
        assert_eq!(
            env_text("gnp.\u{202e}exe\u{200b}"),
            "gnp.\u{202e}exe\u{200b}"
        );
    }
}
