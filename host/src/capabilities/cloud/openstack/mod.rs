//! The OpenStack backend: Keystone v3 (a token, renewed before it expires and
//! once on a 401), Nova (servers) and Neutron (ports, security groups and
//! rules) over reqwest and serde. No maintained Rust crate covers Neutron
//! security groups on reqwest 0.12, and these are ten endpoints.
//!
//! Every request takes a slot of the plugin's and the host's rate first, has
//! [`super::backend::REQUEST_TIMEOUT`] (less when the reconcile's deadline comes first), and
//! its answer is read up to [`MAX_BODY`]: a broken or hostile cloud cannot
//! make the host buffer without bound. Listings follow limit/marker pages on
//! the URL they started from (only the marker is taken from a next link, so a
//! link to another host never gets the token) and return every page or an
//! error, never a partial list.

mod auth;
mod model;

use super::backend::{
    CloudBackend, CloudLimits, Instance, MAX_PAGES, OwnerTag, Rule, SecurityGroup,
};
use super::real::{Paced, Pacer};
use crate::capabilities::call::Call;
use crate::capabilities::cloud::CloudSettings;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use crate::peer::{self, BodyError, Redirects};
use crate::text::{inert, peer_answer};
use auth::{CatalogEntry, Credentials, endpoint};
use model::{Group, Port, Server};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The most bytes of one answer (one page) read.
const MAX_BODY: u64 = peer::MAX_PAGE;
/// Items a page asks for (Nova's and Neutron's usual maximum).
const PAGE: &str = "1000";

struct Token {
    value: String,
    renew_at: Instant,
    compute: String,
    network: String,
}

struct Shared {
    http: reqwest::Client,
    credentials: Credentials,
    token: tokio::sync::Mutex<Option<Arc<Token>>>,
    pacer: Pacer,
}

/// The backend, as the host or as one plugin's reconcile (`call`).
pub struct OpenStack {
    shared: Arc<Shared>,
    paced: Option<Paced>,
}

impl OpenStack {
    pub fn new(settings: &CloudSettings) -> anyhow::Result<Self> {
        let credentials = Credentials::load(settings)?;
        crate::tls::install_ring();
        // Every request carries the account's token (or password, to
        // Keystone): a redirect is never followed, so no other host gets it.
        let http = reqwest::Client::builder()
            .user_agent(concat!("tend/", env!("CARGO_PKG_VERSION")))
            .redirect(peer::redirects(Redirects::Never))
            .build()?;
        Ok(OpenStack {
            shared: Arc::new(Shared {
                http,
                credentials,
                token: tokio::sync::Mutex::default(),
                pacer: Pacer::new(settings.qps, settings.burst),
            }),
            paced: None,
        })
    }

    fn source(&self) -> &str {
        &self.shared.credentials.source
    }

    /// A live token: the one held, unless it is due for renewal or is
    /// `rejected` (a 401 answered it).
    async fn token(&self, rejected: Option<&str>) -> Result<Arc<Token>, CapError> {
        let mut held = self.shared.token.lock().await;
        if let Some(token) = held.as_ref() {
            let refused = rejected == Some(token.value.as_str());
            if !refused && Instant::now() < token.renew_at {
                return Ok(token.clone());
            }
        }
        let token = Arc::new(self.authenticate().await?);
        *held = Some(token.clone());
        Ok(token)
    }

