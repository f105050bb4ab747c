//! `tend:plugin/http`: outbound requests to the URL patterns granted to the plugin.

use crate::{Error, NotProvided, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;
use tend_rules::http::{MAX_SEND_ALL, UrlPattern, check_send_all, check_url};

/// The WIT records themselves: the host takes and answers with these very types.
pub use crate::bindings::tend::plugin::http::{Request, Response};

impl Request {
    pub fn get(url: &str) -> Self {
        Request {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout_ms: None,
        }
    }

    /// Give up after `timeout` (in whole milliseconds, at most `u32::MAX`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = Some(timeout.as_millis().min(u32::MAX as u128) as u32);
        self
    }
}

/// Outbound HTTP to the URL patterns granted to the plugin.
pub trait Http {
    fn send(&self, request: &Request) -> Result<Response>;

    /// Send every request, each exactly as [`Http::send`] would, and return
    /// their results in the same order. The wasm host sends them concurrently
    /// (32 at a time), so five probes with a 2 s timeout take 2 s,
    /// not 10. The default sends one after another, so implementations written
    /// before this method keep compiling.
    fn send_all(&self, requests: &[Request]) -> Vec<Result<Response>> {
        requests.iter().map(|request| self.send(request)).collect()
    }
}

impl Http for NotProvided {
    fn send(&self, _request: &Request) -> Result<Response> {
        Err(NotProvided::denied("http"))
    }
}

/// The wasm glue: the host's `http` import.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm {
    use super::{Request, Response};
    use crate::Result;
    use crate::bindings::tend::plugin::http;
    use crate::types::from_wit_error;

    pub(crate) struct WasmHttp;

    /// The most requests one host `send-all` call takes (`wit/http.wit`);
    /// more go in successive batches of this size.
    use tend_rules::http::MAX_SEND_ALL as SEND_ALL_MAX;

    impl crate::Http for WasmHttp {
        fn send(&self, request: &Request) -> Result<Response> {
            http::send(request).map_err(from_wit_error)
        }

        fn send_all(&self, requests: &[Request]) -> Vec<Result<Response>> {
            requests
                .chunks(SEND_ALL_MAX)
                .flat_map(|batch| {
                    http::send_all(batch)
                        .into_iter()
                        .map(|r| r.map_err(from_wit_error))
                })
                .collect()
        }
    }
}

/// The fake: scripted HTTP behind the host's grant rules. A request no
/// [`FakeHttp::grant`] matches is refused with the host's message (no grant at
/// all refuses everything) and not sent; a granted request is answered per
/// method and URL, and anything unscripted is `unavailable`, like a connection
/// refused. Records every request it sent, and the size of each host
/// `send-all` call (whose requests it answers one by one, as `send`):
/// [`Http::send_all`] makes one per [`MAX_SEND_ALL`] requests, as the wasm
/// glue does, and [`FakeHttp::send_batch`] is one such call.
pub struct FakeHttp {
    plugin: String,
    grants: RefCell<Vec<UrlPattern>>,
    responses: RefCell<HashMap<(String, String), Result<Response>>>,
    sent: RefCell<Vec<Request>>,
    batches: RefCell<Vec<usize>>,
}

impl crate::fake::Fake for FakeHttp {
    fn for_plugin(plugin: &str) -> Self {
        FakeHttp::new(plugin)
    }
}

impl Default for FakeHttp {
    /// For a plugin named "test".
    fn default() -> Self {
        FakeHttp::new("test")
    }
}

impl FakeHttp {
    /// No grants yet; `plugin` is named in denial messages.
    pub fn new(plugin: &str) -> Self {
        FakeHttp {
            plugin: plugin.to_string(),
            grants: RefCell::default(),
            responses: RefCell::default(),
            sent: RefCell::default(),
            batches: RefCell::default(),
        }
    }

    /// Allow URLs matching `pattern`, written as in `[plugins.NAME.grants] http`,
    /// e.g. "http://127.0.0.1:*/*", "http://10.0.0.0/8:*/*" or
    /// "https://*.example.com/v2/*" (the syntax is [`UrlPattern`]'s). Panics on
    /// a pattern the host would reject.
    pub fn grant(&self, pattern: &str) -> &Self {
        let pattern = UrlPattern::parse(pattern).unwrap_or_else(|e| panic!("FakeHttp::grant: {e}"));
        self.grants.borrow_mut().push(pattern);
        self
    }

    /// Answer `method url` with `response` (once granted).
    pub fn respond(&self, method: &str, url: &str, response: Result<Response>) -> &Self {
        self.responses
            .borrow_mut()
            .insert((method.to_ascii_uppercase(), url.to_string()), response);
        self
    }

    /// Answer `GET url` with `status` and an empty body.
    pub fn status(&self, url: &str, status: u16) -> &Self {
        self.respond(
            "GET",
            url,
            Ok(Response {
                status,
                headers: vec![],
                body: vec![],
            }),
        )
    }

    /// Every request sent so far (refused requests are not sent).
    pub fn sent(&self) -> Vec<Request> {
        self.sent.borrow().clone()
    }

    /// One host `send-all` call, answered as the host answers it: each
    /// request as [`Http::send`], in order; more than [`MAX_SEND_ALL`]
    /// requests are refused whole, each answered `invalid` with the host's
    /// message (nothing is sent, no batch recorded). [`Http::send_all`] never
    /// makes one that long: like the wasm glue, it splits the requests.
    pub fn send_batch(&self, requests: &[Request]) -> Vec<Result<Response>> {
        if let Err(refused) = check_send_all(requests.len()) {
            return requests
                .iter()
                .map(|_| Err(Error::Invalid(refused.clone())))
                .collect();
        }
        self.batches.borrow_mut().push(requests.len());
        requests.iter().map(|request| self.send(request)).collect()
    }

