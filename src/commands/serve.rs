//! `hookinbox serve`: the public listener, the admin listener and the writer, until SIGTERM
//! or SIGINT.
//!
//! Start-up order matters for the promise: the inbox is opened and migrated first (a bad
//! path fails before any port is bound), then both listeners are bound (or taken from the
//! sockets systemd passed, [`crate::activation`]), then the writer is
//! pinged, and only then is the service ready. Before all of it, the inbox's lock
//! (`store::lock`): one serve per inbox. Shutdown runs in reverse: stop accepting,
//! let in-flight requests finish (each is answered 2xx only after its commit, or 503), then
//! let the writer commit what was queued and close the inbox.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use anyhow::Context as _;
use sd_notify::NotifyState;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, oneshot, watch};
use tokio::task::JoinHandle;

use super::reload;
use crate::activation;
use crate::admin::Admin;
use crate::config::{self, Config, Source};
use crate::deliver::{self, Deliverer};
use crate::metrics::Metrics;
use crate::receive::allow;
use crate::receive::listener::{self, Limits};
use crate::receive::tls;
use crate::receive::{BodyBudget, Outcome, Receiver};
use crate::store::{self, Store, retention};

/// Marks dead the pending deliveries of targets no longer configured (see
/// [`queue::retire_unknown_targets`]).
async fn retire_unknown_targets(
    store: &Store,
    sources: &[Arc<Source>],
    alerts: &[config::Target],
) -> anyhow::Result<()> {
    let pairs: Vec<(String, String)> = sources
        .iter()
        .flat_map(|s| s.targets.iter().map(|t| (s.name.clone(), t.name.clone())))
        .chain(
            alerts
                .iter()
                .map(|t| (crate::alerts::SOURCE.to_owned(), t.name.clone())),
        )
        .collect();
    let n = store.retire_unknown_targets(pairs).await?;
    if n > 0 {
        tracing::warn!(
            deliveries = n,
            "deliveries for targets no longer configured are dead; \
            `hookinbox replay --dead` sends them once the target is back"
        );
    }
    Ok(())
}

/// With replicas: once [`store::gaps::LIVE`] has passed, whether the replicas that looked
/// live at the start were; a gap found is logged and handed to recovery. Not again after a
/// failure: the gap is then not recorded (the log says so).
async fn confirm_receiving(
    store: Store,
    unconfirmed: Vec<store::gaps::Unconfirmed>,
    found: tokio::sync::mpsc::UnboundedSender<store::gaps::Gap>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        () = tokio::time::sleep(store::gaps::LIVE) => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    for u in unconfirmed {
        let source = u.source.clone();
        match store.confirm_receiving(u).await {
            Ok(Some(gap)) => {
                gap.warn("the source was not receiving: a gap");
                let _ = found.send(gap);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(source, error = %format!("{e:#}"),
                "could not confirm that another replica was receiving; a gap may be missing"),
        }
    }
}

/// What `check` would print about `config`: warnings, and the problems that will fail
/// at run time (a missing command target), which do not stop receiving.
fn log_advice(config: &Config) {
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    for problem in config.problems() {
        tracing::error!("{problem}");
    }
}

/// Writes how the last reload went where `hookinbox reload` looks (`reload::path_for`). A
/// failure to write is logged: the reload itself stands, and `hookinbox reload` then times
/// out with a message pointing at the log.
fn report_reload(db: &std::path::Path, reloads: u64, result: anyhow::Result<String>) {
    let status = match result {
        Ok(applied) => reload::Status::new(reloads, true, applied),
        Err(e) => reload::Status::new(reloads, false, format!("{e:#}")),
    };
    if let Err(e) = reload::write_status(db, &status) {
        tracing::warn!(error = %e, path = %reload::path_for(db).display(),
            "could not write the reload status; `hookinbox reload` will not hear the answer");
    }
}

/// How often, and by how much, the start timeout is extended while the inbox opens.
const EXTEND_EVERY: Duration = Duration::from_secs(10);
const EXTEND_BY_USEC: u32 = 30_000_000;

/// Keeps telling systemd that start-up is progressing (`EXTEND_TIMEOUT_USEC`) until the
/// returned guard is dropped. Outside systemd the notifications go nowhere.
fn extend_start_timeout() -> std::sync::mpsc::Sender<()> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let _ = std::thread::Builder::new()
        .name("hookinbox-opening".into())
        .spawn(move || {
            // Ends when the sender is dropped (recv fails) or sends.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                wait.recv_timeout(EXTEND_EVERY)
            {
                notify(&[NotifyState::ExtendTimeoutUsec(EXTEND_BY_USEC)]);
            }
        });
    done
}

