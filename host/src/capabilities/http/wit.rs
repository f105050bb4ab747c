//! `tend:plugin/http` answered by the adapter.

use super::adapter::PluginHttp;
use super::backend::HttpRequest;
use crate::wit::{http, types};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};

pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut PluginHttp,
) -> wasmtime::Result<()> {
    http::add_to_linker::<T, HasSelf<PluginHttp>>(linker, get)
}

use tend_grants::http::MAX_SEND_ALL;

impl PluginHttp {
    async fn counted_send(&self, req: http::Request) -> Result<http::Response, types::Error> {
        let timeout = req.timeout_ms.map(|ms| Duration::from_millis(ms.into()));
        let request = HttpRequest {
            method: req.method,
            url: req.url,
            headers: req.headers,
            body: req.body,
        };
        let result = self.send(request, timeout).await;
        let response = self.call.counted("http", "send", result)?;
        Ok(http::Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}

impl http::Host for PluginHttp {
    async fn send(&mut self, req: http::Request) -> Result<http::Response, types::Error> {
        self.counted_send(req).await
    }

    async fn send_all(&mut self, reqs: Vec<http::Request>) -> Vec<Result<http::Response, types::Error>> {
        if reqs.len() > MAX_SEND_ALL {
            let refused = format!(
                "send-all takes at most {MAX_SEND_ALL} requests, got {}: split the call",
                reqs.len()
            );
            return reqs.iter().map(|_| Err(types::Error::Invalid(refused.clone()))).collect();
        }
        let this = &*self;
        futures_util::future::join_all(reqs.into_iter().map(|req| this.counted_send(req))).await
    }
}
