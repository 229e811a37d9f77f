//! When the inbox cannot commit, the answer is 503 with Retry-After, never 2xx, and
//! nothing is half-stored; when the cause goes away, the same server stores again.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookinbox::oracle::Ledger;

use crate::load::{Answers, Load, check_inbox};
use crate::support::*;

/// A small tmpfs, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `size` (e.g. "2m") at `dir`, or says why it cannot (mounting
    /// needs root).
    fn mount(dir: &Path, size: &str) -> Result<SmallDisk, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(SmallDisk(dir.to_owned()))
        } else {
            Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes to `path` until the filesystem is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

async fn readyz(server: &TestServer) -> u16 {
    server
        .client
        .get(format!("{}/readyz", server.admin))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_full_disk_answers_503_never_2xx_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let disk = match SmallDisk::mount(&dir.path().join("disk"), "2m") {
        Ok(d) => d,
        Err(why) => {
            skip(
                "ROOT",
                "a_full_disk_answers_503",
                &format!("{why} (run the suite as root, as CI does)"),
            );
            return;
        }
    };
    let db = disk.0.join("inbox.db");
    let server = TestServer::start_at(dir, db, SERVER, ONE_SOURCE).await;
    let filler = disk.0.join("filler");
    fill(&filler);

    let requests: Vec<Signed> = (0..5)
        .map(|i| {
            let id = format!("msg_full_{i}");
            server.sign("sw", &id, &event_body(&id, &"z".repeat(16 * 1024)))
        })
        .collect();
    for req in &requests {
        let resp = send(&server.client, &server.base, "sw", req).await.unwrap();
        assert_eq!(
            resp.status().as_u16(),
            503,
            "a full disk must never be acknowledged"
        );
        assert_eq!(resp.headers()["retry-after"], "5");
    }
    assert_eq!(readyz(&server).await, 503);
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    let m = server.metrics().await;
    assert!(
        metric(&m, "hookinbox_writer_commit_failures_total") >= 1.0,
        "{m}"
    );

    std::fs::remove_file(&filler).unwrap();
    for req in &requests {
        assert_eq!(
            server.post("sw", req).await.0,
            200,
            "stores again once space is back"
        );
    }
    assert_eq!(readyz(&server).await, 200);
    assert_eq!(server.count("SELECT count(*) FROM events"), 5);
    assert_eq!(server.count("SELECT count(*) FROM deliveries"), 5);
    assert_eq!(integrity_check(&server.read()), "ok");
    server.stop().await;
    drop(disk);
}

#[tokio::test]
async fn an_operator_holding_the_write_lock_gets_503_not_a_hang_and_then_it_recovers() {
    let server = TestServer::start(ONE_SOURCE).await;
    let locker = rusqlite::Connection::open(&server.db).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let req = server.sign("sw", "msg_locked", &event_body("msg_locked", ""));
    assert_eq!(server.post("sw", &req).await.0, 503);

    locker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(server.post("sw", &req).await.0, 200);
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    server.stop().await;
}

/// A provider's retry of an event committed a moment ago is answered from the receiver's
/// recent identities, without the writer: it gets its 200 even while an operator holds the
/// write lock. Other bytes under the same id, and a new event, still need the store.
#[tokio::test]
async fn a_retry_of_a_just_committed_event_is_acknowledged_even_while_the_inbox_is_locked() {
    let server = TestServer::start(ONE_SOURCE).await;
    let req = server.sign("sw", "msg_retry", &event_body("msg_retry", ""));
    assert_eq!(server.post("sw", &req).await.0, 200);
    let locker = rusqlite::Connection::open(&server.db).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();

    assert_eq!(
        server.post("sw", &req).await.0,
        200,
        "the retry, from memory"
    );
    let changed = server.sign("sw", "msg_retry", &event_body("msg_retry", "changed"));
    assert_eq!(
        server.post("sw", &changed).await.0,
        503,
        "other bytes are a conflict only the store can record"
    );
    let new = server.sign("sw", "msg_new", &event_body("msg_new", ""));
    assert_eq!(server.post("sw", &new).await.0, 503);

    locker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        server.post("sw", &changed).await.0,
        409,
        "quarantined, once it can be"
    );
    assert_eq!(server.count("SELECT count(*) FROM events"), 1);
    assert_eq!(server.count("SELECT count(*) FROM conflicts"), 1);
    server.stop().await;
}