/// Tells systemd; a failure to (no socket, a full buffer) must not stop the service.
fn notify(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}

/// Connections the admin listener serves at once: it has one scraper and a health checker.
const ADMIN_MAX_CONNECTIONS: usize = 16;
/// How long a shutdown waits for the writer to commit what is queued and close the inbox.
const WRITER_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// A started server.
pub struct Running {
    pub public_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    receiver: Arc<Receiver>,
    deliverer: Arc<Mutex<Option<Deliverer>>>,
    store: Store,
    delivery: Arc<deliver::Health>,
    retention: retention::Settings,
    web: Arc<crate::web::Web>,
    board: Arc<crate::alerts::Board>,
    /// The providers' address lists sources allow.
    allow: Arc<allow::Lists>,
    /// The sources, for the heartbeat and recovery.
    sources: watch::Sender<Vec<Arc<Source>>>,
    tls: Option<tls::Acceptor>,
    /// The certificate files the file watcher follows (files-based TLS only).
    tls_files: Option<watch::Sender<config::Tls>>,
    /// What a reload cannot change without a restart.
    restart_only: config::RestartOnly,
    stop: oneshot::Sender<()>,
    done: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, drains, flushes the writer; returns when the inbox is closed.
    pub async fn shutdown(self) {
        let Running {
            stop,
            done,
            receiver,
            deliverer,
            store,
            web,
            ..
        } = self;
        // These hold writer handles: the writer closes the inbox once the last one is gone.
        drop((receiver, deliverer, store, web));
        let _ = stop.send(());
        let _ = done.await;
    }

