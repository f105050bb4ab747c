//! Tend's own registry client for pulls (manifests, blobs, the token
//! exchange), on the one bounded reader of [`crate::peer`]: oci-client reads
//! a manifest whole before any size check and follows every redirect, so a
//! hostile registry could make Tend hold gigabytes or fetch an internal URL.
//! Here every body is bounded while it is read, redirects and token realms
//! pass [`crate::peer::check_target`], and what the registry answers is
//! shown only through [`peer_answer`]. Pushes (`tend-author plugins push`, run by
//! the operator) still use oci-client.

use super::Settings;
use super::reference::{Reference, Target};
use crate::peer::{self, BodyError, Redirects, Refused};
use crate::text::{MAX_PEER_TEXT, inert, peer_answer};
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use reqwest::header::{ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use std::sync::Mutex;
use std::time::Duration;

/// A token endpoint's answer is a few KiB at most.
const MAX_TOKEN: u64 = 64 << 10;

/// One registry, reached with its credentials.
pub struct Registry {
    http: reqwest::Client,
    /// `scheme://host[:port]/v2/`.
    base: Url,
    /// As the reference names it, for messages.
    name: String,
    auth: RegistryAuth,
    /// The `Authorization` value once a challenge was answered.
    authorization: Mutex<Option<String>>,
}

impl Registry {
    /// The registry `name` (`host[:port]`): over plain HTTP when listed in
    /// `[host.oci] insecure-registries`, else HTTPS.
    pub fn new(settings: &Settings, name: &str, auth: RegistryAuth) -> Result<Registry, String> {
        crate::tls::install_ring();
        let scheme = if settings.insecure_registries.iter().any(|r| r == name) {
            "http"
        } else {
            "https"
        };
        let host = match name {
            "docker.io" | "index.docker.io" => "registry-1.docker.io",
            other => other,
        };
        let base = Url::parse(&format!("{scheme}://{host}/v2/"))
            .map_err(|e| format!("registry {name}: not a host[:port] ({e})"))?;
        let http = reqwest::Client::builder()
            .user_agent(concat!("tend/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(30))
            .redirect(peer::redirects(Redirects::Checked))
            .build()
            .map_err(|e| format!("registry {name}: cannot build an HTTP client: {e}"))?;
        Ok(Registry {
            http,
            base,
            name: name.to_string(),
            auth,
            authorization: Mutex::new(None),
        })
    }

    /// The manifest `reference` names, at most `max` bytes.
    pub async fn manifest(
        &self,
        reference: &Reference,
        accept: &[&str],
        max: u64,
    ) -> Result<Vec<u8>, String> {
        let target = match &reference.target {
            Target::Tag(tag) => tag,
            Target::Digest(digest) => digest,
        };
        let path = format!("manifests/{target}");
        let accept = accept.join(", ");
        self.get(
            &reference.repository,
            &path,
            Some(accept.as_str()),
            max,
            "the manifest",
        )
        .await
    }

    /// The blob `digest` of `reference`'s repository, at most `max` bytes.
    pub async fn blob(
        &self,
        reference: &Reference,
        digest: &str,
        max: u64,
    ) -> Result<Vec<u8>, String> {
        let what = format!("the blob {digest}");
        self.get(
            &reference.repository,
            &format!("blobs/{digest}"),
            None,
            max,
            &what,
        )
        .await
    }

    /// GET `/v2/REPOSITORY/PATH`, answering one auth challenge; the body at
    /// most `max` bytes (`what` names it in the refusal).
    async fn get(
        &self,
        repository: &str,
        path: &str,
        accept: Option<&str>,
        max: u64,
        what: &str,
    ) -> Result<Vec<u8>, String> {
        let url = self
            .base
            .join(&format!("{repository}/{path}"))
            .map_err(|e| format!("registry {}: {e}", self.name))?;
        let mut response = self.send(&url, accept).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let challenge = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            self.authorize(challenge.as_deref(), repository).await?;
            response = self.send(&url, accept).await?;
        }
        let status = response.status();
        if !status.is_success() {
            let said = self.said(response).await;
            return Err(self.answered(status, &said));
        }
        peer::read_body(response, max).await.map_err(|e| match e {
            BodyError::TooLarge { max } => format!(
                "registry {}: {what} is larger than {max} bytes: refused (a registry sending more is broken or hostile)",
                self.name
            ),
            cut => format!("registry {}: reading {what}: {cut}", self.name),
        })
    }

    async fn send(&self, url: &Url, accept: Option<&str>) -> Result<reqwest::Response, String> {
        let mut request = self.http.get(url.clone());
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        let authorization = self.authorization.lock().unwrap().clone();
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        request.send().await.map_err(|e| self.unreachable(&e))
    }

    /// Answer the registry's `401` challenge: Basic with the configured
    /// credentials, or a Bearer token from the realm it names (the realm
    /// passes the same rule as a redirect).
    async fn authorize(&self, challenge: Option<&str>, repository: &str) -> Result<(), String> {
        let name = &self.name;
        let credentials_hint = "add the registry's credentials to the docker config file: [host.oci] docker-config or DOCKER_CONFIG";
        let Some((scheme, params)) = challenge.and_then(parse_challenge) else {
            return Err(format!(
                "registry {name}: answered 401 Unauthorized without a usable challenge ({credentials_hint})"
            ));
        };
        let value = if scheme.eq_ignore_ascii_case("basic") {
            let RegistryAuth::Basic(user, password) = &self.auth else {
                return Err(format!(
                    "registry {name}: asks for credentials ({credentials_hint})"
                ));
            };
            format!("Basic {}", basic(user, password))
        } else if scheme.eq_ignore_ascii_case("bearer") {
            format!("Bearer {}", self.token(&params, repository).await?)
        } else {
            return Err(format!(
                "registry {name}: asks for {} authentication, which Tend does not speak",
                inert(&scheme)
            ));
        };
        *self.authorization.lock().unwrap() = Some(value);
        Ok(())
    }

    /// A pull token for `repository` from the challenge's realm.
    async fn token(&self, params: &[(String, String)], repository: &str) -> Result<String, String> {
        let name = &self.name;
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.as_str())
        };
        let realm = param("realm")
            .and_then(|r| Url::parse(r).ok())
            .ok_or_else(|| format!("registry {name}: its Bearer challenge names no realm URL"))?;
        peer::check_target(&self.base, &realm).map_err(|why| {
            format!(
                "registry {name}: its token realm {} is refused: {why}",
                peer::shown_host(&realm)
            )
        })?;
        let mut url = realm;
        url.query_pairs_mut()
            .append_pair("scope", &format!("repository:{repository}:pull"));
        if let Some(service) = param("service") {
            url.query_pairs_mut().append_pair("service", service);
        }
        let mut request = self.http.get(url.clone());
        if let RegistryAuth::Basic(user, password) = &self.auth {
            request = request.header(AUTHORIZATION, format!("Basic {}", basic(user, password)));
        }
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!(
                "registry {name}: its token realm {} answered {status}: {} (check the credentials in the docker config file)",
                peer::shown_host(&url),
                self.said(response).await
            ));
        }
        let from = response.url().clone();
        let body = peer::read_body(response, MAX_TOKEN)
            .await
            .map_err(|e| format!("registry {name}: its token realm: {e}"))?;
        let token: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        token["token"]
            .as_str()
            .or_else(|| token["access_token"].as_str())
            .filter(|t| !t.is_empty() && !t.chars().any(char::is_control))
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "registry {name}: its token realm answered no token: {}",
                    self.shown(&from, &body)
                )
            })
    }

    /// The error for a failed request: a refused redirect names the target
    /// and why (never its answer); anything else the cause, inert.
    fn unreachable(&self, e: &reqwest::Error) -> String {
        let name = &self.name;
        if let Some(refused) = Refused::inside(e) {
            return format!("registry {name}: the registry {refused}");
        }
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        let hint = if e.is_timeout() {
            "the registry did not answer in time"
        } else {
            "is the registry reachable? plain-HTTP registries must be listed in [host.oci] insecure-registries"
        };
        format!("registry {name}: {} ({hint})", peer_answer(text.as_bytes()))
    }

    /// What `response` said, for an error message: see [`Registry::shown`].
    /// Only the first bytes are read (one more than shown, for the cut marker).
    async fn said(&self, response: reqwest::Response) -> String {
        let from = response.url().clone();
        let body = peer::read_prefix(response, MAX_PEER_TEXT + 1).await;
        self.shown(&from, &body)
    }

    /// `body`, answered by `from`, as an error message shows it: cut and
    /// inert when the registry itself answered; when a redirect or a token
    /// realm sent Tend to another origin, only that origin's name (an
    /// internal service's answer is never echoed into a load error,
    /// `/status` or the log).
    fn shown(&self, from: &Url, body: &[u8]) -> String {
        if from.origin() == self.base.origin() {
            peer_answer(body)
        } else {
            format!(
                "(the answer of {}, where the registry sent Tend, is not shown)",
                peer::shown_host(from)
            )
        }
    }

    /// The error for a non-success status, with what the registry said.
    fn answered(&self, status: StatusCode, said: &str) -> String {
        let hint = match status.as_u16() {
            401 | 403 => {
                " (add the registry's credentials to the docker config file: [host.oci] docker-config or DOCKER_CONFIG)"
            }
            404 => {
                " (no such repository, tag or digest in the registry: check the reference, or push it)"
            }
            _ => "",
        };
        format!("registry {}: answered {status}: {said}{hint}", self.name)
    }
}

fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// `Bearer realm="…",service="…"` as its scheme and parameters (values
/// unquoted; a quoted value may hold commas).
fn parse_challenge(header: &str) -> Option<(String, Vec<(String, String)>)> {
    let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    let mut params = Vec::new();
    let mut rest = rest.trim_start();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_once(',').map_or((after, ""), |(v, a)| (v, a)),
        };
        params.push((key.trim().to_string(), value.to_string()));
        rest = after.trim_start_matches([',', ' ']);
    }
    Some((scheme.to_string(), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_registrys_own_origin_has_its_answer_shown() {
        let settings = Settings {
            insecure_registries: vec!["127.0.0.1:5000".into()],
            ..Settings::default()
        };
        let registry = Registry::new(&settings, "127.0.0.1:5000", RegistryAuth::Anonymous).unwrap();
        let own = Url::parse("http://127.0.0.1:5000/v2/a/manifests/v1").unwrap();
        assert_eq!(
            registry.shown(&own, b"manifest unknown\n"),
            "manifest unknown\\n"
        );
        for elsewhere in [
            "http://127.0.0.2:5000/internal",
            "http://127.0.0.1:5001/internal",
            "https://127.0.0.1:5000/v2/",
        ] {
            let shown = registry.shown(&Url::parse(elsewhere).unwrap(), b"INTERNAL-SECRET");
            assert!(
                !shown.contains("SECRET") && shown.contains("is not shown"),
                "{elsewhere}: {shown}"
            );
        }
    }

    #[test]
    fn challenges_are_parsed_with_quoted_commas() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="r.example.com",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(scheme, "Bearer");
        assert_eq!(
            params,
            vec![
                ("realm".into(), "https://auth.example.com/token".into()),
                ("service".into(), "r.example.com".into()),
                ("scope".into(), "repository:a/b:pull,push".into()),
            ]
        );
        assert_eq!(parse_challenge(r#"Basic realm="x""#).unwrap().0, "Basic");
        assert!(parse_challenge(r#"Bearer realm="unterminated"#).is_none());
    }
}
