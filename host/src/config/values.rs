//! Config values that validate themselves while being parsed, so that a bad
//! value is reported at its own line and column.

use serde::{Deserialize, Deserializer, de::Error as _};
use std::path::PathBuf;

/// A byte count written as "64MiB", "512 KiB" or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(s) => s
                .parse::<bytesize::ByteSize>()
                .map(|b| ByteSize(b.as_u64()))
                .map_err(|_| {
                    D::Error::custom(format!(
                        "invalid size {s:?}: expected for example \"64MiB\""
                    ))
                }),
        }
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

/// `{ path = "/etc/containerd/certs.d", write = true }`: a root the plugin may
/// read, and write when `write` is true.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGrant {
    #[serde(deserialize_with = "absolute_path")]
    pub path: PathBuf,
    #[serde(default)]
    pub write: bool,
}

fn absolute_path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    let path = PathBuf::deserialize(d)?;
    let has_parent_ref = path
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    if !path.is_absolute() || has_parent_ref {
        return Err(D::Error::custom(format!(
            "files grant path {:?} must be absolute and without `..`",
            path.display()
        )));
    }
    Ok(path)
}

/// A URL pattern of an http grant: `scheme://host[:port][/path]`, where `*` in
/// the host matches within the host only, a port of `*` matches any port, an
/// omitted port means the scheme's default, and `*` in the path matches any
/// characters. Matching is done on the parsed URL's parts, so a wildcard can
/// never let `user@`, another host or another port slip through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPattern {
    pub text: String,
    pub scheme: String,
    pub host: String,
    /// None matches any port.
    pub port: Option<u16>,
    pub path: String,
}

impl UrlPattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = "expected scheme://host[:port][/path], for example \"http://127.0.0.1:*/*\"";
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("invalid URL pattern {text:?}: {expected}"))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => {
                return Err(format!(
                    "invalid URL pattern {text:?}: scheme must be http or https"
                ));
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/*".to_string()),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, "*")) => (host, None),
            Some((host, port)) => (
                host,
                Some(port.parse::<u16>().map_err(|_| {
                    format!("invalid URL pattern {text:?}: port {port:?} is not a number or *")
                })?),
            ),
            None => (authority, Some(default_port)),
        };
        if host.is_empty() || host.contains(['@', '/', '?', '#']) {
            return Err(format!("invalid URL pattern {text:?}: {expected}"));
        }
        Ok(UrlPattern {
            text: text.to_string(),
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path,
        })
    }
}

impl<'de> Deserialize<'de> for UrlPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        UrlPattern::parse(&text).map_err(D::Error::custom)
    }
}

fn parse_duration<E: serde::de::Error>(text: &str) -> Result<std::time::Duration, E> {
    match humantime::parse_duration(text) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(E::custom(format!(
            "invalid duration {text:?}: expected for example \"10s\", \"500ms\" or \"5m\""
        ))),
    }
}

pub mod duration {
    use super::*;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        parse_duration(&String::deserialize(d)?)
    }
}

pub mod optional_duration {
    use super::*;
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        parse_duration(&String::deserialize(d)?).map(Some)
    }
}
