//! The http backend. A request with a method that changes something can only
//! be sent with a [`Permit`] from the mutation gate, which journals the
//! outcome; probes need none.

use crate::capabilities::error::CapError;
use crate::capabilities::gate::{Performed, Permit};
use std::time::Duration;

/// The WIT records under the names the host gives them. A backend takes the
/// timeout in force as its own argument and ignores the request's
/// `timeout_ms` (the plugin's ask, which the adapter resolves).
pub use crate::wit::http::{Request as HttpRequest, Response as HttpResponse};

/// Longest response body handed to a plugin.
pub const MAX_BODY: usize = 1 << 20;
/// Per-request timeout when the plugin names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// Send any request; the body is bounded by [`MAX_BODY`].
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

/// A sent request is "ok (status 201)" in the journal.
impl Performed for HttpResponse {
    fn journal_result(&self) -> String {
        format!("ok (status {})", self.status)
    }
}
