//! The `http` adapter of one reconcile: every URL is checked against the
//! plugin's grants; probes go straight to the backend, anything else through
//! the mutation gate.

use super::backend::{DEFAULT_TIMEOUT, HttpBackend, HttpRequest, HttpResponse, is_safe};
use super::grants::{UrlPattern, check_url};
use crate::capabilities::call::Call;
use crate::capabilities::capability::Capability;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Intent;
use std::sync::Arc;
use std::time::Duration;

pub struct PluginHttp {
    pub(super) backend: Arc<dyn HttpBackend>,
    pub(super) grants: Vec<UrlPattern>,
    pub(super) call: Arc<Call>,
}

impl PluginHttp {
    /// Send `request` within its `timeout_ms` ([`DEFAULT_TIMEOUT`] when it names none).
    pub async fn send(&self, mut request: HttpRequest) -> Result<HttpResponse, CapError> {
        request.method = request.method.to_ascii_uppercase();
        check_url(
            &self.grants,
            &self.call.plugin,
            &request.method,
            &request.url,
        )?;
        // The URL as parsed, so one target has one spelling (budgets, journal).
        if let Ok(parsed) = reqwest::Url::parse(&request.url) {
            request.url = parsed.to_string();
        }
        let timeout = request
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, |ms| Duration::from_millis(ms.into()));
        if is_safe(&request.method) {
            return self.backend.probe(request, timeout).await;
        }
        let intent = Intent {
            capability: Self::NAME,
            operation: super::SEND,
            target: request.url.clone(),
            detail: format!(
                "{}, {} bytes",
                request.method,
                request.body.as_ref().map_or(0, Vec::len)
            ),
            diff: None,
        };
        let planned = Err(CapError::Denied(format!(
            "dry run: {} {} is recorded in the plan, not sent",
            request.method, request.url
        )));
        self.call
            .gate
            .mutate(intent, planned, |permit| {
                self.backend.send(permit, request, timeout)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::http::FakeHttp;
    use crate::capabilities::testing::call;

    fn http(dry_run: bool) -> (PluginHttp, Arc<FakeHttp>) {
        let (backend, fake) = PluginHttp::fake();
        fake.respond("http://127.0.0.1:5000/v2/", 200);
        let grants = vec![UrlPattern::parse("http://127.0.0.1:*/*").unwrap()];
        (
            PluginHttp::for_call(&backend, &grants, &Default::default(), &call("p", dry_run)),
            fake,
        )
    }

    fn request(method: &str, url: &str) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: vec![],
            body: None,
            timeout_ms: None,
        }
    }

    #[tokio::test]
    async fn granted_probes_reach_the_backend_and_are_no_mutation() {
        let (http, fake) = http(true);
        let response = http
            .send(request("get", "http://127.0.0.1:5000/v2/"))
            .await
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(fake.sent().len(), 1);
        assert!(
            http.call.gate.mutations().is_empty(),
            "a GET is not a mutation"
        );
    }

    #[tokio::test]
    async fn ungranted_urls_never_reach_the_backend() {
        let (http, fake) = http(false);
        let err = http
            .send(request("GET", "http://10.0.0.1:5000/v2/"))
            .await
            .unwrap_err();
        assert!(matches!(err, CapError::Denied(_)), "{err}");
        assert!(fake.sent().is_empty());
    }

    #[tokio::test]
    async fn other_methods_pass_the_gate() {
        let (real, fake) = http(false);
        let response = real
            .send(request("POST", "http://127.0.0.1:5000/v2/"))
            .await
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(
            real.call.gate.mutations()[0].describe(),
            "did http.send http://127.0.0.1:5000/v2/ (POST, 0 bytes): ok (status 200)"
        );
        let (dry, _) = http(true);
        let err = dry
            .send(request("POST", "http://127.0.0.1:5000/v2/"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CapError::Denied(ref m) if m.starts_with("dry run")),
            "{err}"
        );
        assert_eq!(fake.sent().len(), 1, "the dry run sent nothing");
        assert!(dry.call.gate.mutations()[0].dry_run);
    }
}
