//! `[host] listen`: `/metrics` (Prometheus text), `/healthz`, `/readyz` (ready
//! once every enabled plugin has loaded or failed to load), `/status` and
//! `/status/NAME` (JSON), `POST /reconcile/NAME` and `POST /plan[/NAME]`.

use super::Shared;
use crate::scheduler::{Trigger, trigger};
use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;

pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ([host] listen)"))?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /status[/NAME], POST /reconcile/NAME, POST /plan[/NAME]");
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, std::convert::Infallible>(route(&shared, &req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

async fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if req.method() == Method::POST {
        if let Some(name) = path.strip_prefix("/reconcile/") {
            return reconcile_now(shared, name).await;
        }
        let plan = match path {
            "/plan" => Some(None),
            _ => path.strip_prefix("/plan/").map(Some),
        };
        if let Some(name) = plan {
            return match super::plan::run(shared, name).await {
                Ok(summaries) => respond(
                    StatusCode::OK,
                    "application/json",
                    serde_json::to_string_pretty(&summaries).expect("serializes"),
                ),
                Err(message) => respond(StatusCode::NOT_FOUND, "text/plain", message),
            };
        }
    }
    if req.method() != Method::GET {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET, or POST /reconcile/NAME or /plan[/NAME]\n".into(),
        );
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
            let table = shared.table.read().unwrap();
            // The host's own families, then the series plugins recorded
            // (only of plugins still configured).
            let mut text = shared.metrics.render(&table);
            let configured = |plugin: &str| table.plugins.contains_key(plugin);
            text.push_str(&shared.services.backends.metrics.render(&configured));
            text.push_str(&crate::capabilities::kube::render_metrics(
                &*shared.services.backends.kube,
            ));
            respond(StatusCode::OK, "text/plain; version=0.0.4", text)
        }
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let table = shared.table.read().unwrap();
            if table.is_ready() {
                respond(StatusCode::OK, "text/plain", "ready\n".into())
            } else {
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "loading plugins\n".into(),
                )
            }
        }
        "/status" => respond(
            StatusCode::OK,
            "application/json",
            super::status::overview(shared).await,
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics, /healthz, /readyz, /status or POST /reconcile/NAME\n".into(),
        ),
    }
}

/// Queue a manual reconcile of `name` (it skips any backoff) and answer with its
/// result once it has run: what `tend reconcile NAME` shows while the daemon runs.
async fn reconcile_now(shared: &Shared, name: &str) -> Response<Full<Bytes>> {
    let current = {
        let table = shared.table.read().unwrap();
        let entry = table.plugins.get(name);
        entry.map(|e| (e.reconciles, e.config.limits.timeout, e.state))
    };
    let Some((before, timeout, state)) = current else {
        return respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("no plugin {name:?} in the running config\n"),
        );
    };
    if !shared.triggers.send(name, Trigger::new(trigger::MANUAL)) {
        return respond(
            StatusCode::CONFLICT,
            "text/plain",
            format!(
                "{name} is not running (state: {}); see tend status\n",
                state.name()
            ),
        );
    }
    // The run in flight (if any) finishes first; then ours, within its deadline.
    let deadline = tokio::time::Instant::now() + timeout * 2 + std::time::Duration::from_secs(5);
    loop {
        let done = {
            let table = shared.table.read().unwrap();
            table.plugins.get(name).and_then(|e| {
                let last = e.last.as_ref()?;
                (e.reconciles > before && last.triggers.iter().any(|t| t == trigger::MANUAL))
                    .then(|| serde_json::to_string_pretty(last).expect("serializes"))
            })
        };
        if let Some(body) = done {
            return respond(StatusCode::OK, "application/json", body);
        }
        if tokio::time::Instant::now() > deadline {
            return respond(
                StatusCode::GATEWAY_TIMEOUT,
                "text/plain",
                format!("{name}: no result in time; see tend status\n"),
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
