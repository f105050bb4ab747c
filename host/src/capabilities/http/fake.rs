//! A scripted HTTP backend for tests: answers by URL, records every request,
//! refuses unscripted ones like a connection refused.

use super::backend::{HttpBackend, HttpRequest, HttpResponse, is_safe, not_a_probe};
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
pub struct FakeHttp {
    statuses: Mutex<HashMap<String, u16>>,
    sent: Mutex<Vec<HttpRequest>>,
}

impl FakeHttp {
    /// Answer requests to `url` with `status` and an empty body.
    pub fn respond(&self, url: &str, status: u16) {
        self.statuses
            .lock()
            .unwrap()
            .insert(url.to_string(), status);
    }

    /// Every request that reached the backend.
    pub fn sent(&self) -> Vec<HttpRequest> {
        self.sent.lock().unwrap().clone()
    }

    fn answer(&self, request: HttpRequest) -> Result<HttpResponse, CapError> {
        let status = self.statuses.lock().unwrap().get(&request.url).copied();
        let url = request.url.clone();
        self.sent.lock().unwrap().push(request);
        match status {
            Some(status) => Ok(HttpResponse {
                status,
                headers: vec![],
                body: vec![],
            }),
            None => Err(CapError::Unavailable(format!("{url}: connection refused"))),
        }
    }
}

#[async_trait::async_trait]
impl HttpBackend for FakeHttp {
    async fn probe(&self, request: HttpRequest, _: Duration) -> Result<HttpResponse, CapError> {
        if !is_safe(&request.method) {
            return Err(not_a_probe(&request));
        }
        self.answer(request)
    }

    async fn send(
        &self,
        _: Permit,
        request: HttpRequest,
        _: Duration,
    ) -> Result<HttpResponse, CapError> {
        self.answer(request)
    }
}