    /// Feeds the systemd watchdog (period `d`) while the writer drains a ping and every
    /// delivery loop turns, in a task of its own so that a reload cannot delay it. A check
    /// may take half the period and the next starts a quarter later, so feeds are never more
    /// than three quarters of a period apart while the service works; a wedged service
    /// stops feeding and is restarted.
    fn feed_watchdog(&self, d: Duration) -> JoinHandle<()> {
        let (store, delivery) = (self.store.clone(), self.delivery.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(d / 4).await;
                let drains = tokio::time::timeout(d / 2, store.ping())
                    .await
                    .is_ok_and(|r| r.is_ok());
                match (drains, delivery.stuck()) {
                    (true, None) => notify(&[NotifyState::Watchdog]),
                    (false, _) => tracing::error!(
                        "not feeding the watchdog: the writer does not drain its queue"
                    ),
                    (true, Some(t)) => tracing::error!(
                        "not feeding the watchdog: the delivery loop of {t} is stuck"
                    ),
                }
            }
        })
    }

    /// Applies a new configuration's sources (schemes, secrets, targets, ordering,
    /// retention, TLS files, trusted proxies) without dropping anything in flight: requests
    /// already running finish with the configuration they started with. Listener and store
    /// settings need a restart; a change to them is named in the log and the answer, not
    /// applied.
    ///
    /// All or nothing: everything that can fail (TLS files, the targets' clients, retiring
    /// the deliveries of removed targets, a write) is done before anything is switched, and
    /// the switch itself cannot fail. Returns what was applied, in words.
    pub async fn reload(&self, config: Config) -> anyhow::Result<String> {
        let needs_restart = self.restart_only.differences(&config.restart_only());
        let tls_config = match (&self.tls, &config.server.tls) {
            (Some(_), Some(files)) => Some(
                files
                    .server_config()
                    .map_err(|e| anyhow::anyhow!("server.tls: {e}"))?,
            ),
            _ => None,
        };
        let sources: Vec<Arc<Source>> = config.sources.into_iter().map(Arc::new).collect();
        let planned =
            Deliverer::plan(&sources, &config.alerts).context("setting up the delivery targets")?;
        let mut deliverer = self.deliverer.lock().await;
        let Some(deliverer) = deliverer.as_mut() else {
            anyhow::bail!("shutting down");
        };
        // The last fallible step. Done before the switch, the old loops may still be
        // finishing attempts of a removed target; they record those, and claim nothing
        // retired. (Not on PostgreSQL: replicas in the middle of a rollout disagree about
        // which targets exist, and one must not retire what the others deliver.)
        retire_unknown_targets(&self.store, &sources, &config.alerts)
            .await
            .context("retiring the deliveries of removed targets")?;

        // First, so that the new sources' series are there before their first request.
        self.metrics
            .configure(&sources, &config.alerts, &Outcome::COUNTED);
        // A provider list a source now names is read from the inbox before the source takes
        // a request; the task that fetches the lists hears of the new sources below.
        self.allow
            .load_kept(&self.store, &self.metrics, &sources)
            .await;
        deliverer.switch(planned);
        self.receiver
            .reload(&sources, config.server.trusted_proxies.clone());
        if let (Some(acceptor), Some(tls_config)) = (&self.tls, tls_config) {
            acceptor.swap(tls_config);
            if let Some(files) = &config.server.tls {
                served_files(&self.metrics, files);
                if let Some(follow) = &self.tls_files {
                    let _ = follow.send(files.clone());
                }
            }
        }
        self.retention.replace(&sources);
        self.web.reload(&sources, &config.alerts);
        self.board.configure(&sources, &config.alerts);
        let _ = self.sources.send(sources.clone());
        let targets: usize = sources.iter().map(|s| s.targets.len()).sum();
        let mut applied = format!("{} sources with {targets} targets", sources.len());
        if !needs_restart.is_empty() {
            let keys = needs_restart.join(", ");
            tracing::warn!("{keys} changed; only a restart applies them");
            applied.push_str(&format!(" ({keys} changed: a restart applies them)"));
        }
        tracing::info!("reloaded the configuration: {applied}");
        Ok(applied)
    }
}

