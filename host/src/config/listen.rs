//! `[host] listen`: an address (`127.0.0.1:9464`), or `$VAR:PORT` whose host
//! is the IP address in the environment variable `VAR`, read when tend binds.
//! In a pod, `$POD_IP:9464` with `POD_IP` from the downward API
//! (`status.podIP`) listens on the pod's address only: with `hostNetwork`, the
//! node's own address, not every interface of the node. The variable is read
//! at bind time, not at parse time, so `tend check` and `tend rbac` accept the
//! config anywhere.

use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Addr(SocketAddr),
    Env { var: String, port: u16 },
}

impl Listen {
    /// The address to bind or reach, the variable read from the process's environment.
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        self.resolve_with(|var| std::env::var(var).ok())
    }

    fn resolve_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<SocketAddr, String> {
        match self {
            Listen::Addr(addr) => Ok(*addr),
            Listen::Env { var, port } => {
                let value = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                    format!("[host] listen = \"{self}\" but ${var} is not set: set it to this host's IP address (in a pod, from the downward API: fieldRef status.podIP)")
                })?;
                let ip: IpAddr = value.trim().parse().map_err(|_| {
                    format!(
                        "[host] listen = \"{self}\" but ${var} = {value:?} is not an IP address"
                    )
                })?;
                Ok(SocketAddr::new(ip, *port))
            }
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Addr(addr) => write!(f, "{addr}"),
            Listen::Env { var, port } => write!(f, "${var}:{port}"),
        }
    }
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix('$') else {
            return text.parse().map(Listen::Addr).map_err(|e| {
                format!("{e}: expected an address such as \"127.0.0.1:9464\", or \"$POD_IP:9464\" to read the IP from an environment variable")
            });
        };
        let (var, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?}: expected \"$VAR:PORT\", such as \"$POD_IP:9464\""))?;
        let valid_var = !var.is_empty()
            && !var.starts_with(|c: char| c.is_ascii_digit())
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_var {
            return Err(format!(
                "{var:?} is not an environment variable name (letters, digits and '_')"
            ));
        }
        let port = port
            .parse()
            .map_err(|_| format!("{port:?} is not a port number (0-65535)"))?;
        Ok(Listen::Env {
            var: var.to_string(),
            port,
        })
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "POD_IP" => Some("10.1.2.3".into()),
            "POD_IP6" => Some("fd00::7".into()),
            "EMPTY" => Some(String::new()),
            "WORD" => Some("node-a".into()),
            _ => None,
        }
    }

    #[test]
    fn an_address_or_an_environment_variable_and_a_port() {
        let listen: Listen = "127.0.0.1:9464".parse().unwrap();
        assert_eq!(
            listen.resolve_with(env).unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        let listen: Listen = "$POD_IP:9464".parse().unwrap();
        assert_eq!(listen.to_string(), "$POD_IP:9464");
        assert_eq!(
            listen.resolve_with(env).unwrap(),
            "10.1.2.3:9464".parse().unwrap()
        );
        let listen: Listen = "$POD_IP6:9464".parse().unwrap();
        assert_eq!(
            listen.resolve_with(env).unwrap(),
            "[fd00::7]:9464".parse().unwrap()
        );
    }

    #[test]
    fn unset_empty_or_non_ip_variables_name_the_fix() {
        for (text, expected) in [
            (
                "$MISSING:1",
                "$MISSING is not set: set it to this host's IP address",
            ),
            ("$EMPTY:1", "$EMPTY is not set"),
            ("$WORD:1", "$WORD = \"node-a\" is not an IP address"),
        ] {
            let err = text
                .parse::<Listen>()
                .unwrap()
                .resolve_with(env)
                .unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn malformed_values_are_refused() {
        for (text, expected) in [
            ("localhost", "invalid socket address"),
            ("$POD_IP", "expected \"$VAR:PORT\""),
            ("$:80", "is not an environment variable name"),
            ("$1X:80", "is not an environment variable name"),
            ("$POD-IP:80", "is not an environment variable name"),
            ("$POD_IP:http", "is not a port number"),
            ("$POD_IP:70000", "is not a port number"),
        ] {
            let err = text.parse::<Listen>().unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