    async fn authenticate(&self) -> Result<Token, CapError> {
        let credentials = &self.shared.credentials;
        let url = format!("{}/auth/tokens", credentials.auth_url);
        let timeout = self
            .shared
            .pacer
            .slot(self.paced.as_ref(), "authenticate")
            .await?;
        let request = self
            .shared
            .http
            .post(&url)
            .header("Content-Type", "application/json")
            .body(credentials.token_request().to_string());
        let (status, headers, body) = self.exchange("authenticate", request, timeout).await?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(CapError::Unavailable(format!(
                "cloud: Keystone at {url} refused the credentials of {} ({status}): fix them there",
                self.source()
            )));
        }
        let body = self.success("authenticate", status, body)?;
        let value = headers
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| self.broken("authenticate", "no X-Subject-Token header"))?;
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Body,
        }
        #[derive(serde::Deserialize)]
        struct Body {
            expires_at: String,
            issued_at: Option<String>,
            #[serde(default)]
            catalog: Vec<CatalogEntry>,
        }
        let answer: Answer = parse("authenticate", &body)?;
        let token = answer.token;
        let expires = model::millis(&token.expires_at);
        let issued = token.issued_at.as_deref().and_then(model::millis);
        let life = match (expires, issued) {
            (Some(e), Some(i)) if e > i => Duration::from_millis((e - i) as u64),
            _ => Duration::from_secs(3600),
        };
        let region = credentials.region.as_deref();
        let interface = &credentials.interface;
        let pick = |kind| {
            endpoint(&token.catalog, kind, interface, region).map_err(|e| {
                CapError::Unavailable(format!("cloud: {e} (credentials of {})", self.source()))
            })
        };
        let compute = pick("compute")?;
        let network = pick("network")?;
        let network = if network.ends_with("/v2.0") {
            network
        } else {
            format!("{network}/v2.0")
        };
        Ok(Token {
            value: value.to_string(),
            renew_at: Instant::now() + life - renewal_margin(life),
            compute,
            network,
        })
    }

    /// Send `request` within `timeout`; its status, headers and body, read
    /// up to [`MAX_BODY`].
    async fn exchange(
        &self,
        operation: &'static str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), CapError> {
        let exchange = async {
            let response = request
                .send()
                .await
                .map_err(|e| self.unreachable(operation, &e))?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = peer::read_body(response, MAX_BODY)
                .await
                .map_err(|e| match e {
                    BodyError::TooLarge { .. } => {
                        self.broken(operation, "an answer larger than 16 MiB")
                    }
                    cut => CapError::Unavailable(format!(
                        "cloud {operation}: {cut}: never a partial answer"
                    )),
                })?;
            Ok((status, headers, body))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(CapError::Timeout(format!(
                    "cloud {operation}: OpenStack did not answer within {}",
                    humantime::format_duration(Duration::from_secs(timeout.as_secs().max(1)))
                )))
            })
    }

    fn unreachable(&self, operation: &str, e: &reqwest::Error) -> CapError {
        if e.is_timeout() {
            return CapError::Timeout(format!(
                "cloud {operation}: OpenStack did not answer in time"
            ));
        }
        CapError::Unavailable(format!(
            "cloud {operation}: cannot reach OpenStack ({}): is the endpoint in the catalog of {} reachable?",
            inert(&e.to_string()),
            self.source()
        ))
    }

    fn broken(&self, operation: &str, what: &str) -> CapError {
        CapError::Other(format!("cloud {operation}: OpenStack answered {what}"))
    }

    /// The body of a successful answer, or the error its status means.
    fn success(
        &self,
        operation: &str,
        status: StatusCode,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, CapError> {
        if status.is_success() {
            return Ok(body);
        }
        if status.is_redirection() {
            return Err(CapError::Unavailable(format!(
                "cloud {operation}: OpenStack answered {status}, a redirect, which Tend does not follow (every request carries the token of {}): put the service's final URL in the catalog",
                self.source()
            )));
        }
        let message = format!(
            "cloud {operation}: OpenStack answered {status}: {}",
            fault(&body)
        );
        Err(match status.as_u16() {
            401 => CapError::Unavailable(format!(
                "{message}: the credentials of {} are refused even after a new token",
                self.source()
            )),
            403 => CapError::Other(format!(
                "{message}: the credentials of {} may not do this: give their project the role",
                self.source()
            )),
            404 => CapError::NotFound(message),
            409 | 412 => CapError::Conflict(message),
            500.. => CapError::Unavailable(message),
            _ => CapError::Other(message),
        })
    }

    /// One request to Nova or Neutron: a rate slot, a live token, the
    /// request; on a 401 a new token and the request once more.
    async fn send(
        &self,
        operation: &'static str,
        method: Method,
        url: impl Fn(&Token) -> String,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<(StatusCode, Vec<u8>), CapError> {
        let mut rejected: Option<String> = None;
        loop {
            let token = self.token(rejected.as_deref()).await?;
            let timeout = self
                .shared
                .pacer
                .slot(self.paced.as_ref(), operation)
                .await?;
            let mut request = self
                .shared
                .http
                .request(method.clone(), url(&token))
                .header("X-Auth-Token", &token.value)
                .header("Accept", "application/json");
            if let Some(body) = body {
                request = request
                    .header("Content-Type", "application/json")
                    .body(body.to_string());
            }
            if let Some(revision) = if_match {
                request = request.header("If-Match", format!("revision_number={revision}"));
            }
            let (status, _, body) = self.exchange(operation, request, timeout).await?;
            if status == StatusCode::UNAUTHORIZED && rejected.is_none() {
                rejected = Some(token.value.clone());
                continue;
            }
            return Ok((status, body));
        }
    }

    async fn get<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        url: impl Fn(&Token) -> String,
    ) -> Result<Option<T>, CapError> {
        let (status, body) = self.send(operation, Method::GET, url, None, None).await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = self.success(operation, status, body)?;
        parse(operation, &body).map(Some)
    }

    /// Every item of a limit/marker listing under `key`, or an error.
    async fn list<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        url: impl Fn(&Token) -> String,
        query: &[(&str, &str)],
        key: &str,
    ) -> Result<Vec<T>, CapError> {
        let links = format!("{key}_links");
        let mut items = Vec::new();
        let mut marker: Option<String> = None;
        let mut markers = HashSet::new();
        for page in 1..=MAX_PAGES {
            let page_url = |token: &Token| {
                let mut url = Url::parse(&url(token)).expect("catalog URLs are URLs");
                {
                    let mut pairs = url.query_pairs_mut();
                    pairs.extend_pairs(query).append_pair("limit", PAGE);
                    if let Some(marker) = &marker {
                        pairs.append_pair("marker", marker);
                    }
                }
                url.to_string()
            };
            // A page cut off or not answered is the listing's failure too:
            // say which page, as for a failed status.
            let (status, body) = self
                .send(operation, Method::GET, page_url, None, None)
                .await
                .map_err(|e| e.map_message(|m| format!("{m} (page {page})")))?;
            let body = self.success(&format!("{operation} (page {page})"), status, body)?;
            let mut answer: Value = parse(operation, &body)?;
            let Some(Value::Array(page_items)) = answer.get_mut(key).map(Value::take) else {
                return Err(self.broken(operation, &format!("page {page} without {key:?}")));
            };
            for item in page_items {
                items.push(serde_json::from_value(item).map_err(|e| {
                    self.broken(
                        operation,
                        &format!("an unreadable item on page {page} ({e})"),
                    )
                })?);
            }
            match next_marker(&answer, &links) {
                Err(why) => return Err(self.broken(operation, &format!("{why} on page {page}"))),
                Ok(None) => return Ok(items),
                Ok(Some(next)) => {
                    if !markers.insert(next.clone()) {
                        return Err(self.broken(
                            operation,
                            &format!("the page marker {:?} twice (page {page}): a listing that never ends", inert(&next)),
                        ));
                    }
                    marker = Some(next);
                }
            }
        }
        Err(self.broken(
            operation,
            &format!("more than {MAX_PAGES} pages: never a partial list"),
        ))
    }

    /// Every port, by the server it belongs to (one paged listing).
    async fn ports(
        &self,
        operation: &'static str,
        device: Option<&str>,
    ) -> Result<HashMap<String, Vec<Port>>, CapError> {
        let query: Vec<(&str, &str)> = device.map(|d| ("device_id", d)).into_iter().collect();
        let ports: Vec<Port> = self
            .list(
                operation,
                |t| format!("{}/ports", t.network),
                &query,
                "ports",
            )
            .await?;
        let mut by_device: HashMap<String, Vec<Port>> = HashMap::new();
        for port in ports {
            by_device
                .entry(port.device_id.clone())
                .or_default()
                .push(port);
        }
        Ok(by_device)
    }

    fn instance(
        &self,
        server: Server,
        ports: &HashMap<String, Vec<Port>>,
    ) -> Result<Instance, CapError> {
        let own: Vec<&Port> = ports.get(&server.id).into_iter().flatten().collect();
        model::instance(server, &own).map_err(|e| self.broken("list-instances", &inert(&e)))
    }

    /// Groups with a query (ids or a name), every page.
    async fn groups(
        &self,
        operation: &'static str,
        query: &[(&str, &str)],
    ) -> Result<Vec<SecurityGroup>, CapError> {
        let groups: Vec<Group> = self
            .list(
                operation,
                |t| format!("{}/security-groups", t.network),
                query,
                "security_groups",
            )
            .await?;
        groups
            .into_iter()
            .map(|g| model::group(g).map_err(|e| self.broken(operation, &inert(&e))))
            .collect()
    }

    /// Add `group_id` to `port` (revision checked); a port changed meanwhile
    /// is read again and tried once more.
    async fn add_to_port(&self, mut port: Port, group_id: &str) -> Result<bool, CapError> {
        const OPERATION: &str = "add-to-group";
        for attempt in 0..2 {
            if port.security_groups.iter().any(|g| g == group_id) {
                return Ok(attempt > 0);
            }
            let mut groups = port.security_groups.clone();
            groups.push(group_id.to_string());
            let body = json!({ "port": { "security_groups": groups } });
            let id = port.id.clone();
            let url = |t: &Token| format!("{}/ports/{id}", t.network);
            let (status, answer) = self
                .send(
                    OPERATION,
                    Method::PUT,
                    url,
                    Some(&body),
                    port.revision_number,
                )
                .await?;
            if status != StatusCode::PRECONDITION_FAILED {
                self.success(OPERATION, status, answer)?;
                return Ok(true);
            }
            #[derive(serde::Deserialize)]
            struct Answer {
                port: Port,
            }
            let fresh: Option<Answer> = self.get(OPERATION, url).await?;
            port = fresh
                .ok_or_else(|| {
                    CapError::NotFound(format!("cloud add-to-group: port {id} is gone"))
                })?
                .port;
        }
        Err(CapError::Conflict(format!(
            "cloud add-to-group: port {} changed twice while adding {group_id}: try again in the next reconcile",
            port.id
        )))
    }
}

