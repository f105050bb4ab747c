//! The control socket, `<state-dir>/tend.sock`: the commands that act on the
//! daemon, `POST /reconcile/NAME[?record]` (what `tend reconcile [--record]`
//! uses: the recording comes back in the answer, the daemon writes no file) and
//! `POST /plan[/NAME]` (what `tend plan` uses). A unix socket of mode 0600
//! owned by Tend's user, so only that user (and root) can act; the HTTP port
//! serves read-only endpoints only.
//!
//! The socket is bound under a temporary name, given mode 0600 and only then
//! put to listen and renamed into place (replacing a stale one), so no
//! connection is ever accepted on a socket with a wider mode. The state dir
//! must not be writable by others, or anyone could swap the socket.
//!
//! Manual reconciles are rate-limited per plugin: at most one every
//! [`MANUAL_MIN_INTERVAL`], and a backing-off plugin's backoff is skipped at
//! most once between two scheduled runs (the scheduler's rule); a refused one
//! answers 429 with when to retry.

use super::Shared;
use super::listen::{self, Listener, Route, respond};
use crate::scheduler::{Trigger, trigger};
use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The control socket's name in the state dir.
const SOCKET: &str = "tend.sock";
/// The shortest time between two manual reconciles of one plugin.
pub const MANUAL_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Where the daemon of `state_dir` listens for commands.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET)
}

/// The control socket's listener: serves only peers of Tend's own user or root.
struct Control(tokio::net::UnixListener);

impl Listener for Control {
    type Stream = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Stream> {
        self.0.accept().await.map(|(stream, _)| stream)
    }
    fn admit(&self, stream: &Self::Stream) -> bool {
        let own = rustix::process::geteuid().as_raw();
        stream
            .peer_cred()
            .is_ok_and(|peer| peer.uid() == own || peer.uid() == 0)
    }
}

/// Bind `path` as a unix socket of mode 0600, atomically (see the module docs).
fn bind_private(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let dir = path.parent().expect("the socket is in the state dir");
    crate::atomic::check_own_dir(
        dir,
        "state dir",
        "another user could replace the control socket there",
    )?;
    let tmp = dir.join(format!(".{SOCKET}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let addr = SocketAddrUnix::new(&tmp).with_context(|| {
        format!(
            "{} is too long for a unix socket (108 bytes): use a shorter state-dir",
            tmp.display()
        )
    })?;
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let bound = (|| -> std::io::Result<()> {
        rustix::net::bind(&socket, &addr)?;
        // Not listening yet: no connection can arrive before the mode is 0600.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        rustix::net::listen(&socket, 128)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = bound {
        let _ = std::fs::remove_file(&tmp);
        return Err(e)
            .with_context(|| format!("cannot create the control socket {}", path.display()));
    }
    let listener = std::os::unix::net::UnixListener::from(socket);
    Ok(tokio::net::UnixListener::from_std(listener)?)
}

/// Listen on the control socket of `state_dir`.
pub fn serve(state_dir: &Path, shared: Arc<Shared>) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let path = socket_path(state_dir);
    let listener = bind_private(&path)?;
    tracing::info!(socket = %path.display(), "control socket (mode 0600): POST /reconcile/NAME, POST /plan[/NAME]");
    let route: Route = Arc::new(move |req| {
        let shared = shared.clone();
        Box::pin(async move { route(&shared, &req).await })
    });
    // A manual reconcile answers when it has run: no bound on the connection's life.
    Ok(tokio::spawn(listen::serve(
        Control(listener),
        format!("control socket {}", path.display()),
        route,
        None,
    )))
}

/// Remove the control socket of `state_dir` when the daemon stops, so that
/// commands run in-process afterwards.
pub fn remove(state_dir: &Path) {
    let _ = std::fs::remove_file(socket_path(state_dir));
}

async fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if req.method() != Method::POST {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "POST /reconcile/NAME or /plan[/NAME]; read-only endpoints are on [host] listen\n"
                .into(),
        );
    }
    if let Some(name) = path.strip_prefix("/reconcile/") {
        let record = req.uri().query() == Some("record");
        return reconcile_now(shared, name, record).await;
    }
    let plan = match path {
        "/plan" => Some(None),
        _ => path.strip_prefix("/plan/").map(Some),
    };
    match plan {
        Some(name) => match super::plan::run(shared, name).await {
            Ok(summaries) => respond(
                StatusCode::OK,
                "application/json",
                serde_json::to_string_pretty(&summaries).expect("serializes"),
            ),
            Err(super::plan::Refusal::NotFound(message)) => {
                respond(StatusCode::NOT_FOUND, "text/plain", message)
            }
            Err(super::plan::Refusal::Busy(message)) => too_many(message, Duration::from_secs(1)),
        },
        None => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "try POST /reconcile/NAME or /plan[/NAME]\n".into(),
        ),
    }
}

