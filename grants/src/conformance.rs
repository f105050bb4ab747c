//! Grant decisions every implementation of the capabilities must agree on: the
//! host and the SDK's fakes each run [`cases`] and compare their answers.
//!
//! Only decisions made by [`resolve`](crate::files::resolve) and
//! [`check_url`](crate::http::check_url) are listed; rules the capability
//! adapters add on top (a granted root cannot be written or removed, methods
//! are upper-cased before the check) are tested where they live.

use crate::Refusal;
use crate::files::{FileGrant, OWN_PROC};
use crate::http::UrlPattern;

/// The plugin name the expected messages use.
pub const PLUGIN: &str = "conformance";

/// One operation, a plugin's call as the capability sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Read(String),
    Write(String),
    Remove(String),
    List(String),
    Stat(String),
    /// An HTTP request; `method` is upper case.
    Send {
        method: String,
        url: String,
    },
}

impl Op {
    /// Whether the grant check is the one for mutations (`write = true`).
    pub fn writes(&self) -> bool {
        matches!(self, Op::Write(_) | Op::Remove(_))
    }
}

/// What the grant check decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The grants allow the call; it may still fail for other reasons (the file
    /// does not exist, nothing answers the request), but not as denied or invalid.
    Allowed,
    /// Refused with exactly this error and message.
    Refused(Refusal),
}

/// Grants of plugin [`PLUGIN`], one operation, and the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub files: Vec<FileGrant>,
    pub http: Vec<UrlPattern>,
    pub op: Op,
    pub expect: Expect,
}

/// `/etc` read-only, `/etc/containerd/certs.d` writable.
fn etc() -> Vec<FileGrant> {
    vec![
        FileGrant::new("/etc", false).expect("valid grant"),
        FileGrant::new("/etc/containerd/certs.d", true).expect("valid grant"),
    ]
}

/// `/proc` read-only.
fn proc() -> Vec<FileGrant> {
    vec![FileGrant::new("/proc", false).expect("valid grant")]
}

fn patterns(patterns: &[&str]) -> Vec<UrlPattern> {
    patterns
        .iter()
        .map(|p| UrlPattern::parse(p).expect("valid pattern"))
        .collect()
}

fn file(files: Vec<FileGrant>, op: Op, expect: Expect) -> Case {
    Case {
        files,
        http: Vec::new(),
        op,
        expect,
    }
}

fn send(http: &[&str], method: &str, url: &str, expect: Expect) -> Case {
    Case {
        files: Vec::new(),
        http: patterns(http),
        op: Op::Send {
            method: method.into(),
            url: url.into(),
        },
        expect,
    }
}

fn denied(message: &str) -> Expect {
    Expect::Refused(Refusal::Denied(message.into()))
}

fn invalid(message: &str) -> Expect {
    Expect::Refused(Refusal::Invalid(message.into()))
}

