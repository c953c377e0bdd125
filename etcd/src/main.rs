// The `etcd` server binary: parses etcd's flags and environment, boots the member, serves the
// client API until SIGINT/SIGTERM, then stops cleanly.

use std::process::ExitCode;

use etcd::config::{Action, Config, ConfigError};
use etcd::server::EtcdServer;

/// jemalloc instead of glibc's malloc (why: the workspace manifest). etcd::server::heap gives
/// its free pages back to the OS after big frees.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: Vec<(String, String)> = std::env::vars().collect();
    let (action, cfg) = match Config::from_args(&args, &env) {
        Ok(v) => v,
        Err(e @ ConfigError::Flag(_)) => {
            // Go's flag package: the error, then a pointer to the usage, exit 2.
            eprintln!("{e}");
            eprintln!("Usage: etcd [flags] (see 'etcd --help')");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("etcd: {e}");
            return ExitCode::from(1);
        }
    };
    match action {
        Action::Help => {
            print!("{}", etcd::config::flags::help());
            ExitCode::SUCCESS
        }
        Action::Version => {
            print!("{}", etcd::version::version_text());
            ExitCode::SUCCESS
        }
        // A configuration file was read into `cfg` already.
        Action::Run | Action::ConfigFile(_) => {
            if let Err(e) = etcd::logging::init(&cfg.log_outputs, cfg.log_level) {
                eprintln!("etcd: cannot open log output: {e}");
                return ExitCode::from(1);
            }
            for w in &cfg.warnings {
                tracing::warn!("{w}");
            }
            match run(cfg) {
                Ok(None) => ExitCode::SUCCESS,
                Ok(Some(signal)) => end_by(signal),
                Err(e) => {
                    tracing::error!(error = %e, "etcd stopped");
                    eprintln!("etcd: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// Ends the process by the signal that stopped it, once the member has stopped cleanly, as etcd
/// does: whoever sent SIGTERM or SIGINT sees the process killed by it (status 143 or 130 to a
/// shell), not an exit of its own.
fn end_by(signal: i32) -> ExitCode {
    // Safety: restoring the default action and raising a signal at ourselves; no handler of
    // ours runs after this point.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    // Only reached if the signal is blocked: the shell's number for it.
    ExitCode::from(128u8.saturating_add(signal as u8))
}

/// Runs the member until it stops: `Some(signal)` when a signal stopped it.
fn run(cfg: Config) -> Result<Option<i32>, String> {
    let mut client = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = client_workers() {
        client.worker_threads(n);
    }
    let rt = client
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    // The peer port and the transport to the other members run on the raft thread, outside the
    // client runtime: a heartbeat or an append never waits behind client requests, and goes
    // between the socket and raft without waking another thread (server/raft_thread.rs).
    let raft_thread = etcd::server::raft_thread::RaftThread::start()
        .map_err(|e| format!("cannot start the raft thread: {e}"))?;
    let peer = raft_thread.handle().clone();
    let boot_thread = &raft_thread;
    let r = rt.block_on(async move {
        tracing::info!(
            etcd_version = etcd::version::ETCD_VERSION,
            etcd_rs_version = etcd::version::ETCD_RS_VERSION,
            name = %cfg.name,
            data_dir = %cfg.data_dir.display(),
            "starting an etcd server"
        );
        // Bind first: a port in use is an error before anything is written.
        let listeners = etcd::api::serve::bind(&cfg.listen_client_urls).await?;
        // Bound on the raft thread's runtime, which then watches these sockets.
        let peer_urls = cfg.listen_peer_urls.clone();
        let peer_listeners = peer
            .spawn(async move { etcd::transport::server::bind(&peer_urls).await })
            .await
            .map_err(|e| format!("cannot listen on the peer URLs: {e}"))??;
        let metrics_listeners = etcd::api::serve::bind(&cfg.listen_metrics_urls).await?;
        etcd::metrics::install();
        etcd::server::heap::start();
        let client_tls = client_tls(&cfg)?;
        let peer_tls = etcd::transport::peer_tls::server_config(&cfg)?;
        let server = match EtcdServer::start(cfg, boot_thread).await {
            Ok(s) => s,
            Err(e @ etcd::server::bootstrap::BootError::Removed(_)) => {
                tracing::error!("{e}");
                return Ok(removed());
            }
            Err(e) => return Err(e.to_string()),
        };
        let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let mut peer_tasks = Vec::new();
        for l in peer_listeners {
            let mut stop = stop_tx.subscribe();
            let s = server.clone();
            let tls = peer_tls.clone();
            peer_tasks.push(peer.spawn(async move {
                let shutdown = async move {
                    let _ = stop.recv().await;
                };
                if let Err(e) = etcd::transport::server::serve(s, l, tls, shutdown).await {
                    tracing::error!(error = %e, "peer listener failed");
                }
            }));
        }
        if let Err(f) = server.wait_ready().await {
            stop_member(&server).await;
            return removed_or_failed(f);
        }
        // The index rebuild and the WAL replay freed what they decoded: give it back now.
        etcd::server::heap::trim();
        // --feature-gates=InitialCorruptCheck=true or 3.5's --experimental-initial-corrupt-check.
        if server
            .cfg()
            .feature_gates
            .enabled(etcd::config::Gate::InitialCorruptCheck)
            && let Err(e) = etcd::server::corrupt::initial_check(&server).await
        {
            stop_member(&server).await;
            return Err(e);
        }
        tokio::spawn(etcd::server::cluster_version::monitor(server.clone()));
        etcd::server::cluster_version::publish(&server).await;
        tokio::spawn(etcd::server::corrupt::run_periodic(server.clone()));
        tokio::spawn(etcd::api::lease::expire_leases(server.clone()));
        tokio::spawn(etcd::server::compactor::run(server.clone()));
        let mut tasks = Vec::new();
        for (url, l) in listeners {
            let mut stop = stop_tx.subscribe();
            let s = server.clone();
            let tls = if etcd::tls::is_tls_scheme(&url) {
                client_tls.clone()
            } else {
                None
            };
            tracing::info!("ready to serve client requests");
            if tls.is_some() {
                tracing::info!(address = %url.host, "serving client traffic securely");
            } else {
                tracing::info!(
                    address = %url.host,
                    "serving client traffic insecurely; this is strongly discouraged!"
                );
            }
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop.recv().await;
                };
                etcd::api::serve::serve(s, l, tls, shutdown).await;
            }));
        }
        for (url, l) in metrics_listeners {
            let mut stop = stop_tx.subscribe();
            let s = server.clone();
            let tls = if etcd::tls::is_tls_scheme(&url) {
                client_tls.clone()
            } else {
                None
            };
            tracing::info!(address = %url, "serving metrics");
            tasks.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stop.recv().await;
                };
                etcd::api::serve::serve_metrics(s, l, tls, shutdown).await;
            }));
        }
        let (failed, signal) = tokio::select! {
            signal = wait_for_signal() => {
                tracing::info!(name = %server.cfg().name, "received signal; shutting down");
                (None, Some(signal))
            }
            f = server.wait_failed() => (Some(f), None),
        };
        if failed.is_none() {
            server.transfer_leadership_on_stop().await;
        }
        let _ = stop_tx.send(());
        // Peers and watchers hold streams open forever: give in-flight requests a moment to
        // finish, then close the listeners regardless.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        for t in tasks.into_iter().chain(peer_tasks) {
            let abort = t.abort_handle();
            if tokio::time::timeout_at(deadline, t).await.is_err() {
                abort.abort();
            }
        }
        stop_member(&server).await;
        tracing::info!("stopped etcd server");
        match failed {
            Some(f) => removed_or_failed(f),
            None => Ok(signal),
        }
    });
    // Peer connections that outlived the listeners' deadline are not waited for.
    raft_thread.shutdown();
    r
}

