//! Where the OpenStack credentials come from and what Keystone v3 answers:
//! a clouds.yaml entry (`[host.cloud] cloud`, else `OS_CLOUD`; the first of
//! `OS_CLIENT_CONFIG_FILE`, ./clouds.yaml, ~/.config/openstack/clouds.yaml,
//! /etc/openstack/clouds.yaml that has it) or the `OS_*` variables; password
//! or application credential auth; the service catalog's compute and network
//! URLs of the region and interface (public by default).

use crate::capabilities::cloud::CloudSettings;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How this host authenticates, and where that came from (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Credentials {
    /// Keystone's v3 root: "https://keystone.example.com:5000/v3".
    pub auth_url: String,
    method: Method,
    pub region: Option<String>,
    pub interface: String,
    /// "clouds.yaml entry \"prod\" (/etc/openstack/clouds.yaml)", "the OS_* variables".
    pub source: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Method {
    Password {
        user: Named,
        user_domain: Named,
        password: String,
        project: Option<(Named, Named)>,
    },
    ApplicationCredential {
        id: String,
        secret: String,
    },
}

/// An object Keystone knows by ID or by name.
#[derive(Debug, Clone, PartialEq)]
enum Named {
    Id(String),
    Name(String),
}

impl Named {
    fn pick(id: Option<String>, name: Option<String>) -> Option<Named> {
        id.map(Named::Id).or(name.map(Named::Name))
    }

    fn json(&self) -> Value {
        match self {
            Named::Id(id) => json!({ "id": id }),
            Named::Name(name) => json!({ "name": name }),
        }
    }
}

/// The fields of a clouds.yaml entry (or the `OS_*` variables) used here.
#[derive(Debug, Default, Deserialize)]
struct Entry {
    auth_type: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, String>,
    region_name: Option<String>,
    interface: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CloudsFile {
    #[serde(default)]
    clouds: BTreeMap<String, Entry>,
}

/// Where clouds.yaml is looked for, in order.
fn clouds_files(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    files.extend(env("OS_CLIENT_CONFIG_FILE").map(PathBuf::from));
    files.push(PathBuf::from("clouds.yaml"));
    files.extend(env("HOME").map(|home| PathBuf::from(home).join(".config/openstack/clouds.yaml")));
    files.push(PathBuf::from("/etc/openstack/clouds.yaml"));
    files
}

impl Credentials {
    /// From `settings` and the process environment.
    pub fn load(settings: &CloudSettings) -> anyhow::Result<Credentials> {
        Self::from(settings, &|name| std::env::var(name).ok())
    }

    fn from(
        settings: &CloudSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Credentials> {
        let (entry, source) = match settings.cloud.clone().or_else(|| env("OS_CLOUD")) {
            Some(name) => Self::clouds_entry(&name, env)?,
            None => (
                Self::env_entry(env),
                "the OS_* environment variables".to_string(),
            ),
        };
        let mut credentials = Self::of_entry(entry, &source)?;
        if let Some(url) = &settings.endpoint {
            credentials.auth_url = v3(&url.0);
        }
        if settings.region.is_some() {
            credentials.region = settings.region.clone();
        }
        Ok(credentials)
    }

    fn clouds_entry(
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<(Entry, String)> {
        let files = clouds_files(env);
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let parsed: CloudsFile = yaml_serde::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            if let Some(entry) = parsed.clouds.into_iter().find(|(n, _)| n == name) {
                return Ok((
                    entry.1,
                    format!("clouds.yaml entry {name:?} ({})", file.display()),
                ));
            }
        }
        let looked: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        anyhow::bail!(
            "OpenStack cloud {name:?} ([host.cloud] cloud or OS_CLOUD) is in none of {}: add it to one, or set OS_CLIENT_CONFIG_FILE",
            looked.join(", ")
        )
    }

    fn env_entry(env: &dyn Fn(&str) -> Option<String>) -> Entry {
        let mut auth = BTreeMap::new();
        for key in [
            "auth_url",
            "username",
            "user_id",
            "password",
            "project_name",
            "project_id",
            "user_domain_name",
            "user_domain_id",
            "project_domain_name",
            "project_domain_id",
            "application_credential_id",
            "application_credential_secret",
        ] {
            if let Some(value) = env(&format!("OS_{}", key.to_uppercase())) {
                auth.insert(key.to_string(), value);
            }
        }
        Entry {
            auth_type: env("OS_AUTH_TYPE"),
            auth,
            region_name: env("OS_REGION_NAME"),
            interface: env("OS_INTERFACE"),
        }
    }

    fn of_entry(entry: Entry, source: &str) -> anyhow::Result<Credentials> {
        let mut auth = entry.auth;
        let mut take = |key: &str| auth.remove(key).filter(|v| !v.is_empty());
        let missing =
            |what: &str| anyhow::anyhow!("OpenStack credentials from {source}: {what} is missing");
        let auth_url = take("auth_url").ok_or_else(|| missing("auth_url (OS_AUTH_URL)"))?;
        let app_id = take("application_credential_id");
        let application = entry
            .auth_type
            .as_deref()
            .is_some_and(|t| t.contains("applicationcredential"))
            || app_id.is_some();
        let method = if application {
            Method::ApplicationCredential {
                id: app_id.ok_or_else(|| missing("application_credential_id"))?,
                secret: take("application_credential_secret")
                    .ok_or_else(|| missing("application_credential_secret"))?,
            }
        } else {
            let domain = |id: Option<String>, name: Option<String>| {
                Named::pick(id, name).unwrap_or(Named::Name("Default".into()))
            };
            let user = Named::pick(take("user_id"), take("username"))
                .ok_or_else(|| missing("username or user_id (OS_USERNAME, OS_USER_ID)"))?;
            let user_domain = domain(take("user_domain_id"), take("user_domain_name"));
            let password = take("password").ok_or_else(|| missing("password (OS_PASSWORD)"))?;
            let project_domain = domain(take("project_domain_id"), take("project_domain_name"));
            let project = Named::pick(take("project_id"), take("project_name"))
                .map(|project| (project, project_domain));
            Method::Password {
                user,
                user_domain,
                password,
                project,
            }
        };
        let interface = entry.interface.unwrap_or_else(|| "public".into());
        Ok(Credentials {
            auth_url: v3(&auth_url),
            method,
            region: entry.region_name.filter(|r| !r.is_empty()),
            interface: interface.trim_end_matches("URL").to_string(),
            source: source.to_string(),
        })
    }

    /// The body of POST /v3/auth/tokens.
    pub fn token_request(&self) -> Value {
        match &self.method {
            Method::ApplicationCredential { id, secret } => json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": { "id": id, "secret": secret },
            }}}),
            Method::Password {
                user,
                user_domain,
                password,
                project,
            } => {
                let mut user_json = user.json();
                if matches!(user, Named::Name(_)) {
                    user_json["domain"] = user_domain.json();
                }
                user_json["password"] = json!(password);
                let mut body = json!({"auth": {"identity": {
                    "methods": ["password"],
                    "password": { "user": user_json },
                }}});
                if let Some((project, domain)) = project {
                    let mut project_json = project.json();
                    if matches!(project, Named::Name(_)) {
                        project_json["domain"] = domain.json();
                    }
                    body["auth"]["scope"] = json!({ "project": project_json });
                }
                body
            }
        }
    }
}

