//! `[host] listen`: read-only endpoints only: `/metrics` (Prometheus text),
//! `/healthz`, `/readyz` (503 saying why while the last config change was
//! rejected or an enabled plugin is loading, failed to load or is missing),
//! `/status` and `/status/NAME` (JSON). Commands that act
//! (`reconcile`, `plan`) go over the control socket ([`super::control`]); a
//! POST here answers 405 saying so. Connections are bounded ([`super::listen`]).

use super::Shared;
use super::listen::{self, Route, respond};
use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The longest a connection to the HTTP port lives (one request, keep-alive off).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ([host] listen)"))?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /status[/NAME] (read-only)");
    let route: Route = Arc::new(move |req| {
        let shared = shared.clone();
        Box::pin(async move { route(&shared, &req).await })
    });
    Ok(tokio::spawn(listen::serve(
        listener,
        format!("[host] listen {addr}"),
        route,
        Some(CONNECTION_LIFETIME),
    )))
}

async fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let socket = super::control::socket_path(&shared.config.read().unwrap().host.state_dir);
        return refuse_action(&socket);
    }
    if let Some(name) = path.strip_prefix("/status/") {
        return match super::status::plugin(shared, name).await {
            Some(body) => respond(StatusCode::OK, "application/json", body),
            None => respond(
                StatusCode::NOT_FOUND,
                "text/plain",
                format!("no plugin {name:?} in the running config\n"),
            ),
        };
    }
    match path {
        "/metrics" => {
            let host = crate::daemon::metrics::HostGauges {
                ready: super::status::readiness(shared).is_none(),
                config_rejected: shared.config_error.read().unwrap().is_some(),
                leading: (shared.config.read().unwrap().host.leader_election.is_some())
                    .then(|| shared.leadership.borrow().leading),
            };
            let table = shared.table.read().unwrap();
            // The host's own families, then each capability's (only of
            // plugins still configured).
            let mut text = shared.metrics.render(&table, &host);
            let configured = |plugin: &str| table.plugins.contains_key(plugin);
            let backends = &shared.services.backends;
            text.push_str(&backends.render_metrics(&configured));
            respond(StatusCode::OK, "text/plain; version=0.0.4", text)
        }
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => match super::status::readiness(shared) {
            None => respond(StatusCode::OK, "text/plain", "ready\n".into()),
            Some(why) => respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why),
        },
        "/status" => respond(
            StatusCode::OK,
            "application/json",
            super::status::overview(shared).await,
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics, /healthz, /readyz, /status or /status/NAME\n".into(),
        ),
    }
}

/// The answer to anything but GET: commands that act are not served here.
fn refuse_action(socket: &Path) -> Response<Full<Bytes>> {
    let mut response = respond(
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain",
        format!(
            "this port is read-only (GET /metrics, /healthz, /readyz, /status[/NAME]); reconcile and plan go over the control socket {} (mode 0600): run `tend reconcile NAME -c FILE` or `tend plan -c FILE` as the user tend runs as\n",
            socket.display()
        ),
    );
    response
        .headers_mut()
        .insert("allow", "GET, HEAD".parse().expect("a header value"));
    response
}
