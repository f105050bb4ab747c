//! Registry credentials from a docker config file, the form `docker login`
//! and `podman login` write: `{"auths": {"REGISTRY": {"auth": base64(user:password)}}}`
//! (or `username` and `password`). Credential helpers (`credsStore`,
//! `credHelpers`) run programs and are not used: write the registry's entry
//! into the file Tend reads.

use super::Settings;
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// The file credentials come from: `[host.oci] docker-config`, else
/// `$DOCKER_CONFIG/config.json`.
fn config_file(settings: &Settings) -> Option<PathBuf> {
    settings.docker_config.clone().or_else(|| {
        std::env::var_os("DOCKER_CONFIG").map(|dir| PathBuf::from(dir).join("config.json"))
    })
}

/// The credentials for `registry`; anonymous when no file names it.
pub fn credentials(settings: &Settings, registry: &str) -> Result<RegistryAuth, String> {
    let Some(path) = config_file(settings) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let text = match crate::untrusted::read_to_string(&path, crate::untrusted::MAX_TEXT_BYTES) {
        Ok(text) => text,
        // DOCKER_CONFIG without a file in it: no credentials.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && settings.docker_config.is_none() => {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(e) => {
            return Err(format!(
                "cannot read the docker config {}: {e}",
                path.display()
            ));
        }
    };
    let config: DockerConfig = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a docker config file ({{\"auths\": {{\"REGISTRY\": {{\"auth\": …}}}}}}): {e}",
            path.display()
        )
    })?;
    // `docker login` keys Docker Hub (`https://index.docker.io/v1/`) and
    // some registries by URL.
    fn hub(host: &str) -> &str {
        match host {
            "index.docker.io" | "registry-1.docker.io" => "docker.io",
            other => other,
        }
    }
    let entry = config.auths.iter().find(|(key, _)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().map(hub) == Some(hub(registry))
    });
    let Some((_, entry)) = entry else {
        return Ok(RegistryAuth::Anonymous);
    };
    // An identity token is an OAuth2 refresh token, which only the
    // registry's token endpoint takes (Tend does not do that exchange): sent
    // as a bearer token it fails, so say what to write instead.
    if entry.identitytoken.is_some() {
        return Err(format!(
            "{}: the entry for {registry} holds an identitytoken (an OAuth2 refresh token), which Tend does not use: give it auth (base64 of user:password) or username and password instead (a credential helper's output is not read)",
            path.display()
        ));
    }
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(user.clone(), password.clone()));
    }
    let bad = || {
        format!(
            "{}: the entry for {registry} has no usable auth (expected base64 of user:password)",
            path.display()
        )
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry.auth.as_deref().ok_or_else(bad)?.trim())
        .map_err(|_| bad())?;
    let text = String::from_utf8(decoded).map_err(|_| bad())?;
    let (user, password) = text.split_once(':').ok_or_else(bad)?;
    Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> (tempfile::TempDir, Settings) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, text).unwrap();
        let settings = Settings {
            docker_config: Some(path),
            ..Settings::default()
        };
        (dir, settings)
    }

    #[test]
    fn reads_basic_credentials_by_registry() {
        let auth = base64::engine::general_purpose::STANDARD.encode("robot:s3cret:x");
        let (_d, s) = settings(&format!(
            r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{auth}"}},
                "https://ghcr.io/v1/": {{"username": "u", "password": "p"}},
                "https://index.docker.io/v1/": {{"username": "hub", "password": "p"}}}}}}"#
        ));
        let basic = |a: RegistryAuth| match a {
            RegistryAuth::Basic(u, p) => (u, p),
            _ => panic!("not basic"),
        };
        assert_eq!(
            basic(credentials(&s, "127.0.0.1:5000").unwrap()),
            ("robot".into(), "s3cret:x".into())
        );
        assert_eq!(
            basic(credentials(&s, "ghcr.io").unwrap()),
            ("u".into(), "p".into())
        );
        assert_eq!(
            basic(credentials(&s, "docker.io").unwrap()),
            ("hub".into(), "p".into())
        );
        assert!(matches!(
            credentials(&s, "other.example").unwrap(),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn a_broken_file_or_entry_names_the_file() {
        let (_d, s) = settings("{not json");
        let e = credentials(&s, "r").unwrap_err();
        assert!(
            e.contains("config.json") && e.contains("not a docker config"),
            "{e}"
        );
        let (_d, s) = settings(r#"{"auths": {"r": {"identitytoken": "t"}}}"#);
        let e = credentials(&s, "r").unwrap_err();
        assert!(
            e.contains("config.json")
                && e.contains("identitytoken")
                && e.contains("username and password"),
            "{e}"
        );
        let (_d, s) = settings(r#"{"auths": {"r": {"auth": "%%%"}}}"#);
        assert!(credentials(&s, "r").unwrap_err().contains("no usable auth"));
        let missing = Settings {
            docker_config: Some("/nonexistent/config.json".into()),
            ..Settings::default()
        };
        assert!(
            credentials(&missing, "r")
                .unwrap_err()
                .contains("cannot read")
        );
    }
}
