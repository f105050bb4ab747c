//! `tend:plugin/http` answered by the adapter.

use super::adapter::PluginHttp;
use crate::capabilities::Capability;
use crate::wit::{http, types};

use tend_rules::http::check_send_all;

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginHttp {
    async fn answered_send(&self, req: http::Request) -> WitResult<http::Response> {
        self.call
            .answer(Self::NAME, super::SEND, (req,), |(req,)| self.send(req))
            .await
    }
}

impl http::Host for PluginHttp {
    async fn send(&mut self, req: http::Request) -> WitResult<http::Response> {
        self.answered_send(req).await
    }

    async fn send_all(
        &mut self,
        reqs: Vec<http::Request>,
    ) -> wasmtime::Result<Vec<Result<http::Response, types::Error>>> {
        if let Err(refused) = check_send_all(reqs.len()) {
            return Ok(reqs
                .iter()
                .map(|_| Err(types::Error::Invalid(refused.clone())))
                .collect());
        }
        let this = &*self;
        futures_util::future::join_all(reqs.into_iter().map(|req| this.answered_send(req)))
            .await
            .into_iter()
            .collect()
    }
}