/// How long before its expiry a token is renewed: 5 minutes, or a tenth of
/// its life when that is shorter.
fn renewal_margin(life: Duration) -> Duration {
    (life / 10).min(Duration::from_secs(300))
}

fn parse<T: DeserializeOwned>(operation: &str, body: &[u8]) -> Result<T, CapError> {
    serde_json::from_slice(body).map_err(|e| {
        CapError::Other(format!(
            "cloud {operation}: OpenStack answered unreadable JSON ({e}): a truncated or broken answer"
        ))
    })
}

/// The marker of a listing's next page, from its `<key>_links`.
fn next_marker(answer: &Value, links: &str) -> Result<Option<String>, String> {
    let next = answer
        .get(links)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|l| l.get("rel").and_then(Value::as_str) == Some("next"));
    let Some(link) = next else {
        return Ok(None);
    };
    let href = link.get("href").and_then(Value::as_str).unwrap_or_default();
    let url =
        Url::parse(href).map_err(|_| format!("a next link that is no URL ({:?})", inert(href)))?;
    url.query_pairs()
        .find(|(k, _)| k == "marker")
        .map(|(_, v)| Some(v.into_owned()))
        .ok_or_else(|| "a next link without a marker".to_string())
}

/// The message of an OpenStack error body, bounded and inert.
fn fault(body: &[u8]) -> String {
    let text = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        let inner = v.as_object()?.values().next()?.clone();
        inner
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    match text {
        Some(message) => peer_answer(message.as_bytes()),
        None => peer_answer(body),
    }
}

