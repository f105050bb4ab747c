//! What a peer (a registry, a cloud API) answers, on its way in. One reader
//! and one redirect rule for every HTTP client Tend builds:
//!
//! - [`read_body`]: a body is read up to a bound, checked while reading (the
//!   declared length first, then every chunk), so a hostile peer's 2 GiB
//!   answer costs at most the bound and one chunk, never the whole.
//! - [`redirects`]: where a client may be sent. Clients that carry their own
//!   credentials follow none ([`Redirects::Never`]); a registry's (blobs are
//!   served from storage elsewhere) follow a few, never from https to http
//!   and never into loopback, link-local or private addresses unless the
//!   registry itself is in that range ([`check_target`]). reqwest drops
//!   `Authorization` on a redirect to another host, port or scheme.
//!
//! What a peer's answer says is shown through [`crate::text::peer_answer`].

use reqwest::Url;
use std::net::IpAddr;

/// The most bytes of one answer of a cloud API (one page of a listing):
/// OpenStack's and EC2's clients both stop reading there.
pub const MAX_PAGE: u64 = 16 << 20;

/// Why a body was not taken.
#[derive(Debug)]
pub enum BodyError {
    /// The peer declared or sent more than the bound.
    TooLarge { max: u64 },
    /// The connection failed or ended early.
    Cut(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge { max } => {
                write!(f, "the answer is larger than {max} bytes: refused")
            }
            BodyError::Cut(e) => write!(
                f,
                "the answer was cut off ({})",
                crate::text::inert(&e.to_string())
            ),
        }
    }
}

/// `response`'s body, at most `max` bytes: a body declared or found larger
/// stops the read there (nothing more is buffered).
pub async fn read_body(mut response: reqwest::Response, max: u64) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > max) {
        return Err(BodyError::TooLarge { max });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Cut)? {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(BodyError::TooLarge { max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `max` bytes of `response`'s body, for an error message:
/// the rest is never read.
pub async fn read_prefix(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < max {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(max - body.len())]),
            _ => break,
        }
    }
    body
}

/// Which redirects a client follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// None: a 3xx is the answer (clients that send credentials on every request).
    Never,
    /// At most [`MAX_REDIRECTS`], each allowed by [`check_target`].
    Checked,
}

/// Redirects one request may follow (a blob's storage URL, perhaps signed once more).
pub const MAX_REDIRECTS: usize = 5;

/// The reqwest policy for `redirects`.
pub fn redirects(redirects: Redirects) -> reqwest::redirect::Policy {
    match redirects {
        Redirects::Never => reqwest::redirect::Policy::none(),
        Redirects::Checked => reqwest::redirect::Policy::custom(|attempt| {
            let origin = attempt.previous().first().cloned();
            let refusal = match &origin {
                _ if attempt.previous().len() > MAX_REDIRECTS => Some(format!(
                    "more than {MAX_REDIRECTS} redirects in a row are refused"
                )),
                Some(origin) => check_target(origin, attempt.url()).err(),
                None => None,
            };
            match refusal {
                None => attempt.follow(),
                Some(why) => {
                    let to = shown_host(attempt.url());
                    attempt.error(Refused(format!(
                        "redirected to {to}, which is refused: {why}"
                    )))
                }
            }
        }),
    }
}

/// A redirect or URL Tend will not follow: the message names the host and why.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// The refusal inside `e` (a redirect the policy stopped), if it is one.
    pub fn inside(e: &reqwest::Error) -> Option<&Refused> {
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            if let Some(refused) = s.downcast_ref::<Refused>() {
                return Some(refused);
            }
            source = s.source();
        }
        None
    }
}

/// `host[:port]` of `url`, for a message (a URL's host holds no controls).
pub fn shown_host(url: &Url) -> String {
    let host = url.host_str().unwrap_or("(no host)");
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// Whether `origin` (the registry) may send Tend to `target`: http or https
/// only, never from https to http, and not into a loopback, link-local or
/// private address unless `origin` is in that same range (a registry on
/// loopback may redirect to loopback storage; none may point at the cloud's
/// metadata endpoint on 169.254.169.254).
pub fn check_target(origin: &Url, target: &Url) -> Result<(), String> {
    if !matches!(target.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme {} is not http or https",
            target.scheme()
        ));
    }
    if origin.scheme() == "https" && target.scheme() == "http" {
        return Err("a downgrade from https to plain http".into());
    }
    let to = reach(target);
    if to != Reach::Public && to != reach(origin) {
        return Err(format!(
            "it is a {} address and the registry ({}) is not",
            to.name(),
            shown_host(origin)
        ));
    }
    Ok(())
}

/// Where an address leads: the ranges a peer must not point Tend at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Loopback,
    LinkLocal,
    Private,
    Public,
}

impl Reach {
    fn name(self) -> &'static str {
        match self {
            Reach::Loopback => "loopback",
            Reach::LinkLocal => "link-local",
            Reach::Private => "private",
            Reach::Public => "public",
        }
    }
}

/// The range of `url`'s host: literal addresses by their range, `localhost`
/// (and `*.localhost`) as loopback, other names as public (their addresses
/// are not known before the connection).
fn reach(url: &Url) -> Reach {
    let Some(host) = url.host_str() else {
        return Reach::Private;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return reach_ip(ip);
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        Reach::Loopback
    } else {
        Reach::Public
    }
}

