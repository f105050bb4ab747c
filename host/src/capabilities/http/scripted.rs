//! A scripted HTTP backend for unit tests: answers by URL, records requests.

use super::{HttpBackend, HttpFuture, HttpRequest, HttpResponse};
use crate::capabilities::CapError;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
pub struct ScriptedHttp {
    statuses: Mutex<HashMap<String, u16>>,
    sent: Mutex<Vec<HttpRequest>>,
}

impl ScriptedHttp {
    /// Answer requests to `url` with `status` and an empty body.
    pub fn respond(&self, url: &str, status: u16) {
        self.statuses
            .lock()
            .unwrap()
            .insert(url.to_string(), status);
    }

    pub fn sent(&self) -> Vec<HttpRequest> {
        self.sent.lock().unwrap().clone()
    }
}

impl HttpBackend for ScriptedHttp {
    fn send(&self, request: HttpRequest, _timeout: Duration) -> HttpFuture<'_> {
        let status = self.statuses.lock().unwrap().get(&request.url).copied();
        let url = request.url.clone();
        self.sent.lock().unwrap().push(request);
        Box::pin(async move {
            match status {
                Some(status) => Ok(HttpResponse {
                    status,
                    headers: vec![],
                    body: vec![],
                }),
                None => Err(CapError::Unavailable(format!("{url}: connection refused"))),
            }
        })
    }
}