/// 429 with `Retry-After` (whole seconds, rounded up).
fn too_many(message: String, retry_in: Duration) -> Response<Full<Bytes>> {
    let mut response = respond(StatusCode::TOO_MANY_REQUESTS, "text/plain", message);
    let seconds = retry_in.as_millis().div_ceil(1000).max(1);
    response
        .headers_mut()
        .insert("retry-after", seconds.to_string().parse().expect("digits"));
    response
}

/// "1.2s" for a wait.
fn wait(duration: Duration) -> String {
    humantime::format_duration(Duration::from_millis(
        duration.as_millis() as u64 / 100 * 100 + 100,
    ))
    .to_string()
}

/// Whether a manual reconcile of `name` may run now; otherwise why not and
/// when to retry.
fn admit_manual(shared: &Shared, name: &str) -> Result<(), (String, Duration)> {
    let now = Instant::now();
    if let Some(schedule) = shared.triggers.schedule_of(name)
        && schedule.manual_skipped_backoff
        && let Some(until) = schedule.backoff_until
        && until > now
    {
        let left = until - now;
        return Err((
            format!(
                "{name} is backing off after {} failure(s) in a row and a manual reconcile already cut this backoff short: retry in {} (a manual reconcile skips a backoff once between scheduled runs); tend status {name} shows the last error\n",
                schedule.failures,
                wait(left)
            ),
            left,
        ));
    }
    let mut last = shared.manual.lock().unwrap();
    if let Some(at) = last.get(name)
        && now.duration_since(*at) < MANUAL_MIN_INTERVAL
    {
        let left = MANUAL_MIN_INTERVAL - now.duration_since(*at);
        return Err((
            format!(
                "{name}: at most one manual reconcile every {}: retry in {}\n",
                humantime::format_duration(MANUAL_MIN_INTERVAL),
                wait(left)
            ),
            left,
        ));
    }
    last.insert(name.to_string(), now);
    Ok(())
}