/// Nova's and Neutron's error type ("SecurityGroupRuleExists").
fn fault_type(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("NeutronError")?
        .get("type")?
        .as_str()
        .map(str::to_string)
}

#[async_trait::async_trait]
impl CloudBackend for OpenStack {
    fn provider(&self) -> &'static str {
        "openstack"
    }

    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: CloudLimits) -> Arc<dyn CloudBackend> {
        Arc::new(OpenStack {
            shared: self.shared.clone(),
            paced: Some(Paced {
                call: call.clone(),
                limits,
            }),
        })
    }

    async fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>, CapError> {
        const OPERATION: &str = "list-instances";
        // Nova cannot filter by metadata: the owner is kept here.
        let servers: Vec<Server> = self
            .list(
                OPERATION,
                |t| format!("{}/servers/detail", t.compute),
                &[],
                "servers",
            )
            .await?;
        let owned: Vec<Server> = servers
            .into_iter()
            .filter(|s| s.metadata.get(&owner.key) == Some(&owner.value))
            .collect();
        if owned.is_empty() {
            return Ok(vec![]);
        }
        let ports = self.ports(OPERATION, None).await?;
        owned
            .into_iter()
            .map(|s| self.instance(s, &ports))
            .collect()
    }

    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CapError> {
        const OPERATION: &str = "get-instance";
        #[derive(serde::Deserialize)]
        struct Answer {
            server: Server,
        }
        let url = |t: &Token| format!("{}/servers/{id}", t.compute);
        let Some(answer) = self.get::<Answer>(OPERATION, url).await? else {
            return Ok(None);
        };
        let ports = self.ports(OPERATION, Some(id)).await?;
        self.instance(answer.server, &ports).map(Some)
    }

    async fn delete_instance(&self, _: Permit, id: &str) -> Result<(), CapError> {
        const OPERATION: &str = "delete-instance";
        let url = |t: &Token| format!("{}/servers/{id}", t.compute);
        let (status, body) = self
            .send(OPERATION, Method::DELETE, url, None, None)
            .await?;
        if status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        self.success(OPERATION, status, body).map(drop)
    }

    async fn list_security_groups(&self, ids: &[String]) -> Result<Vec<SecurityGroup>, CapError> {
        let query: Vec<(&str, &str)> = ids.iter().map(|id| ("id", id.as_str())).collect();
        self.groups("list-security-groups", &query).await
    }

    async fn find_security_groups(&self, name: &str) -> Result<Vec<SecurityGroup>, CapError> {
        self.groups("find-security-group", &[("name", name)]).await
    }

    async fn ensure_rule(&self, _: Permit, group_id: &str, rule: &Rule) -> Result<bool, CapError> {
        const OPERATION: &str = "ensure-rule";
        let body = model::rule_request(group_id, rule);
        let url = |t: &Token| format!("{}/security-group-rules", t.network);
        let (status, answer) = self
            .send(OPERATION, Method::POST, url, Some(&body), None)
            .await?;
        if status == StatusCode::CONFLICT
            && fault_type(&answer).as_deref() == Some("SecurityGroupRuleExists")
        {
            return Ok(false);
        }
        self.success(OPERATION, status, answer).map(|_| true)
    }

    async fn add_to_group(
        &self,
        _: Permit,
        instance: &Instance,
        group_id: &str,
    ) -> Result<bool, CapError> {
        let mut ports = self.ports("add-to-group", Some(&instance.id)).await?;
        let ports = ports.remove(&instance.id).unwrap_or_default();
        if ports.is_empty() {
            return Err(CapError::Conflict(format!(
                "cloud add-to-group: instance {} has no ports to put in {group_id}",
                instance.id
            )));
        }
        let mut added = false;
        for port in ports {
            added |= self.add_to_port(port, group_id).await?;
        }
        Ok(added)
    }

    fn requests(&self) -> u64 {
        self.shared.pacer.requests()
    }

    fn rate_metrics(&self, configured: &dyn Fn(&str) -> bool) -> String {
        self.shared.pacer.render(self.provider(), configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_before_they_expire() {
        assert_eq!(
            renewal_margin(Duration::from_secs(3600)),
            Duration::from_secs(300)
        );
        assert_eq!(
            renewal_margin(Duration::from_secs(60)),
            Duration::from_secs(6)
        );
    }

    #[test]
    fn next_pages_are_found_by_their_marker_only() {
        let answer = json!({"servers": [], "servers_links": [
            {"rel": "next", "href": "http://elsewhere.example/compute/v2.1/servers/detail?limit=2&marker=abc"}]});
        assert_eq!(
            next_marker(&answer, "servers_links").unwrap().as_deref(),
            Some("abc")
        );
        assert_eq!(
            next_marker(&json!({"servers": []}), "servers_links").unwrap(),
            None
        );
        let no_marker =
            json!({"servers_links": [{"rel": "next", "href": "http://x/servers/detail?limit=2"}]});
        assert!(
            next_marker(&no_marker, "servers_links")
                .unwrap_err()
                .contains("without a marker")
        );
    }

    #[test]
    fn faults_are_bounded_and_inert() {
        let body =
            br#"{"badRequest": {"code": 400, "message": "marker [x] not found\n\u001b[31m"}}"#;
        assert_eq!(fault(body), "marker [x] not found\\n\\u{1b}[31m");
        let neutron = br#"{"NeutronError": {"type": "SecurityGroupRuleExists", "message": "exists", "detail": ""}}"#;
        assert_eq!(
            fault_type(neutron).as_deref(),
            Some("SecurityGroupRuleExists")
        );
        assert!(fault(&vec![b'x'; 100_000]).len() <= 512);
    }
}
