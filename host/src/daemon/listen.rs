//! The accept loop both of the daemon's listeners share (the read-only HTTP
//! port and the control socket), bounded so that no client can make the
//! daemon spend without limit:
//!
//! - at most [`MAX_CONNECTIONS`] connections at once; one beyond is closed at
//!   once, so idle connections cannot take the file descriptors plugins need;
//! - the request head must arrive within [`HEADER_READ_TIMEOUT`] of the
//!   connection's start, and keep-alive is off (one request a connection), so
//!   an idle connection is closed after that time;
//! - an accept error (EMFILE: out of file descriptors) waits, 10 ms doubling
//!   to 1 s, instead of retrying at once in a hot loop.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Connections served at once, per listener.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has from connecting to the end of its request head.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait after an accept error, and the longest.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));
/// At most one warning about a full listener in this long.
const WARN_EVERY: Duration = Duration::from_secs(10);

pub type Routed = Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send>>;
pub type Route = Arc<dyn Fn(Request<Incoming>) -> Routed + Send + Sync>;

/// A listening socket: TCP for the HTTP port, unix for the control socket.
pub trait Listener: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
    /// Whether to serve this connection at all (the control socket checks the peer).
    fn admit(&self, _stream: &Self::Stream) -> bool {
        true
    }
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Stream> {
        tokio::net::TcpListener::accept(self)
            .await
            .map(|(stream, _)| stream)
    }
}

/// Serve `listener` forever, each request through `route`; `what` names the
/// listener in logs. `lifetime` bounds a whole connection when set.
pub async fn serve<L: Listener>(
    listener: L,
    what: String,
    route: Route,
    lifetime: Option<Duration>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = ACCEPT_BACKOFF.0;
    let mut warned: Option<Instant> = None;
    let mut warn = |message: String| {
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            warned = Some(Instant::now());
            tracing::warn!("{what}: {message}");
        }
    };
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => {
                backoff = ACCEPT_BACKOFF.0;
                stream
            }
            Err(e) => {
                warn(format!(
                    "cannot accept a connection: {e}; retrying in {backoff:?} (if this is EMFILE, raise LimitNOFILE or find who holds the connections)"
                ));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        if !listener.admit(&stream) {
            continue;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            warn(format!(
                "{MAX_CONNECTIONS} connections open: closing new ones at once until some end"
            ));
            continue;
        };
        let route = route.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let routed = route(req);
                async move { Ok::<_, std::convert::Infallible>(routed.await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match lifetime {
                Some(limit) => drop(tokio::time::timeout(limit, connection).await),
                None => drop(connection.await),
            }
        });
    }
}

/// A plain-text response.
pub fn respond(
    status: hyper::StatusCode,
    content_type: &str,
    body: String,
) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn ok_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let route: Route = Arc::new(|_| {
            Box::pin(async { respond(hyper::StatusCode::OK, "text/plain", "ok\n".into()) })
        });
        tokio::spawn(serve(listener, "test".into(), route, None));
        addr
    }

    async fn get(addr: std::net::SocketAddr) -> std::io::Result<String> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    /// A listener out of file descriptors: every accept fails with EMFILE.
    struct Exhausted(Arc<std::sync::atomic::AtomicUsize>);

    impl Listener for Exhausted {
        type Stream = tokio::net::TcpStream;
        async fn accept(&self) -> std::io::Result<Self::Stream> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(std::io::Error::from_raw_os_error(24))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_instead_of_spinning() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let route: Route = Arc::new(|_| {
            Box::pin(async { respond(hyper::StatusCode::OK, "text/plain", String::new()) })
        });
        let server = tokio::spawn(serve(Exhausted(calls.clone()), "test".into(), route, None));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let tried = calls.load(std::sync::atomic::Ordering::Relaxed);
        // 10 ms doubling to 1 s: 8 tries in the first 2.6 s, then one a second.
        assert!((12..=20).contains(&tried), "{tried} accepts in 10 s");
        server.abort();
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_and_idle_ones_time_out() {
        let addr = ok_server().await;
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Let the server take all of them.
        let mut over = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(2), over.read(&mut byte)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the connection over the cap is closed at once: {closed:?}"
        );
        // The idle ones are closed after the header timeout, freeing the cap.
        let started = std::time::Instant::now();
        let first = tokio::time::timeout(HEADER_READ_TIMEOUT * 2, idle[0].read(&mut byte)).await;
        assert!(matches!(first, Ok(Ok(0)) | Ok(Err(_))), "{first:?}");
        assert!(started.elapsed() <= HEADER_READ_TIMEOUT + Duration::from_secs(1));
        drop(idle);
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match get(addr).await {
                    Ok(answer) if answer.starts_with("HTTP/1.1 200") => return answer,
                    _ => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        })
        .await
        .expect("a fresh connection is served once the idle ones are closed");
        assert!(answer.ends_with("ok\n"), "{answer}");
    }
}