/// Keystone's v3 root of an auth URL given with or without its version.
fn v3(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v3") {
        url.to_string()
    } else {
        format!("{url}/v3")
    }
}

/// The token answer's service catalog.
#[derive(Debug, Deserialize)]
pub struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Debug, Deserialize)]
struct CatalogEndpoint {
    interface: String,
    region: Option<String>,
    region_id: Option<String>,
    url: String,
}

/// The URL of service `kind` ("compute", "network") at `interface`, in
/// `region` (needed only when the catalog offers several).
pub fn endpoint(
    catalog: &[CatalogEntry],
    kind: &str,
    interface: &str,
    region: Option<&str>,
) -> Result<String, String> {
    let candidates: Vec<&CatalogEndpoint> = catalog
        .iter()
        .filter(|e| e.kind == kind)
        .flat_map(|e| &e.endpoints)
        .filter(|e| e.interface == interface)
        .filter(|e| {
            region
                .is_none_or(|r| e.region.as_deref() == Some(r) || e.region_id.as_deref() == Some(r))
        })
        .collect();
    match candidates.as_slice() {
        [one] => Ok(one.url.trim_end_matches('/').to_string()),
        [] => Err(format!(
            "the service catalog has no {interface} {kind} endpoint{}: set [host.cloud] region (or OS_REGION_NAME) and OS_INTERFACE to ones it has",
            region
                .map(|r| format!(" in region {r:?}"))
                .unwrap_or_default()
        )),
        several => {
            let regions: Vec<&str> = several.iter().filter_map(|e| e.region.as_deref()).collect();
            Err(format!(
                "the service catalog has several {interface} {kind} endpoints (regions {}): set [host.cloud] region",
                regions.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn password_credentials_from_the_environment() {
        let env = env_of(&[
            ("OS_AUTH_URL", "http://127.0.0.1:5000/identity/"),
            ("OS_USERNAME", "tend"),
            ("OS_PASSWORD", "secret"),
            ("OS_PROJECT_NAME", "nodes"),
            ("OS_USER_DOMAIN_NAME", "Default"),
            ("OS_PROJECT_DOMAIN_NAME", "Default"),
            ("OS_REGION_NAME", "RegionOne"),
            ("OS_INTERFACE", "internal"),
        ]);
        let c = Credentials::from(&CloudSettings::default(), &env).unwrap();
        assert_eq!(c.auth_url, "http://127.0.0.1:5000/identity/v3");
        assert_eq!(
            (c.region.as_deref(), c.interface.as_str()),
            (Some("RegionOne"), "internal")
        );
        assert_eq!(
            c.token_request(),
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
                "name": "tend", "domain": {"name": "Default"}, "password": "secret"}}},
                "scope": {"project": {"name": "nodes", "domain": {"name": "Default"}}}}})
        );
        let err = Credentials::from(&CloudSettings::default(), &env_of(&[("OS_USERNAME", "x")]))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the OS_* environment variables: auth_url (OS_AUTH_URL) is missing"),
            "{err}"
        );
    }

    #[test]
    fn application_credentials_from_clouds_yaml_with_the_settings_on_top() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("clouds.yaml");
        std::fs::write(
            &file,
            "clouds:\n  prod:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: https://keystone.example.com:5000/v3\n      application_credential_id: abc\n      application_credential_secret: s3cret\n    region_name: RegionOne\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let env = env_of(&[("OS_CLIENT_CONFIG_FILE", &path), ("OS_CLOUD", "prod")]);
        let c = Credentials::from(&CloudSettings::default(), &env).unwrap();
        assert_eq!(c.source, format!("clouds.yaml entry \"prod\" ({path})"));
        assert_eq!(
            c.token_request(),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"id": "abc", "secret": "s3cret"}}}})
        );
        let settings: CloudSettings = toml::from_str(
            "provider = \"openstack\"\ncloud = \"prod\"\nregion = \"RegionTwo\"\nendpoint = \"http://127.0.0.1:9/identity\"",
        )
        .unwrap();
        let c = Credentials::from(&settings, &env_of(&[("OS_CLIENT_CONFIG_FILE", &path)])).unwrap();
        assert_eq!(
            (c.auth_url.as_str(), c.region.as_deref()),
            ("http://127.0.0.1:9/identity/v3", Some("RegionTwo"))
        );
        let err = Credentials::from(
            &CloudSettings::default(),
            &env_of(&[("OS_CLIENT_CONFIG_FILE", &path), ("OS_CLOUD", "staging")]),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"staging\" ([host.cloud] cloud or OS_CLOUD) is in none of"),
            "{err}"
        );
    }

    #[test]
    fn the_catalog_gives_one_endpoint_per_service_or_says_what_to_set() {
        let catalog: Vec<CatalogEntry> = serde_json::from_value(json!([
            {"type": "compute", "endpoints": [
                {"interface": "public", "region": "One", "region_id": "One", "url": "http://a/compute/v2.1/"},
                {"interface": "internal", "region": "One", "region_id": "One", "url": "http://internal/compute"},
                {"interface": "public", "region": "Two", "region_id": "Two", "url": "http://b/compute/v2.1"}]},
            {"type": "network", "endpoints": [
                {"interface": "public", "region": "One", "url": "http://a/network"}]}
        ]))
        .unwrap();
        assert_eq!(
            endpoint(&catalog, "compute", "public", Some("One")).unwrap(),
            "http://a/compute/v2.1"
        );
        assert_eq!(
            endpoint(&catalog, "network", "public", None).unwrap(),
            "http://a/network"
        );
        let err = endpoint(&catalog, "compute", "public", None).unwrap_err();
        assert!(
            err.contains("regions One, Two): set [host.cloud] region"),
            "{err}"
        );
        let err = endpoint(&catalog, "network", "admin", Some("One")).unwrap_err();
        assert!(
            err.contains("no admin network endpoint in region \"One\""),
            "{err}"
        );
    }
}
