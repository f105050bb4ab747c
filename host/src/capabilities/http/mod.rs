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
