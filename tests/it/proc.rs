//! The real `hookinbox serve` binary as a child process, for the tests where a process has
//! to die (SIGKILL, a failpoint crash) or receive a signal.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::support::*;

/// The real `hookinbox serve`, with its stderr drained so that it never blocks on a pipe.
pub struct Proc {
    child: Child,
    pub public: SocketAddr,
    /// Everything it wrote to stderr so far.
    pub logs: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Proc {
    pub fn spawn(config: &Path) -> Proc {
        Self::spawn_env(config, &[], &[])
    }

    pub fn spawn_with(config: &Path, extra: &[&str]) -> Proc {
        Self::spawn_env(config, extra, &[])
    }

    /// Starts `hookinbox serve --config CONFIG EXTRA…` with `env` added, and waits until
    /// it listens.
    pub fn spawn_env(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookinbox"))
            .args(["serve", "--config"])
            .arg(config)
            .args(extra)
            .env("RUST_LOG", "warn,hookinbox::commands::serve=info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the hookinbox binary starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let public = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| {
                    panic!("hookinbox exited before listening: {:?}", child.try_wait())
                })
                .unwrap();
            logs.lock().unwrap().push(line.clone());
            // The text format says public=ADDR; the JSON format has it as a field.
            let text = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("public="))
                .map(str::to_owned);
            let json = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|v| v["fields"]["public"].as_str().map(str::to_owned));
            if let Some(addr) = text.or(json) {
                break addr.parse().unwrap();
            }
        };
        let sink = logs.clone();
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Proc {
            child,
            public,
            logs,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (HUP, TERM, …).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit status, if the process has ended.
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Every line it wrote, once it has ended (its last words included).
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    pub fn last_logs(mut self) -> Vec<String> {
        self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        std::mem::take(&mut self.logs.lock().unwrap())
    }

    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and the exit status of a graceful shutdown.
    pub fn sigterm(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.child.wait().unwrap()
    }
}

/// A test that fails must not leave its server running.
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config file for the real binary in a temporary directory.
pub struct Deployed {
    _dir: tempfile::TempDir,
    pub db: PathBuf,
    pub config: PathBuf,
    /// The source's scheme, to sign requests as its provider would.
    pub scheme: Arc<hookinbox::scheme::Scheme>,
    /// The inbox, as an operator asks it by hand.
    pub inbox: Inbox,
}

pub fn deploy(sources: &str) -> Deployed {
    deploy_store("", sources)
}

/// [`deploy`] with the inbox on `backend` (a fresh database for `test` on PostgreSQL);
/// None when there is no PostgreSQL server, after `skip` said so.
pub async fn deploy_on(backend: Backend, test: &str, sources: &str) -> Option<Deployed> {
    Some(match backend {
        Backend::Sqlite => deploy(sources),
        Backend::Postgres => {
            let url = fresh_database(&postgres(test)?).await;
            let mut d = deploy_store(&pg_store(&url), sources);
            d.inbox = Inbox::Postgres(url);
            d
        }
    })
}

/// [`deploy`] with more lines in `[store]` (see `pg_store`).
pub fn deploy_store(store: &str, sources: &str) -> Deployed {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("inbox.db");
    let config = dir.path().join("hookinbox.toml");
    std::fs::write(&config, config_text_store(SERVER, &db, store, sources)).unwrap();
    let scheme = first_scheme(&config);
    Deployed {
        _dir: dir,
        inbox: Inbox::Sqlite(db.clone()),
        db,
        config,
        scheme,
    }
}

/// The `sw` source forwarding to `url`, with short timeouts and leases so that a crash
/// mid-attempt is recovered within seconds.
pub fn forwarding_to(url: &str) -> String {
    forwarding(
        url,
        "timeout = \"2s\"\nlease = \"7s\"\nretry = [\"200ms\", \"200ms\", \"200ms\", \"200ms\", \"200ms\"]\nconcurrency = 16",
    )
}
