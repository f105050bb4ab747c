//! `[host] listen`: `/metrics` (Prometheus text), `/healthz`, `/readyz` (ready
//! once every enabled plugin has loaded or failed to load) and `/status` (JSON).

use super::Shared;
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
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /status");
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let response = route(&shared, &req);
                    async move { Ok::<_, std::convert::Infallible>(response) }
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

fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => {
            let table = shared.table.read().unwrap();
            respond(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                shared.metrics.render(&table),
            )
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
        "/status" => respond(StatusCode::OK, "application/json", shared.status_json()),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics, /healthz, /readyz or /status\n".into(),
        ),
    }
}