/// How many connections the kernel queues for `accept` (capped by `net.core.somaxconn`,
/// 4096 on current kernels); the same as `Backlog=` in hookinbox.socket. Past it, the
/// kernel drops a new peer's SYN and the peer sends it again only after a second. tokio's
/// `bind` asks for 1,024: with 2,048 clients trickling bodies and reconnecting when closed
/// for room, the queue overflowed twelve thousand times in ten seconds and a provider's
/// signed request waited 1.0-1.2 s (BENCHMARKS.md, "Bounded resources").
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`]; `key` and `why` name it and the likely
/// fix in the error.
fn bind(key: &str, addr: SocketAddr, why: &str) -> anyhow::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    };
    let listener = socket.and_then(|s| {
        // As std's bind does: a restart may bind while the last process's connections
        // linger in TIME_WAIT.
        s.set_reuseaddr(true)?;
        s.bind(addr)?;
        s.listen(LISTEN_BACKLOG)
    });
    listener.map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::PermissionDenied {
            why
        } else {
            "is another process using the port?"
        };
        anyhow::Error::new(e).context(format!("binding {key} {addr} ({why})"))
    })
}

/// The listener for `key`: the socket systemd passed for it, or `addr` bound now.
async fn listen(
    key: &str,
    addr: SocketAddr,
    passed: Option<activation::Passed>,
) -> anyhow::Result<TcpListener> {
    let Some(passed) = passed else {
        // The packaged unit has no capabilities.
        return bind(
            key,
            addr,
            "ports below 1024 need privilege: enable hookinbox.socket, which binds \
             the port and passes it to the service",
        );
    };
    tracing::info!(address = %passed.addr, fd_name = %passed.name,
        "{key}: listening on the socket systemd passed (socket activation), not on {addr}");
    // The config's address is the one `check` shows and `hookinbox sign` puts in its URLs.
    // (Port 0, "any", is for tests.)
    if addr.port() != 0 && passed.addr.port() != addr.port() {
        tracing::warn!(
            "systemd passed the socket for {key} on {}, but {key} says {addr}; \
             `check` and `hookinbox sign` use the config's: set {key} = \"{}\"",
            passed.addr,
            passed.addr
        );
    }
    let socket = passed.listener;
    socket
        .set_nonblocking(true)
        .with_context(|| format!("the socket systemd passed for {key}"))?;
    TcpListener::from_std(socket).with_context(|| format!("the socket systemd passed for {key}"))
}

/// Opens the inbox, binds both listeners and starts serving.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    start_with(config, activation::Inherited::none()).await
}

/// [`start`] with the listeners systemd passed, where it did.
pub async fn start_with(
    config: Config,
    inherited: activation::Inherited,
) -> anyhow::Result<Running> {
    // reqwest is built without a default crypto provider so that only ring is in the tree;
    // this installs it (a second call, as in tests, finds it installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = Arc::new(Metrics::new());
    let location = store::Location::of(&config.store);
    // Opening migrates, which may rewrite a large SQLite inbox once (minutes for many GiB):
    // long past systemd's start timeout, which would kill it and start the rewrite again,
    // forever.
    let opening = extend_start_timeout();
    let opened = location.serve(metrics.clone()).await;
    drop(opening);
    let (store, held) = opened?;
    let inbox_name = location.name();

    let public = listen("server.listen", config.server.listen, inherited.public).await?;
    let admin = listen("admin.listen", config.admin.listen, inherited.admin).await?;
    let http01 = match config.server.acme.as_ref().and_then(|a| a.http01_listen) {
        Some(addr) => Some(bind(
            "server.tls.acme.http01_listen",
            addr,
            "port 80 needs privilege: CAP_NET_BIND_SERVICE, or a port above 1024 that \
             the load balancer forwards 80 to",
        )?),
        None => None,
    };
    let public_addr = public.local_addr()?;
    let admin_addr = admin.local_addr()?;
    store
        .ping()
        .await
        .context("the inbox writer did not start")?;

    // ACME's certificates are served through a resolver that the ACME task fills; files
    // through an acceptor swapped when they change.
    let certificates = config
        .server
        .acme
        .as_ref()
        .map(|_| Arc::new(tls::Certificates::default()));
    let tls = match (&config.server.tls, &certificates) {
        (Some(files), _) => {
            let acceptor =
                tls::Acceptor::new(files).map_err(|e| anyhow::anyhow!("server.tls: {e}"))?;
            served_files(&metrics, files);
            Some(acceptor)
        }
        (None, Some(certs)) => Some(tls::Acceptor::with_config(
            tls::Certificates::server_config(certs.clone()),
        )),
        (None, None) => None,
    };
    let tls_files = match (&config.server.tls, &tls) {
        (Some(files), Some(acceptor)) => {
            let (follow, files) = watch::channel(files.clone());
            let gauge = metrics.certificate_expiry.clone();
            tokio::spawn(tls::follow_files(acceptor.clone(), files, move |info| {
                gauge.set(info.not_after);
            }));
            Some(follow)
        }
        _ => None,
    };
    let room = |listener| {
        Some(
            metrics
                .closed_for_room
                .get_or_create(&crate::metrics::ListenerLabels { listener })
                .clone(),
        )
    };
    let limits = Limits {
        header_timeout: config.server.header_timeout,
        max_connections: config.server.max_connections,
        tls: tls.clone(),
        closed_for_room: room("public"),
    };
    let admin_limits = Limits {
        header_timeout: config.server.header_timeout,
        max_connections: ADMIN_MAX_CONNECTIONS,
        tls: None,
        closed_for_room: room("admin"),
    };
    let restart_only = config.restart_only();
    let sources: Vec<Arc<Source>> = config.sources.into_iter().map(Arc::new).collect();
    metrics.configure(&sources, &config.alerts, &Outcome::COUNTED);
    retire_unknown_targets(&store, &sources, &config.alerts).await?;
    let deliverer = Deliverer::start(&sources, &config.alerts, store.clone(), metrics.clone())
        .context("setting up the delivery targets")?;
    let delivery_health = deliverer.health();
    let delivery = delivery_health.clone();
    let deliverer = Arc::new(Mutex::new(Some(deliverer)));
    let retention = retention::Settings::new(&sources);
    let (retention_stop, retention_stopped) = watch::channel(false);
    let budget = Arc::new(BodyBudget::new(config.server.body_budget));
    let watch = Arc::new(crate::recover::watch::Watch::default());
    let (sources_tx, sources_rx) = watch::channel(sources.clone());
    let (heartbeat_stop, heartbeat_stopped) = watch::channel(false);
    let board = Arc::new(crate::alerts::Board::new(&sources, &config.alerts));
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(retention::run_periodically(
        store.clone(),
        retention.clone(),
        config.store.retention_interval,
        retention_stopped.clone(),
    )));
    // What each source missed since it was last seen receiving (a stop, a crash), recorded
    // before the first request is taken. With replicas, a replica is its host and public
    // address, and a source missed something only while no replica was receiving it.
    let names: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
    let replica = format!(
        "{}/{public_addr}",
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "?".into())
    );
    let (gaps_at_start, unconfirmed) = store
        .start_receiving(replica.clone(), names)
        .await
        .context("recording when each source was last receiving")?;
    for gap in &gaps_at_start {
        gap.warn("the source was not receiving: a gap");
    }
    // The replica's name holds the ACME lease, so that a restart of this replica takes
    // back a lease it held when it stopped mid-order. With the machine's id: VMs cloned
    // from one image may share a hostname and listen address, and two holders of one name
    // would both order. Hashed with the program's name, as machine-id(5) asks of an id
    // that leaves the machine (here into a shared inbox).
    let holder = match std::fs::read_to_string("/etc/machine-id") {
        Ok(id) if !id.trim().is_empty() => {
            let digest = ring::digest::digest(
                &ring::digest::SHA256,
                format!("hookinbox acme lease {}", id.trim()).as_bytes(),
            );
            format!("{replica}#{}", hex::encode(&digest.as_ref()[..8]))
        }
        _ => replica.clone(),
    };
    let acme_task = match (config.server.acme.clone(), &certificates) {
        (Some(settings), Some(certs)) => Some(
            crate::acme::Acme {
                settings,
                store: store.clone(),
                certs: certs.clone(),
                metrics: metrics.clone(),
                holder,
                spread: match config.store.backend {
                    config::Backend::Postgres(_) => crate::acme::CHALLENGE_SPREAD,
                    _ => Duration::ZERO,
                },
            }
            .spawn(),
        ),
        _ => None,
    };
    let (gap_tx, gap_rx) = tokio::sync::mpsc::unbounded_channel();
    if !unconfirmed.is_empty() {
        tasks.push(tokio::spawn(confirm_receiving(
            store.clone(),
            unconfirmed,
            gap_tx.clone(),
            retention_stopped.clone(),
        )));
    }
    let heartbeat_task = tokio::spawn(crate::recover::watch::heartbeat(
        store.clone(),
        replica,
        watch.clone(),
        sources_rx.clone(),
        gap_tx,
        heartbeat_stopped,
    ));
    // With replicas each recovers the gaps it recorded (a down gap is recorded by the one
    // replica that started when none was receiving) and runs its own safety net.
    let recover_task = tokio::spawn(crate::recover::auto::run(
        sources_rx.clone(),
        store.clone(),
        metrics.clone(),
        gaps_at_start,
        gap_rx,
        retention_stopped.clone(),
    ));
    let learnt = store
        .read(|db| Ok(store::learnt::all(db)?))
        .await
        .context("reading the secrets sources learnt from handshakes")?;
    tasks.push(tokio::spawn(crate::alerts::run(
        board.clone(),
        store.clone(),
        metrics.clone(),
        retention_stopped.clone(),
    )));
    let web = Arc::new(crate::web::Web::new(
        store.clone(),
        &config.admin,
        &sources,
        &config.alerts,
        board.clone(),
    ));
    let receiver = Arc::new(Receiver::new(
        &sources,
        &config.server,
        store.clone(),
        metrics.clone(),
        budget.clone(),
        learnt,
        watch,
    ));
    // The providers' address lists, as kept, before the listener takes a request; then
    // fetched afresh in the background.
    let allow = receiver.allow_lists();
    allow.load_kept(&store, &metrics, &sources).await;
    let allow_task = tokio::spawn(allow::run(
        allow.clone(),
        store.clone(),
        metrics.clone(),
        sources_rx,
        retention_stopped.clone(),
    ));

    let admin_handler = Arc::new(Admin {
        metrics: metrics.clone(),
        web: web.clone(),
        store: store.clone(),
        delivery: delivery_health,
        budget,
        certificates: certificates.clone(),
        settled_counted: Default::default(),
    });
    let source_count = sources.len();

    let (receiver_task, deliverer_task) = (receiver.clone(), deliverer.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let (admin_stop, admin_stopped) = oneshot::channel::<()>();
    let (public_stop, public_stopped) = oneshot::channel::<()>();
    // HTTP-01's listener answers only the ACME server's requests, with the admin
    // listener's small connection cap.
    let (http01_stop, http01_stopped) = oneshot::channel::<()>();
    let http01_task = match (http01, &certificates) {
        (Some(listener), Some(certs)) => {
            let handler = Arc::new(crate::acme::http01::Http01(certs.clone()));
            let limits = Limits {
                header_timeout: config.server.header_timeout,
                max_connections: ADMIN_MAX_CONNECTIONS,
                tls: None,
                closed_for_room: None,
            };
            Some(tokio::spawn(listener::serve(
                listener,
                limits,
                handler,
                async {
                    let _ = http01_stopped.await;
                },
            )))
        }
        _ => None,
    };
    let done = tokio::spawn(async move {
        let admin_task = tokio::spawn(listener::serve(admin, admin_limits, admin_handler, async {
            let _ = admin_stopped.await;
        }));
        let public_task = tokio::spawn(listener::serve(public, limits, receiver_task, async {
            let _ = public_stopped.await;
        }));
        let _ = stopped.await;
        // The listener and the worker stop together: no new connections and no new claims;
        // in-flight requests and attempts get their drain time.
        let _ = public_stop.send(());
        let _ = retention_stop.send(true);
        let deliverer = deliverer_task.lock().await.take();
        let drain = async {
            if let Some(d) = deliverer {
                d.shutdown().await;
            }
        };
        // Retention and alerts have seen the stop too.
        let ((), _, _) = tokio::join!(drain, public_task, futures_util::future::join_all(tasks));
        // Recovery may be waiting out a provider's rate limit: it is idempotent, so it
        // stops where it is.
        recover_task.abort();
        let _ = recover_task.await;
        // A list's fetch may be waiting on the provider; what it did not keep is fetched
        // again at the next start.
        allow_task.abort();
        let _ = allow_task.await;
        // An order cut short is taken up again at the next start (its lease is this
        // replica's); what it obtained is kept before it is served.
        if let Some(task) = acme_task {
            task.abort();
            let _ = task.await;
        }
        let _ = http01_stop.send(());
        if let Some(task) = http01_task {
            let _ = task.await;
        }
        // The heartbeat writes the clean stop: no request is taken now. Bounded like the
        // writer's flush: a stalled disk must not hold the shutdown.
        let _ = heartbeat_stop.send(true);
        let abort = heartbeat_task.abort_handle();
        if tokio::time::timeout(WRITER_FLUSH_TIMEOUT, heartbeat_task)
            .await
            .is_err()
        {
            abort.abort();
        }
        let _ = admin_stop.send(());
        let _ = admin_task.await;
        // Every Writer handle is gone with the listeners' handlers and the worker: the
        // thread commits what is queued, closes the inbox, and ends. A connection still stuck
        // past the drain keeps a handle alive; it is bounded by the body timeout and the
        // commit wait, and so is this. (On PostgreSQL every answered event is committed
        // already; the batchers end with their last handle.)
        // Only then may another serve open the inbox.
        held.close(WRITER_FLUSH_TIMEOUT).await;
    });
    tracing::info!(public = %public_addr, admin = %admin_addr, inbox = %inbox_name,
        sources = source_count, "listening");
    Ok(Running {
        public_addr,
        admin_addr,
        metrics,
        receiver,
        deliverer,
        store,
        delivery,
        retention,
        web,
        board,
        allow,
        sources: sources_tx,
        tls,
        tls_files,
        restart_only,
        stop,
        done,
    })
}

/// Sets the expiry gauge from the certificate files now served.
fn served_files(metrics: &Metrics, files: &config::Tls) {
    match config::CertInfo::of_pem_file(&files.cert) {
        Ok(info) => {
            metrics.certificate_expiry.set(info.not_after);
        }
        Err(e) => tracing::warn!(error = %e, "reading the served certificate's expiry"),
    }
}

/// Runs until SIGTERM or SIGINT; SIGHUP reloads the configuration from `path`.
pub async fn run(config: Config, inherited: activation::Inherited) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // Installed before the server starts, so that no signal finds the default action.
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    log_advice(&config);
    let path = config.path.clone();
    let db = config.store.path.clone();
    let mut sources = config.sources.len();
    let running = start_with(config, inherited).await?;
    // The inbox is open and migrated, both listeners are bound, the writer answered: ready.
    // (Outside systemd, NOTIFY_SOCKET is unset and these do nothing.)
    let serving = |sources: usize| format!("serving {sources} sources on {}", running.public_addr);
    notify(&[NotifyState::Ready, NotifyState::Status(&serving(sources))]);
    // `hookinbox reload` (the unit's ExecReload) reads how each reload went from here.
    let mut reloads = 0;
    report_reload(&db, reloads, Ok("started".into()));
    // The watchdog is fed only while the writer and the worker really work; a bare timer
    // would prove nothing.
    // The watchdog task holds a writer handle: it is stopped before the shutdown.
    let watchdog = sd_notify::watchdog_enabled().map(|d| running.feed_watchdog(d));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                let result = match config::load(&path) {
                    Ok(new) => {
                        log_advice(&new);
                        let count = new.sources.len();
                        running.reload(new).await.map(|applied| (count, applied))
                    }
                    Err(e) => Err(e),
                };
                reloads += 1;
                let at = crate::clock::iso_now();
                let status = match &result {
                    Ok((count, _)) => {
                        sources = *count;
                        format!("{}; reloaded at {at}", serving(sources))
                    }
                    Err(e) => {
                        tracing::error!("reload refused: {e:#}; the running configuration stays");
                        // One line: sd_notify messages are newline-separated assignments,
                        // and a TOML error spans several lines.
                        let why: String = format!("{e:#}")
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join(" ")
                            .chars()
                            .take(200)
                            .collect();
                        format!("{}; the reload at {at} was refused: {why}", serving(sources))
                    }
                };
                notify(&[NotifyState::Status(&status)]);
                report_reload(&db, reloads, result.map(|(_, applied)| applied));
            }
        }
    }
    tracing::info!("shutting down: no new connections or claims; finishing what is in flight");
    notify(&[NotifyState::Stopping]);
    if let Some(task) = watchdog {
        task.abort();
        let _ = task.await;
    }
    running.shutdown().await;
    Ok(())
}

/// Crash-only: a panic anywhere in `serve` (a connection task, a delivery loop, the writer
/// thread) ends the process instead of leaving it half alive with a loop or the writer
/// gone. Everything acknowledged is already committed, leases bring claimed deliveries
/// back, and systemd's `Restart=on-failure` starts a whole process again.
pub fn abort_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        tracing::error!(%info, "panic; hookinbox serve stops (systemd restarts it)");
        std::process::abort();
    }));
}