/// The table, about forty cases; see the module docs.
pub fn cases() -> Vec<Case> {
    use Expect::Allowed;
    let p = |s: &str| s.to_string();
    let loopback = ["http://127.0.0.1:*/*"];
    let wildcard = ["http://*.example.com/*"];
    let ula = ["http://[fd00::a]:18080/*"];
    let ten = ["http://10.0.0.0/8:*/*"];
    let long_path = format!("/etc/{}", "a/".repeat(2100));
    vec![
        // files: inside a root, the innermost root, the roots themselves
        file(
            etc(),
            Op::Read(p("/etc/containerd/certs.d/docker.io/hosts.toml")),
            Allowed,
        ),
        file(
            etc(),
            Op::Write(p("/etc/containerd/certs.d//docker.io/./hosts.toml")),
            Allowed,
        ),
        file(
            etc(),
            Op::Remove(p("/etc/containerd/certs.d/docker.io")),
            Allowed,
        ),
        file(etc(), Op::List(p("/etc/containerd/certs.d")), Allowed),
        file(etc(), Op::Stat(p("/etc/containerd/certs.d/")), Allowed),
        file(etc(), Op::List(p("/etc")), Allowed),
        // files: a read-only grant
        file(
            etc(),
            Op::Write(p("/etc/hosts")),
            denied(
                "/etc/hosts is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        file(
            etc(),
            Op::Remove(p("/etc/containerd/config.toml")),
            denied(
                "/etc/containerd/config.toml is granted read-only by { path = \"/etc\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        // files: outside every grant
        file(
            etc(),
            Op::Read(p("/etcetera/x")),
            denied(
                "no files grant covers /etcetera/x: add { path = \"/etcetera\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            etc(),
            Op::Stat(p("/")),
            denied(
                "no files grant covers /: add { path = \"/\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            Vec::new(),
            Op::Read(p("/etc/hosts")),
            denied(
                "no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.conformance.grants] files",
            ),
        ),
        file(
            Vec::new(),
            Op::Write(p("/var/lib/x")),
            denied(
                "no files grant covers /var/lib/x: add { path = \"/var/lib\", write = true } to [plugins.conformance.grants] files",
            ),
        ),
        // files: malformed paths
        file(
            etc(),
            Op::Read(p("/etc/containerd/certs.d/../../shadow")),
            invalid(
                "/etc/containerd/certs.d/../../shadow: `..` is not allowed in paths; name the file directly",
            ),
        ),
        file(
            etc(),
            Op::Read(p("etc/hosts")),
            invalid(
                "\"etc/hosts\": files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\"",
            ),
        ),
        file(
            etc(),
            Op::Stat(p("/etc/\0x")),
            invalid(
                "\"/etc/\\0x\": files are addressed by absolute path, for example \"/etc/containerd/certs.d/docker.io/hosts.toml\"",
            ),
        ),
        // files: the innermost grant decides writes too
        file(
            vec![
                FileGrant::new("/etc", true).expect("valid grant"),
                FileGrant::new("/etc/ssl", false).expect("valid grant"),
            ],
            Op::Write(p("/etc/ssl/certs/ca.pem")),
            denied(
                "/etc/ssl/certs/ca.pem is granted read-only by { path = \"/etc/ssl\" }: set write = true on that grant in [plugins.conformance.grants] files",
            ),
        ),
        // files: Tend's own /proc entries, whatever the grants
        file(
            proc(),
            Op::Read(p("/proc/self/environ")),
            denied(&format!("/proc/self/environ: {OWN_PROC}")),
        ),
        file(
            proc(),
            Op::List(p("/proc/thread-self/fd")),
            denied(&format!("/proc/thread-self/fd: {OWN_PROC}")),
        ),
        file(proc(), Op::Stat(p("/proc/1/status")), Allowed),
        // files: oversized paths
        file(
            etc(),
            Op::Read(long_path.clone()),
            invalid(&format!(
                "{}…: the path is 4205 bytes, over the limit of 4096; use a shorter path",
                &long_path[..64]
            )),
        ),
        file(
            etc(),
            Op::Write(format!("/etc/containerd/certs.d/{}", "n".repeat(256))),
            invalid(&format!(
                "/etc/containerd/certs.d/{}…: a path component is 256 bytes, over the limit of 255; use shorter names",
                "n".repeat(40)
            )),
        ),
        // http: ports
        send(&loopback, "GET", "http://127.0.0.1:5000/v2/", Allowed),
        send(&loopback, "GET", "http://127.0.0.1/", Allowed),
        send(
            &["https://registry.example.com"],
            "GET",
            "https://REGISTRY.example.com:443/v2/",
            Allowed,
        ),
        send(
            &["https://registry.example.com"],
            "GET",
            "https://registry.example.com:8443/v2/",
            denied(
                "GET https://registry.example.com:8443/v2/: no http grant matches; add \"https://registry.example.com:8443/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: scheme, host, path
        send(
            &loopback,
            "GET",
            "https://127.0.0.1:5000/v2/",
            denied(
                "GET https://127.0.0.1:5000/v2/: no http grant matches; add \"https://127.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(&wildcard, "GET", "http://cache.example.com/v2/", Allowed),
        send(
            &wildcard,
            "GET",
            "http://cache.example.com.evil.com/",
            denied(
                "GET http://cache.example.com.evil.com/: no http grant matches; add \"http://cache.example.com.evil.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &["http://127.0.0.1:10248/healthz"],
            "GET",
            "http://127.0.0.1:10248/healthz/x",
            denied(
                "GET http://127.0.0.1:10248/healthz/x: no http grant matches; add \"http://127.0.0.1:10248/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &[],
            "POST",
            "http://127.0.0.1:5000/v2/",
            denied(
                "POST http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: IP literals are addresses, never names
        send(&ula, "GET", "http://[fd00::a]:18080/v2/", Allowed),
        send(
            &ula,
            "GET",
            "http://a:18080/v2/",
            denied(
                "GET http://a:18080/v2/: no http grant matches; add \"http://a:18080/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(&loopback, "GET", "http://2130706433:5000/v2/", Allowed),
        send(
            &loopback,
            "GET",
            "http://127.0.0.1.example.com/",
            denied(
                "GET http://127.0.0.1.example.com/: no http grant matches; add \"http://127.0.0.1.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: CIDR ranges
        send(&ten, "GET", "http://10.1.2.3:5000/v2/", Allowed),
        send(
            &ten,
            "GET",
            "http://11.0.0.1:5000/v2/",
            denied(
                "GET http://11.0.0.1:5000/v2/: no http grant matches; add \"http://11.0.0.1:5000/*\" to [plugins.conformance.grants] http",
            ),
        ),
        send(
            &ten,
            "GET",
            "http://10.example.com/",
            denied(
                "GET http://10.example.com/: no http grant matches; add \"http://10.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: one label under a wildcard
        send(
            &wildcard,
            "GET",
            "http://a.b.example.com/",
            denied(
                "GET http://a.b.example.com/: no http grant matches; add \"http://a.b.example.com:80/*\" to [plugins.conformance.grants] http",
            ),
        ),
        // http: malformed requests
        send(
            &["http://127.0.0.1:5000/v2/*"],
            "GET",
            "http://127.0.0.1:5000/v2/..%2Fsecret",
            invalid(
                "GET http://127.0.0.1:5000/v2/..%2Fsecret: an encoded `/` or `\\` (%2F, %5C) in the path is refused, since a server that decodes it would leave the granted path; send plain `/` separators",
            ),
        ),
        send(
            &wildcard,
            "GET",
            "http://evil.com:80@cache.example.com/",
            invalid(
                "GET http://evil.com:80@cache.example.com/: user info in URLs is not supported; send an Authorization header",
            ),
        ),
        send(
            &loopback,
            "GET",
            "file:///etc/passwd",
            invalid("GET file:///etc/passwd: only http and https URLs are supported"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{files::resolve, http::check_url};

    /// The table agrees with the functions it describes.
    #[test]
    fn every_case_holds_for_resolve_and_check_url() {
        for case in cases() {
            let decision = match &case.op {
                Op::Send { method, url } => check_url(&case.http, PLUGIN, method, url),
                Op::Read(path)
                | Op::Write(path)
                | Op::Remove(path)
                | Op::List(path)
                | Op::Stat(path) => {
                    resolve(&case.files, PLUGIN, path, case.op.writes()).map(|_| ())
                }
            };
            let got = match decision {
                Ok(()) => Expect::Allowed,
                Err(refusal) => Expect::Refused(refusal),
            };
            assert_eq!(got, case.expect, "{:?}", case.op);
        }
    }
}