/// Queue a manual reconcile of `name` and answer with its result once it has
/// run: what `tend reconcile NAME` shows while the daemon runs. With `record`,
/// the plugin's next run is recorded and the answer is a
/// [`RecordedAnswer`](crate::replay::RecordedAnswer).
async fn reconcile_now(shared: &Shared, name: &str, record: bool) -> Response<Full<Bytes>> {
    let current = {
        let table = shared.table.read().unwrap();
        let entry = table.plugins.get(name);
        entry.map(|e| (e.reconciles, e.config.limits.timeout, e.state))
    };
    let Some((before, timeout, state)) = current else {
        return respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("no plugin {name:?} in the running config\n"),
        );
    };
    if let Err((message, retry_in)) = admit_manual(shared, name) {
        return too_many(message, retry_in);
    }
    let recorded = match record {
        true => match wait_for_recording(shared, name) {
            Ok(receiver) => Some(receiver),
            Err(busy) => return respond(StatusCode::CONFLICT, "text/plain", busy),
        },
        false => None,
    };
    if !shared.triggers.send(name, Trigger::new(trigger::MANUAL)) {
        shared.recordings.lock().unwrap().remove(name);
        return respond(
            StatusCode::CONFLICT,
            "text/plain",
            format!(
                "{name} is not running (state: {}); see tend status\n",
                state.name()
            ),
        );
    }
    // The run in flight (if any) finishes first; then ours, within its deadline.
    let deadline = Instant::now() + timeout * 2 + Duration::from_secs(5);
    if let Some(receiver) = recorded {
        return match tokio::time::timeout_at(deadline, receiver).await {
            Ok(Ok(answer)) => respond(
                StatusCode::OK,
                "application/json",
                serde_json::to_string(&answer).expect("serializes"),
            ),
            Ok(Err(_)) => respond(
                StatusCode::CONFLICT,
                "text/plain",
                format!(
                    "{name} did not run here (not loaded, or cluster-scope on a host that does not lead); see tend status\n"
                ),
            ),
            Err(_) => {
                shared.recordings.lock().unwrap().remove(name);
                respond(
                    StatusCode::GATEWAY_TIMEOUT,
                    "text/plain",
                    format!("{name}: no recorded run in time; see tend status\n"),
                )
            }
        };
    }
    loop {
        let done = {
            let table = shared.table.read().unwrap();
            table.plugins.get(name).and_then(|e| {
                let last = e.last.as_ref()?;
                (e.reconciles > before && last.triggers.iter().any(|t| t == trigger::MANUAL))
                    .then(|| serde_json::to_string_pretty(last).expect("serializes"))
            })
        };
        if let Some(body) = done {
            return respond(StatusCode::OK, "application/json", body);
        }
        if Instant::now() > deadline {
            return respond(
                StatusCode::GATEWAY_TIMEOUT,
                "text/plain",
                format!("{name}: no result in time; see tend status\n"),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Ask for `name`'s next run to be recorded; 409 while another recording of
/// it is under way.
fn wait_for_recording(
    shared: &Shared,
    name: &str,
) -> Result<tokio::sync::oneshot::Receiver<crate::replay::RecordedAnswer>, String> {
    let mut recordings = shared.recordings.lock().unwrap();
    if recordings.contains_key(name) {
        return Err(format!(
            "a recording of {name} is already under way: wait for it to finish\n"
        ));
    }
    let (sender, receiver) = tokio::sync::oneshot::channel();
    recordings.insert(name.to_string(), sender);
    Ok(receiver)
}

/// POST `path` to the daemon of `state_dir` over its control socket: the
/// status and body, or None when no daemon listens there.
pub async fn post(state_dir: &Path, path: &str) -> anyhow::Result<Option<(StatusCode, String)>> {
    let socket = socket_path(state_dir);
    let stream = match tokio::net::UnixStream::connect(&socket).await {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(
            "cannot reach the tend daemon at {}: permission denied: the control socket is for the user tend runs as (mode 0600); run this command as that user (usually root)",
            socket.display()
        ),
        Err(e) => anyhow::bail!("cannot reach the tend daemon at {}: {e}", socket.display()),
    };
    let failed =
        |e: &dyn std::fmt::Display| anyhow::anyhow!("tend daemon at {}: {e}", socket.display());
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| failed(&e))?;
    tokio::spawn(connection);
    let request = Request::post(path)
        .header("host", "tend")
        .body(Empty::<Bytes>::new())
        .expect("a valid request");
    let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(&e))?
        .to_bytes();
    Ok(Some((status, String::from_utf8_lossy(&body).into_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[tokio::test]
    async fn the_socket_is_0600_replaces_a_stale_one_and_refuses_a_world_writable_dir() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path());
        // A stale socket (its daemon is gone) and a stale temporary name.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let listener = bind_private(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let client = tokio::net::UnixStream::connect(&path);
        let (accepted, connected) = tokio::join!(listener.accept(), client);
        assert!(accepted.is_ok() && connected.is_ok());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, [SOCKET], "no temporary socket left behind");

        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = bind_private(&socket_path(open.path())).unwrap_err();
        assert!(err.to_string().contains("chmod o-w"), "{err}");
        assert!(!socket_path(open.path()).exists());

        // Group-writable is as open, unless the group is root's.
        let shared = tempfile::tempdir().unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
        std::os::unix::fs::chown(shared.path(), None, Some(100)).unwrap();
        let err = bind_private(&socket_path(shared.path())).unwrap_err();
        assert!(err.to_string().contains("chmod g-w"), "{err}");
        std::os::unix::fs::chown(shared.path(), None, Some(0)).unwrap();
        assert!(bind_private(&socket_path(shared.path())).is_ok());
    }

    #[tokio::test]
    async fn no_daemon_means_none_and_an_answer_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            post(dir.path(), "/plan").await.unwrap().is_none(),
            "no socket"
        );
        drop(std::os::unix::net::UnixListener::bind(socket_path(dir.path())).unwrap());
        assert!(
            post(dir.path(), "/plan").await.unwrap().is_none(),
            "stale socket"
        );
        let _ = std::fs::remove_file(socket_path(dir.path()));
        let listener = Control(bind_private(&socket_path(dir.path())).unwrap());
        let route: Route = Arc::new(|req| {
            let path = req.uri().path().to_string();
            Box::pin(async move { respond(StatusCode::OK, "text/plain", format!("got {path}")) })
        });
        tokio::spawn(listen::serve(listener, "test".into(), route, None));
        let (status, body) = post(dir.path(), "/plan/x").await.unwrap().unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "got /plan/x"));
    }
}
