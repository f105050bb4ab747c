//! `tend:plugin/http` answered by the adapter.

use super::adapter::PluginHttp;
use crate::capabilities::Capability;
use crate::wit::{http, types};

use tend_rules::http::check_send_all;

impl PluginHttp {
    async fn counted_send(&self, req: http::Request) -> Result<http::Response, types::Error> {
        let result = self.send(req).await;
        self.call.counted(Self::NAME, super::SEND, result)
    }
}

impl http::Host for PluginHttp {
    async fn send(&mut self, req: http::Request) -> Result<http::Response, types::Error> {
        self.counted_send(req).await
    }

    async fn send_all(
        &mut self,
        reqs: Vec<http::Request>,
    ) -> Vec<Result<http::Response, types::Error>> {
        if let Err(refused) = check_send_all(reqs.len()) {
            return reqs
                .iter()
                .map(|_| Err(types::Error::Invalid(refused.clone())))
                .collect();
        }
        let this = &*self;
        futures_util::future::join_all(reqs.into_iter().map(|req| this.counted_send(req))).await
    }
}
