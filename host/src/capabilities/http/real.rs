//! Real HTTP through reqwest: no redirects, no proxies from the environment
//! (probes must reach the named endpoint), bounded bodies, and a new
//! connection for every request: a probe answers "can a client connect now?",
//! and a kept-alive connection would keep answering for a cache that drops
//! every new connection (containerd's pulls open new ones).

use super::backend::{HttpBackend, HttpRequest, HttpResponse, MAX_BODY, is_safe, not_a_probe};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::time::Duration;

pub struct RealHttp {
    client: reqwest::Client,
}

impl RealHttp {
    pub fn new() -> anyhow::Result<Self> {
        crate::tls::install_ring();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(0)
            .user_agent(concat!("tend/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(RealHttp { client })
    }
}

fn map_error(method: &str, url: &str, timeout: Duration, e: reqwest::Error) -> CapError {
    let what = format!("{method} {url}");
    if e.is_timeout() {
        CapError::Timeout(format!(
            "{what}: no response within {}",
            humantime::format_duration(timeout)
        ))
    } else if e.is_connect() {
        CapError::Unavailable(format!("{what}: cannot connect: {}", root_cause(&e)))
    } else if e.is_builder() {
        CapError::Invalid(format!("{what}: {}", root_cause(&e)))
    } else {
        CapError::Unavailable(format!("{what}: {}", root_cause(&e)))
    }
}

/// The innermost cause: "Connection refused (os error 111)" rather than a wrapper.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[async_trait::async_trait]
impl HttpBackend for RealHttp {
    async fn probe(
        &self,
        request: HttpRequest,
        timeout: Duration,
    ) -> Result<HttpResponse, CapError> {
        if !is_safe(&request.method) {
            return Err(not_a_probe(&request));
        }
        self.exchange(request, timeout).await
    }

    async fn send(
        &self,
        _: Permit,
        request: HttpRequest,
        timeout: Duration,
    ) -> Result<HttpResponse, CapError> {
        self.exchange(request, timeout).await
    }
}

impl RealHttp {
    async fn exchange(
        &self,
        request: HttpRequest,
        timeout: Duration,
    ) -> Result<HttpResponse, CapError> {
        {
            let HttpRequest {
                method,
                url,
                headers,
                body,
                timeout_ms: _,
            } = request;
            let parsed_method = reqwest::Method::from_bytes(method.as_bytes())
                .map_err(|_| CapError::Invalid(format!("{method:?} is not an HTTP method")))?;
            let mut builder = self.client.request(parsed_method, &url).timeout(timeout);
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            if let Some(body) = body {
                builder = builder.body(body);
            }
            let mut response = builder
                .send()
                .await
                .map_err(|e| map_error(&method, &url, timeout, e))?;
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| map_error(&method, &url, timeout, e))?
            {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(CapError::Invalid(format!(
                        "{method} {url}: response body is larger than {MAX_BODY} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(HttpResponse {
                status,
                headers,
                body,
            })
        }
    }
}