    /// How many requests each host `send-all` call carried, in order: a
    /// plugin that probes concurrently shows one batch per reconcile.
    pub fn batches(&self) -> Vec<usize> {
        self.batches.borrow().clone()
    }
}

impl Http for FakeHttp {
    fn send(&self, request: &Request) -> Result<Response> {
        // The host upper-cases the method before checking and sending.
        let method = request.method.to_ascii_uppercase();
        check_url(&self.grants.borrow(), &self.plugin, &method, &request.url)
            .map_err(crate::Error::from)?;
        self.sent.borrow_mut().push(request.clone());
        self.responses
            .borrow()
            .get(&(method, request.url.clone()))
            .cloned()
            .unwrap_or_else(|| {
                Err(Error::Unavailable(format!(
                    "{} {}: connection refused",
                    request.method, request.url
                )))
            })
    }

    /// As the wasm glue does: the requests go in host `send-all` calls of at
    /// most [`MAX_SEND_ALL`] each (see [`FakeHttp::send_batch`]).
    fn send_all(&self, requests: &[Request]) -> Vec<Result<Response>> {
        requests
            .chunks(MAX_SEND_ALL)
            .flat_map(|batch| self.send_batch(batch))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ungranted_requests_are_denied_and_not_sent() {
        let http = FakeHttp::new("mirror-gate");
        http.status("http://127.0.0.1:5000/v2/", 200);
        assert_eq!(
            http.send(&Request::get("http://127.0.0.1:5000/v2/")),
            Err(Error::Denied(
                "GET http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.mirror-gate.grants] http".into()
            ))
        );
        http.grant("http://127.0.0.1:5000/healthz");
        assert_eq!(
            http.send(&Request::get("http://127.0.0.1:5000/v2/"))
                .unwrap_err()
                .kind(),
            "denied"
        );
        assert!(http.sent().is_empty());
    }

    #[test]
    fn granted_requests_get_their_scripted_answer() {
        let http = FakeHttp::default();
        http.grant("http://127.0.0.1:*/*")
            .status("http://127.0.0.1:5000/v2/", 200);
        let mut request = Request::get("http://127.0.0.1:5000/v2/");
        request.method = "get".into();
        assert_eq!(http.send(&request).unwrap().status, 200);
        assert_eq!(http.sent(), [request]);
    }

    #[test]
    fn unscripted_http_is_unavailable_and_recorded() {
        let http = FakeHttp::default();
        http.grant("http://x/*");
        let err = http.send(&Request::get("http://x/")).unwrap_err();
        assert_eq!(err.kind(), "unavailable");
        assert_eq!(http.sent().len(), 1);
    }

    #[test]
    fn send_all_answers_each_request_as_send_in_order() {
        let http = FakeHttp::new("mirror-gate");
        http.grant("http://127.0.0.1:*/*")
            .status("http://127.0.0.1:5000/v2/", 200);
        let requests = [
            Request::get("http://127.0.0.1:5001/v2/"),
            Request::get("http://10.0.0.1:5000/v2/"),
            Request::get("http://127.0.0.1:5000/v2/"),
        ];
        let results = http.send_all(&requests);
        let kinds: Vec<&str> = results
            .iter()
            .map(|r| r.as_ref().map_or_else(Error::kind, |_| "ok"))
            .collect();
        assert_eq!(kinds, ["unavailable", "denied", "ok"]);
        assert_eq!(http.sent(), [requests[0].clone(), requests[2].clone()]);
        assert_eq!(http.batches(), [3]);
    }

    /// The host refuses a `send-all` of more than 32 requests whole; the
    /// SDK's `send_all` splits longer lists as the wasm glue does.
    #[test]
    fn a_host_send_all_takes_at_most_32_requests() {
        let http = FakeHttp::new("p");
        http.grant("http://127.0.0.1:*/*")
            .status("http://127.0.0.1:1/", 200);
        let requests = vec![Request::get("http://127.0.0.1:1/"); MAX_SEND_ALL + 1];
        let refused = http.send_batch(&requests);
        assert_eq!(refused.len(), 33);
        assert!(refused.iter().all(|r| r
            == &Err(Error::Invalid(
                "send-all takes at most 32 requests, got 33: split the call".into()
            ))));
        assert!(http.sent().is_empty() && http.batches().is_empty());
        assert!(http.send_batch(&requests[..32]).iter().all(Result::is_ok));
        let results = http.send_all(&requests);
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().is_ok_and(|r| r.status == 200))
        );
        assert_eq!(http.batches(), [32, 32, 1]);
    }

    /// An implementation written before `send_all` gets it, sequentially.
    #[test]
    fn send_all_defaults_to_sending_one_after_another() {
        let results = NotProvided.send_all(&[Request::get("http://x/"), Request::get("http://y/")]);
        assert_eq!(results.len(), 2);
        assert!(
            results
                .iter()
                .all(|r| r.as_ref().unwrap_err().kind() == "denied")
        );
    }

    #[test]
    #[should_panic(expected = "scheme must be http or https")]
    fn an_invalid_pattern_is_a_test_setup_error() {
        FakeHttp::default().grant("ftp://x/");
    }
}
