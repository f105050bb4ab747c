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

impl http::Host for PluginHttp {
    async fn send(&mut self, req: http::Request) -> Result<http::Response, types::Error> {
        let timeout = req.timeout_ms.map(|ms| Duration::from_millis(ms.into()));
        let request = HttpRequest {
            method: req.method,
            url: req.url,
            headers: req.headers,
            body: req.body,
        };
        let result = PluginHttp::send(self, request, timeout).await;
        let response = self.call.counted("http", "send", result)?;
        Ok(http::Response {
            status: response.status,
            headers: response.headers,
            body: response.body,
        })
    }
}
