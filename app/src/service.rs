//! Running Herald as a service: `herald serve` (the HTTP API and the workers in one process) and
//! `herald worker` (workers only), from start-up to a graceful stop.
//!
//! The services come from the composition root (`crate::compose`); this module owns the process's
//! lifecycle: binding the API before any worker starts, the worker loops and their wake-ups, the
//! gauges, and shutdown — the first SIGINT/SIGTERM stops claiming at once and lets calls in flight
//! finish and be recorded, a second one exits at once.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use herald_http as api;

use crate::compose::{self, PgReadiness};
use crate::config::Config;

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// How often `serve` refreshes the task gauges of `/metrics` from the database.
const GAUGE_REFRESH: Duration = Duration::from_secs(5);

/// `serve` (API and workers) or `worker` (workers only), until SIGINT or SIGTERM.
///
/// # Errors
/// Configuration, connection, listener or HTTP server failures.
pub async fn serve(config: Config, with_api: bool, args: &crate::cli::ServiceArgs) -> anyhow::Result<()> {
    let command = if with_api { "serve" } else { "worker" };
    let migrate = args.migrate;
    crate::logging::init(&config);
    let with_workers = match (with_api, config.worker.enabled && !args.no_worker) {
        (true, run) => run,
        (false, _) if args.no_worker => {
            anyhow::bail!("`herald worker --no-worker` would run nothing: --no-worker is for `herald serve`")
        }
        (false, false) => {
            return Err(crate::config::ConfigError::new(
                "worker.enabled",
                "is false, so `herald worker` would run nothing: remove it (it is for API-only `herald serve` \
                 processes) or run `herald serve`",
            )
            .into())
        }
        (false, true) => true,
    };
    crate::config::production::check_with(&config, with_api, args.stand_ins)?;
    let authenticator = if with_api {
        let auth = config.require_auth(command)?;
        Some(auth.authenticator())
    } else {
        None
    };
    if migrate {
        if let Some(created) = crate::compose::prepare_migration(&config, command, false).await? {
            tracing::info!("{created}");
        }
    }
    let (store, services) = compose::services_from_config(&config, command, with_workers).await?;
    let metrics = crate::metrics::install()?;
    if migrate {
        store.migrate().await.context("migrations failed")?;
        tracing::info!("migrations applied");
    } else if !store.is_migrated().await {
        anyhow::bail!(
            "the database of database.url is not migrated (or was migrated by an older herald): run `herald \
             migrate` first, or start with `herald {command} --migrate`"
        );
    }
    // Every key a stored destination is under must be loaded, or its deliveries fail one by one later.
    let in_use = services.prefs.key_ids_in_use().await.context("cannot read which keys are in use")?;
    let missing: Vec<&str> = in_use.iter().map(String::as_str).filter(|id| !services.cipher.has_key(id)).collect();
    if !missing.is_empty() {
        return Err(crate::config::ConfigError::new(
            "keys",
            format!(
                "destinations are stored under key(s) {} which are not loaded: load them (they may be retired \
                 after `herald keys rotate` reports every row re-encrypted)",
                missing.join(", ")
            ),
        )
        .into());
    }

    // Bound before any worker starts, so a taken port fails the start-up cleanly.
    let api_listener = if with_api {
        Some(
            tokio::net::TcpListener::bind(config.server.listen)
                .await
                .with_context(|| format!("cannot listen on {} (server.listen)", config.server.listen))?,
        )
    } else {
        None
    };
    let metrics_listener = match config.worker.metrics_listen {
        Some(listen) => Some(
            tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen} (worker.metrics_listen)"))?,
        ),
        None => None,
    };
    // The API's own pool: requests, however many, never take the connections the workers claim with.
    let api_store = if with_api {
        Some(crate::compose::connect_sized(&config, command, config.database.api_max_connections).await?)
    } else {
        None
    };

    // One shutdown switch for everything: the first SIGINT/SIGTERM stops claiming at once (workers
    // finish the cycle in flight, the API drains); a second one exits without waiting.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let signals = tokio::spawn({
        let stop_tx = Arc::clone(&stop_tx);
        async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested: no new claims; calls in flight finish and are recorded");
            stop_tx.send_replace(true);
            shutdown_signal().await;
            tracing::warn!(
                "second shutdown signal: exiting now; unfinished tasks are taken over when their leases expire"
            );
            std::process::exit(130);
        }
    });
    // New work wakes the workers (LISTEN); an API-only process has none to wake.
    let wakeups = if with_workers { Some(crate::wakeups::start(store.clone(), stop_rx.clone()).await) } else { None };
    // The task gauges come from the database, the same in every process: `herald serve` sets them;
    // a `herald worker` that serves `/metrics` exports its own counters and keeps the exporter tidy.
    let gauges = (with_api || metrics_listener.is_some()).then(|| {
        tokio::spawn(crate::metrics::refresh_every(
            with_api.then(|| Arc::clone(&services.reads)),
            metrics.clone(),
            GAUGE_REFRESH,
            stop_rx.clone(),
        ))
    });
    let metrics_server = metrics_listener.map(|listener| {
        let mut stop = stop_rx.clone();
        let router = api::metrics_router(metrics.clone());
        let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(listen = %address, "metrics listening");
        tokio::spawn(api::serve(
            listener,
            router,
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            },
            Duration::from_secs(1),
        ))
    });

    // One pipelined loop per process keeps up to `worker.concurrency` calls in flight.
    let mut workers = tokio::task::JoinSet::new();
    let mut listener_task = None;
    let mut purge = None;
    if let Some((wake, listener)) = wakeups {
        listener_task = Some(listener);
        let worker = compose::configured_worker(&services, &config.worker, "herald", 0);
        let (stop, in_flight) = (stop_rx.clone(), config.worker.concurrency as usize);
        workers.spawn(async move { worker.run_pipelined(in_flight, stop, Some(wake)).await });
        // Retention and the boundaries after an erasure, run by the processes that run workers: one purge
        // at a time across them (a lease).
        let mut stop = stop_rx.clone();
        let holder = format!("herald-{}", std::process::id());
        purge = Some(tokio::spawn(herald_core::retention::run_purge(
            services.clone(),
            config.retention,
            holder,
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            },
        )));
        tracing::info!(
            calls_in_flight = config.worker.concurrency,
            batch = config.worker.batch,
            channels = config.channels.len(),
            "worker started"
        );
    } else {
        tracing::info!("no worker in this process (--no-worker or worker.enabled = false): `herald worker` delivers");
    }
    // Delivery belongs to the workers, status events included: a process that runs workers records its
    // subscriptions and posts their events on a loop of its own (an endpoint that is slow or down never
    // holds up a delivery). An API-only process (`--no-worker`, `worker.enabled = false`) neither records
    // nor posts them.
    if with_workers {
        if let Some(dispatcher) = compose::status_dispatcher(&config, &store, Arc::clone(&services.clock)).await? {
            let stop = stop_rx.clone();
            tracing::info!(subscriptions = config.status.subscriptions.len(), "status events dispatcher started");
            workers.spawn(async move { dispatcher.run(stop).await });
        }
    } else if !config.status.subscriptions.is_empty() {
        tracing::info!("status events are posted by the processes that run workers, not by this one");
    }

    let stopping = {
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    };
    let result = if let (Some(auth), Some(api_store)) = (authenticator, api_store) {
        let readiness = api::CachedReadiness::new(PgReadiness(api_store.clone()), api::READINESS_TTL);
        let state = api::ApiState::new(
            compose::on_store(&services, api_store),
            Arc::new(auth),
            Arc::new(readiness),
            Some(metrics),
            config.server.body_limit_bytes,
        )
        .with_console(api::ConsoleSettings {
            sessions: config.console,
            https: config.server.https,
            identity_provider: config.oidc.as_ref().map(|o| o.display_name.clone().unwrap_or_default()),
            channel_names: api::ChannelNames::new(
                config.channels.iter().filter_map(|c| Some((c.name.clone(), c.display_name.clone()?))),
            ),
        });
        let listener = api_listener.context("the API listener is bound when the API runs")?;
        tracing::info!(listen = %config.server.listen, "API listening");
        let limits = config.server.limits;
        api::serve_bounded(
            listener,
            api::router_with(state, limits),
            stopping,
            Duration::from_secs(10),
            limits.header_read_timeout,
        )
        .await
        .context("the HTTP server failed")
    } else {
        stopping.await;
        Ok(())
    };
    // Also when the HTTP server failed: the workers must not outlive it unnoticed.
    stop_tx.send_replace(true);
    // A cycle in flight ends within the channel timeout plus its finish, which the configuration keeps
    // below the lease; waiting longer would only delay what lease expiry recovers anyway.
    let lease = Duration::from_millis(config.worker.lease_ms);
    let drained = tokio::time::timeout(lease, async { while workers.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            still_running = workers.len(),
            "workers did not finish within the lease; their tasks are taken over when the leases expire"
        );
        workers.abort_all();
    }
    if let Some(gauges) = gauges {
        let _ = gauges.await;
    }
    if let Some(server) = metrics_server {
        let _ = server.await;
    }
    if let Some(listener) = listener_task {
        let _ = listener.await;
    }
    signals.abort();
    if let Some(purge) = purge {
        purge.abort();
    }
    tracing::info!("stopped");
    result
}