#[tokio::test]
async fn readiness_returns_after_a_failure_without_waiting_for_traffic() {
    let server = TestServer::start(ONE_SOURCE).await;
    let locker = rusqlite::Connection::open(&server.db).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let req = server.sign("sw", "msg_ready", &event_body("msg_ready", ""));
    assert_eq!(server.post("sw", &req).await.0, 503);
    assert_eq!(readyz(&server).await, 503, "unready while the lock is held");
    locker.execute_batch("ROLLBACK").unwrap();
    // No webhook arrives; the readiness probe itself must find the inbox writable again.
    assert_eq!(readyz(&server).await, 200);
    assert_eq!(server.count("SELECT count(*) FROM events"), 0);
    server.stop().await;
}

/// Load on an in-process server, recorded in `ledger`.
fn load_on(server: &TestServer, tag: &str, ledger: &Arc<Mutex<Ledger>>) -> Load {
    let scheme = first_scheme(&server.config.path);
    Load::start(&server.base, scheme, tag, 8, 1, ledger.clone())
}

/// (2xx, 503) answers that came between `from` and `to`.
fn answered(answers: &Answers, from: Instant, to: Instant) -> (usize, usize) {
    let during = answers.iter().filter(|(at, _)| *at >= from && *at < to);
    during.fold((0, 0), |(ok, refused), (_, status)| match status {
        Some(200) => (ok + 1, refused),
        Some(503) => (ok, refused + 1),
        other => panic!("only 200 and 503 are expected, got {other:?}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_full_disk_is_refused_then_ingest_resumes_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let disk = match SmallDisk::mount(&dir.path().join("disk"), "8m") {
        Ok(d) => d,
        Err(why) => {
            skip(
                "ROOT",
                "under_load_a_full_disk",
                &format!("{why} (run the suite as root, as CI does)"),
            );
            return;
        }
    };
    let server = TestServer::start_at(dir, disk.0.join("inbox.db"), SERVER, ONE_SOURCE).await;
    let ledger = Arc::default();
    let load = load_on(&server, "full", &ledger);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let filler = disk.0.join("filler");
    tokio::task::block_in_place(|| fill(&filler));
    let full = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answers = load.stop().await;

    let (_, refused) = answered(&answers, full, freed);
    let (ok_after, _) = answered(&answers, freed, Instant::now());
    eprintln!("full disk under load: {refused} refused while full, {ok_after} stored after");
    assert!(refused > 0, "a full disk is answered with 503");
    assert!(ok_after > 0, "ingest resumes without a restart");
    check_inbox(&server.db, &ledger.lock().unwrap());
    assert_eq!(integrity_check(&server.read()), "ok");
    server.stop().await;
    drop(disk);
}

/// The distribution's `sqlite3` shell on the inbox, as an operator would open it, with its
/// stdin kept open so that a transaction stays open between commands.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Shell {
    fn open(db: &Path, readonly: bool) -> Shell {
        let mut cmd = Command::new("sqlite3");
        // Wait for locks as an operator would be told to (the shell's default is not to
        // wait at all), and stop at the first error instead of leaving the test waiting.
        cmd.args(["-bail", "-cmd", ".timeout 10000"]);
        if readonly {
            cmd.arg("-readonly");
        }
        let mut child = cmd
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sqlite3 is installed (.ci/run installs it)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Shell {
            child,
            stdin,
            stdout,
        }
    }

    /// Runs `sql` and returns the first line it printed (empty if sqlite3 failed).
    fn run(&mut self, sql: &str) -> String {
        writeln!(self.stdin, "{sql}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    }

    fn quit(mut self) {
        writeln!(self.stdin, ".quit").unwrap();
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_write_lock_held_in_sqlite3_gets_503s_then_ingest_resumes() {
    let server = TestServer::start(ONE_SOURCE).await;
    let ledger = Arc::default();
    let load = load_on(&server, "lock", &ledger);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut shell = Shell::open(&server.db, false);
    assert_eq!(
        tokio::task::block_in_place(|| shell.run("BEGIN IMMEDIATE; SELECT 'locked';")),
        "locked"
    );
    let locked = Instant::now();
    // Held until requests are refused. The first batch to time out on the lock may hold no
    // event (a delivery claim, say); the requests queued behind it then wait through a
    // second timeout, so a 503 can take two of them or more on a busy machine.
    let deadline = locked + 8 * hookinbox::store::sqlite::schema::WRITE_LOCK_TIMEOUT;
    while load.answered_since(locked, 503) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        tokio::task::block_in_place(|| shell.run("ROLLBACK; SELECT 'released';")),
        "released"
    );
    let released = Instant::now();
    shell.quit();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answers = load.stop().await;

    let (_, refused) = answered(&answers, locked, released);
    let (ok_after, _) = answered(&answers, released, Instant::now());
    eprintln!("write lock under load: {refused} refused while held, {ok_after} stored after");
    assert!(
        refused > 0,
        "requests waiting on a held lock are answered 503 (none within {:?})",
        released - locked
    );
    assert!(ok_after > 0, "ingest resumes once the lock is released");
    check_inbox(&server.db, &ledger.lock().unwrap());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_long_read_in_sqlite3_never_fails_ingest_and_the_wal_shrinks_after() {
    let server = TestServer::start(ONE_SOURCE).await;
    // Its target is a closed port: each event would be a failed attempt and a retry 5 s
    // later, writes that kept the writer from ever going idle within the wait below on a
    // busy machine. Paused, the deliveries wait and the writer goes idle with the load.
    let config = server.config.path.to_str().unwrap().to_owned();
    let (code, out, err) =
        tokio::task::block_in_place(|| hookinbox(&["pause", "sw/app", "--config", &config]));
    assert_eq!(code, 0, "pause: {out}{err}");
    let wal = server.db.with_extension("db-wal");
    let ledger = Arc::default();
    let load = load_on(&server, "read", &ledger);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // An old snapshot held open: checkpoints cannot move past it, so the WAL only grows.
    let mut shell = Shell::open(&server.db, true);
    let counted = tokio::task::block_in_place(|| shell.run("BEGIN; SELECT count(*) FROM events;"));
    let wal_at_start = std::fs::metadata(&wal).unwrap().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let wal_at_end = std::fs::metadata(&wal).unwrap().len();
    tokio::task::block_in_place(|| shell.run("COMMIT; SELECT 'done';"));
    shell.quit();
    let answers = load.stop().await;

    let counted: usize = counted
        .parse()
        .unwrap_or_else(|_| panic!("the reader's count: {counted:?}"));
    assert!(
        wal_at_end > wal_at_start,
        "the open snapshot kept the WAL from being reused: {wal_at_start} -> {wal_at_end}"
    );
    let (ok, refused) = answered(&answers, answers[0].0, Instant::now());
    eprintln!(
        "long read under load: {ok} stored, {refused} refused; {counted} events in the reader's \
         snapshot; WAL {wal_at_start} -> {wal_at_end} bytes while it was open"
    );
    assert_eq!(refused, 0, "a reader never blocks ingest");
    assert!(answers.iter().all(|(_, s)| s.is_some()));
    check_inbox(&server.db, &ledger.lock().unwrap());

    // Once idle, the checkpoint truncates the WAL.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&wal).map_or(0, |m| m.len()) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        std::fs::metadata(&wal).map_or(0, |m| m.len()),
        0,
        "the idle checkpoint truncates the WAL after the reader left"
    );
    server.stop().await;
}
