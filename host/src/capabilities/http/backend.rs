//! The http backend. A request with a method that changes something can only
//! be sent with a [`Permit`] from the mutation gate, which the backend
//! finishes with the outcome; probes need none.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
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

/// Methods that only read: probes, sent even in a dry run.
pub fn is_safe(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS")
}

#[async_trait::async_trait]
pub trait HttpBackend: Send + Sync + 'static {
    /// Send a request whose method only reads ([`is_safe`]); others are refused.
    async fn probe(
        &self,
        request: HttpRequest,
        timeout: Duration,
    ) -> Result<HttpResponse, CapError>;
    /// Send any request; the body is bounded by [`MAX_BODY`]. Finishes the
    /// permit with the outcome.
    async fn send(
        &self,
        permit: Permit,
        request: HttpRequest,
        timeout: Duration,
    ) -> Result<HttpResponse, CapError>;
}

/// The refusal of a probe with a method that changes something.
pub fn not_a_probe(request: &HttpRequest) -> CapError {
    CapError::Invalid(format!(
        "{} {}: not a probe; this method goes through the mutation gate",
        request.method, request.url
    ))
}

/// The journal result of a sent request: "ok (status 201)" or the error.
pub fn sent_outcome(result: &Result<HttpResponse, CapError>) -> String {
    match result {
        Ok(response) => format!("ok (status {})", response.status),
        Err(e) => e.to_string(),
    }
}