/// Worker threads of the client runtime: one core is left to the raft thread (and a long apply)
/// (on two cores one worker served puts and watches with 10-20% less CPU than two, which woke
/// each other for every request), unless TOKIO_WORKER_THREADS says otherwise.
fn client_workers() -> Option<usize> {
    if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        return None; // tokio reads it itself
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(cores.saturating_sub(1).max(1))
}

/// Stops the member's raft, apply and storage threads (blocking work, off the runtime).
async fn stop_member(server: &std::sync::Arc<EtcdServer>) {
    let s = server.clone();
    let _ = tokio::task::spawn_blocking(move || s.stop()).await;
}

/// How a member that stopped on its own ends: a removal is no failure (see `removed`).
fn removed_or_failed(f: String) -> Result<Option<i32>, String> {
    if f == etcd::transport::REMOVED_MESSAGE {
        Ok(removed())
    } else {
        Err(f)
    }
}

/// etcd stops a removed member and exits 0, at boot, before it is ready or while it serves:
/// that is its end of life, not a fault.
fn removed() -> Option<i32> {
    tracing::info!("the data-dir used by this member must be removed");
    None
}

/// The client listeners' TLS, when any client or metrics URL is https (the metrics port uses
/// the client certificate, as etcd's). The peer side is built by transport::peer_tls.
fn client_tls(cfg: &etcd::config::Config) -> Result<Option<etcd::tls::TlsServer>, String> {
    use etcd::tls::{Side, TlsServer, client_info, is_tls_scheme, url_hosts};
    let urls: Vec<_> = cfg
        .listen_client_urls
        .iter()
        .chain(&cfg.listen_metrics_urls)
        .cloned()
        .collect();
    let info = client_info(cfg);
    if !urls.iter().any(is_tls_scheme) {
        if !info.is_empty() {
            tracing::warn!(
                "scheme is HTTP while key and cert files are present; ignoring key and cert files"
            );
        }
        return Ok(None);
    }
    TlsServer::new(&info, Side::Client, &cfg.data_dir, &url_hosts(&urls)).map(Some)
}

/// Waits for SIGINT or SIGTERM and says which came.
async fn wait_for_signal() -> i32 {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return libc::SIGINT;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => libc::SIGINT,
        _ = term.recv() => libc::SIGTERM,
    }
}
