//! `tend:plugin/http`: outbound requests to granted URL patterns only. Methods
//! that only read are probes; any other method is a mutation and passes the
//! mutation gate.

mod adapter;
mod backend;
mod fake;
mod grants;
mod real;
mod wit;

pub use adapter::PluginHttp;
pub use backend::{DEFAULT_TIMEOUT, HttpBackend, HttpRequest, HttpResponse, MAX_BODY, is_safe};
pub use fake::FakeHttp;
pub use grants::{UrlPattern, check_url};
pub use real::RealHttp;

use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits, NoSettings};
use crate::wit::http;
use std::sync::Arc;
use tend_rules::wit::http::Function;
use wasmtime::component::{HasSelf, Linker};

/// The mutating operation (a request with a method that changes something),
/// as budgets, the journal and call counts name it.
const SEND: &str = Function::Send.name();

impl Capability for PluginHttp {
    const NAME: &'static str = "http";
    const MUTATIONS: &'static [&'static str] = &[SEND];
    type Grant = Vec<UrlPattern>;
    type Settings = NoSettings;
    type Limits = NoLimits;
    type Backend = dyn HttpBackend;
    type Fake = FakeHttp;

    fn describe_grant(grants: &Vec<UrlPattern>) -> Vec<String> {
        grants.iter().map(|g| g.text.clone()).collect()
    }

    fn real(_: &NoSettings, _: &BackendEnv) -> anyhow::Result<Arc<dyn HttpBackend>> {
        Ok(Arc::new(RealHttp::new()?))
    }

    fn fake() -> (Arc<dyn HttpBackend>, Arc<FakeHttp>) {
        let fake = Arc::new(FakeHttp::default());
        (fake.clone(), fake)
    }

    fn for_call(
        backend: &Arc<dyn HttpBackend>,
        grants: &Vec<UrlPattern>,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginHttp {
            backend: backend.clone(),
            grants: grants.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        http::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }
}

use crate::capabilities::CapError;

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginHttp {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, CapError> {
        self.send(req).await
    }
    /// Each request answered as one `send` (recorded, journaled, bounded
    /// alike), all at once; a list over the limit is refused whole.
    async fn send_all(
        &self,
        reqs: Vec<HttpRequest>,
    ) -> wasmtime::Result<Vec<Result<HttpResponse, crate::wit::types::Error>>> {
        use crate::capabilities::Capability;
        if let Err(refused) = tend_rules::http::check_send_all(reqs.len()) {
            let refusal = crate::wit::types::Error::Invalid(refused);
            return Ok(reqs.iter().map(|_| Err(refusal.clone())).collect());
        }
        let answers = reqs.into_iter().map(|req| {
            self.call
                .answer(Self::NAME, SEND, (req,), |(req,)| self.send(req))
        });
        futures_util::future::join_all(answers)
            .await
            .into_iter()
            .collect()
    }
}
