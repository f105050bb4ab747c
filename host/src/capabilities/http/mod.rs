//! `tend:plugin/http`: outbound requests for probes, to granted URL patterns only.

mod grants;
mod real;
mod scripted;

pub use grants::check_url;
pub use real::RealHttp;
pub use scripted::ScriptedHttp;

use super::{CallInfo, CapError, Mutation};
use crate::config::UrlPattern;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Longest response body handed to a plugin.
pub const MAX_BODY: usize = 1 << 20;
/// Per-request timeout when the plugin names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub type HttpFuture<'a> = Pin<Box<dyn Future<Output = Result<HttpResponse, CapError>> + Send + 'a>>;

pub trait HttpBackend: Send + Sync + 'static {
    /// Send one request; the body is bounded by [`MAX_BODY`].
    fn send(&self, request: HttpRequest, timeout: Duration) -> HttpFuture<'_>;
}

/// Methods that only read: sent even in a dry run.
fn is_safe(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// The `http` capability of one reconcile.
pub struct PluginHttp {
    backend: Arc<dyn HttpBackend>,
    grants: Vec<UrlPattern>,
    call: CallInfo,
}

impl PluginHttp {
    pub fn new(backend: Arc<dyn HttpBackend>, grants: Vec<UrlPattern>, call: CallInfo) -> Self {
        PluginHttp {
            backend,
            grants,
            call,
        }
    }

    pub async fn send(
        &self,
        mut request: HttpRequest,
        timeout: Option<Duration>,
    ) -> Result<HttpResponse, CapError> {
        request.method = request.method.to_ascii_uppercase();
        check_url(
            &self.grants,
            &self.call.plugin,
            &request.method,
            &request.url,
        )?;
        let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
        if is_safe(&request.method) {
            return self.backend.send(request, timeout).await;
        }
        let mut mutation = Mutation {
            capability: "http",
            operation: request.method.clone(),
            target: request.url.clone(),
            detail: format!("{} bytes", request.body.as_ref().map_or(0, Vec::len)),
            performed: !self.call.dry_run,
            result: "ok".into(),
        };
        if self.call.dry_run {
            self.call.mutations.record(mutation);
            return Err(CapError::Denied(format!(
                "dry run: {} {} is recorded in the plan, not sent",
                request.method, request.url
            )));
        }
        let result = self.backend.send(request, timeout).await;
        match &result {
            Ok(response) => mutation.result = format!("status {}", response.status),
            Err(e) => mutation.result = e.to_string(),
        }
        self.call.mutations.record(mutation);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Mutations;

    fn http(dry_run: bool) -> (PluginHttp, Arc<ScriptedHttp>, Mutations) {
        let backend = Arc::new(ScriptedHttp::default());
        backend.respond("http://127.0.0.1:5000/v2/", 200);
        let grants = vec![UrlPattern::parse("http://127.0.0.1:*/*").unwrap()];
        let mutations = Mutations::default();
        let call = CallInfo {
            plugin: "p".into(),
            dry_run,
            mutations: mutations.clone(),
        };
        (
            PluginHttp::new(backend.clone(), grants, call),
            backend,
            mutations,
        )
    }

    fn request(method: &str, url: &str) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: vec![],
            body: None,
        }
    }

    #[tokio::test]
    async fn granted_probes_reach_the_backend() {
        let (http, backend, mutations) = http(true);
        let response = http
            .send(request("get", "http://127.0.0.1:5000/v2/"), None)
            .await
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(backend.sent().len(), 1);
        assert!(mutations.take().is_empty(), "a GET is not a mutation");
    }

    #[tokio::test]
    async fn ungranted_urls_never_reach_the_backend() {
        let (http, backend, _) = http(false);
        let err = http
            .send(request("GET", "http://10.0.0.1:5000/v2/"), None)
            .await
            .unwrap_err();
        assert!(matches!(err, CapError::Denied(_)), "{err}");
        assert!(backend.sent().is_empty());
    }

    #[tokio::test]
    async fn dry_run_records_unsafe_methods_instead_of_sending() {
        let (http, backend, mutations) = http(true);
        let err = http
            .send(request("POST", "http://127.0.0.1:5000/v2/"), None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CapError::Denied(ref m) if m.starts_with("dry run")),
            "{err}"
        );
        assert!(backend.sent().is_empty());
        let planned = mutations.take();
        assert_eq!(planned.len(), 1);
        assert!(!planned[0].performed);
    }
}