fn reach_ip(ip: IpAddr) -> Reach {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() || v4.is_unspecified() => Reach::Loopback,
        IpAddr::V4(v4) if v4.is_link_local() => Reach::LinkLocal,
        // 100.64.0.0/10 (carrier-grade NAT) is where some clouds keep their
        // metadata and DNS (Alibaba's 100.100.100.200).
        IpAddr::V4(v4)
            if v4.is_private() || (v4.octets()[0] == 100 && v4.octets()[1] & 0xc0 == 64) =>
        {
            Reach::Private
        }
        IpAddr::V4(_) => Reach::Public,
        IpAddr::V6(v6) if v6.is_loopback() || v6.is_unspecified() => Reach::Loopback,
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Reach::LinkLocal,
        // fc00::/7, unique local (AWS's metadata is also on fd00:ec2::254).
        IpAddr::V6(v6) if v6.segments()[0] & 0xfe00 == 0xfc00 => Reach::Private,
        IpAddr::V6(_) => Reach::Public,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(origin: &str, target: &str) -> Result<(), String> {
        check_target(&Url::parse(origin).unwrap(), &Url::parse(target).unwrap())
    }

    /// A one-answer HTTP server on loopback: `head` then `body_len` bytes of
    /// `x`, written in 64 KiB chunks until the client goes away. Returns
    /// its URL and how many body bytes it managed to write.
    async fn serve(head: String, body_len: usize) -> (String, tokio::task::JoinHandle<usize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        crate::tls::install_ring();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let sent = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            stream.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'x'; 64 << 10];
            let mut sent = 0;
            while sent < body_len {
                if stream.write_all(&chunk).await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        });
        (url, sent)
    }

    #[tokio::test]
    async fn a_body_is_bounded_while_read_and_a_declared_length_before() {
        let client = reqwest::Client::new();
        // No length declared, 256 MiB on offer: the read stops past 1 MiB.
        let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string();
        let (url, sent) = serve(head, 256 << 20).await;
        let response = client.get(&url).send().await.unwrap();
        let e = read_body(response, 1 << 20).await.unwrap_err();
        assert!(
            matches!(e, BodyError::TooLarge { max } if max == 1 << 20),
            "{e}"
        );
        assert!(sent.await.unwrap() < 64 << 20, "the server kept sending");
        // A declared length over the bound: refused before the body.
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 8 << 20);
        let (url, _) = serve(head, 0).await;
        let response = client.get(&url).send().await.unwrap();
        assert!(matches!(
            read_body(response, 1 << 20).await,
            Err(BodyError::TooLarge { .. })
        ));
        // Within the bound: all of it.
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 64 << 10);
        let (url, _) = serve(head, 64 << 10).await;
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(read_body(response, 1 << 20).await.unwrap().len(), 64 << 10);
        // An error body: only its first bytes are taken.
        let head = "HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n".to_string();
        let (url, _) = serve(head, 8 << 20).await;
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(read_prefix(response, 512).await.len(), 512);
    }

    #[tokio::test]
    async fn a_refused_redirect_is_never_connected_and_names_the_target() {
        let head = "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\n\r\n".to_string();
        let (url, _) = serve(head, 0).await;
        let client = reqwest::Client::builder()
            .redirect(redirects(Redirects::Checked))
            .connect_timeout(std::time::Duration::from_secs(30))
            .build()
            .unwrap();
        let started = std::time::Instant::now();
        let e = client.get(&url).send().await.unwrap_err();
        let refused = Refused::inside(&e).expect("a refusal");
        assert!(
            refused.0.starts_with(
                "redirected to http://169.254.169.254, which is refused: it is a link-local address"
            ),
            "{refused}"
        );
        // No connection attempt to an unroutable address (that would take the timeout).
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Without redirects, the 307 is the answer.
        let head = "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/\r\nContent-Length: 0\r\n\r\n".to_string();
        let (url, _) = serve(head, 0).await;
        let client = reqwest::Client::builder()
            .redirect(redirects(Redirects::Never))
            .build()
            .unwrap();
        assert_eq!(client.get(&url).send().await.unwrap().status(), 307);
    }

    #[test]
    fn redirects_to_public_storage_are_followed() {
        assert!(
            check(
                "https://ghcr.io/v2/",
                "https://pkg-containers.githubusercontent.com/x"
            )
            .is_ok()
        );
        assert!(check("http://127.0.0.1:5000/v2/", "http://127.0.0.1:5001/blob").is_ok());
        assert!(check("http://10.0.0.5:5000/v2/", "http://10.0.0.6/blob").is_ok());
        assert!(check("http://localhost:5000/v2/", "http://127.0.0.1:9/").is_ok());
    }

    #[test]
    fn internal_targets_downgrades_and_other_schemes_are_refused() {
        for target in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/",
            "http://100.100.100.200/",
            "http://10.1.2.3/",
            "http://192.168.1.1/",
            "http://127.0.0.1:2375/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost/",
            "http://0.0.0.0/",
        ] {
            let e = check("http://registry.example.com/v2/", target).unwrap_err();
            assert!(e.contains("address and the registry"), "{target}: {e}");
        }
        // Loopback is not link-local: a local registry still cannot reach the metadata.
        let e = check("http://127.0.0.1:5000/v2/", "http://169.254.169.254/").unwrap_err();
        assert!(e.contains("link-local"), "{e}");
        let e = check("https://r.example.com/v2/", "http://r.example.com/v2/").unwrap_err();
        assert!(e.contains("downgrade"), "{e}");
        let e = check("https://r.example.com/v2/", "file:///etc/passwd").unwrap_err();
        assert!(e.contains("scheme file"), "{e}");
    }
}
