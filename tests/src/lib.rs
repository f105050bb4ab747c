//! Harness for Tend's end-to-end tests: the real `tend` binary, the real
//! compiled plugins, real peers on loopback. Build everything first with
//! `cargo xtask test` (or `cargo xtask plugins && cargo build -p tend`).
//!
//! This file holds what every test uses (paths, ports, HTTP, waiting);
//! [`sandbox`] a scratch directory and its config, [`daemon`] a running
//! `tend run` and what it serves, [`peers`] the real peers on loopback,
//! [`process`] what /proc says of a process's memory and CPU, [`cloud`] one
//! harness over both cloud peers. Each
//! is re-exported here, so tests `use tend_e2e::{...}` without module paths.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub mod cloud;
pub mod daemon;
pub mod peers;
pub mod process;
pub mod sandbox;

pub use daemon::*;
pub use peers::containerd::*;
pub use peers::hostile_registry::*;
pub use peers::kube::*;
pub use peers::net::*;
pub use peers::registry::*;
pub use peers::systemd::*;
pub use process::*;
pub use sandbox::*;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The built-in plugins: the crates of plugins/ (xtask's BUILT_IN_PLUGINS,
/// which its unit test holds to the same directory), sorted.
pub fn built_in_plugins() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(workspace_root().join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask test`, which builds it",
        path.display()
    );
    path
}

/// The `tend` binary under test: `TEND_BIN` (relative to the workspace root),
/// else target/debug/tend.
pub fn tend_bin() -> PathBuf {
    let bin =
        std::env::var_os("TEND_BIN").map_or_else(|| "target/debug/tend".into(), PathBuf::from);
    built(workspace_root().join(bin))
}

/// The plugin author's tool under test, `tend-author` (`new`, `plugins push`,
/// `plugins keygen`): the one built beside [`tend_bin`].
pub fn author_bin() -> PathBuf {
    built(tend_bin().with_file_name("tend-author"))
}

/// A plugin built by `cargo xtask plugins`.
pub fn plugin(name: &str) -> PathBuf {
    built(
        workspace_root()
            .join("target/plugins")
            .join(format!("{name}.wasm")),
    )
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // Below the kernel's ephemeral range (32768-60999 by default), so that
    // no connect() nor bind to port 0, by any process, can take the port
    // between now and its listener's bind: with the whole suite and
    // node-reaper's tests running beside it, one did (`Address already in
    // use`). Where the range starts too low to leave room, the kernel picks.
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    // Above the ports tests bind themselves (a stand-in kubelet's 10248).
    const LOW: u16 = 20_000;
    if start < LOW + 1_000 {
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let random = RandomState::new();
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let port = LOW + (random.hash_one(attempt) % u64::from(start - LOW)) as u16;
        // Test binaries run side by side, each with its own `GIVEN`: two
        // gave the same port (tend then could not listen, `Address already
        // in use`). A lock on the port's file, held until this process
        // ends (the kernel lets go of it however it ends), keeps a port
        // given by one binary from every other. Claimed before `GIVEN` is
        // locked: a claim that panics leaves it usable.
        let Some(claim) = claim_port(&std::env::temp_dir().join("tend-e2e-ports"), port) else {
            continue;
        };
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            CLAIMS.lock().unwrap().push(claim);
            return port;
        }
    }
}

/// The claims [`free_port`] holds for this process's lifetime.
static CLAIMS: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// An exclusive lock on `port`'s file in `dir`, or None while another
/// process (or another open file here) holds it.
fn claim_port(dir: &Path, port: u16) -> Option<std::fs::File> {
    let file = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let file = file.unwrap_or_else(|e| panic!("cannot claim ports in {}: {e}", dir.display()));
    file.try_lock().ok().map(|()| file)
}

/// GET `path` from 127.0.0.1:`port`: (status, body). A plain HTTP/1.0 client,
/// enough for tend's status endpoints.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(split_response(&response))
}

/// `text` percent-encoded for a URL's query (RFC 3986's unreserved kept).
pub(crate) fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An HTTP/1.x response as (status, body); status 0 when there is none.
pub(crate) fn split_response(response: &str) -> (u16, String) {
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// How many compiled builds (`.cwasm`) a compile cache directory holds; 0
/// when there is none.
pub fn compiled_builds(cache: &Path) -> usize {
    std::fs::read_dir(cache).map_or(0, |dir| {
        dir.flatten()
            .filter(|e| e.path().extension() == Some("cwasm".as_ref()))
            .count()
    })
}

/// The sha256 digest of a file as tend reports it.
pub fn digest_of(path: &Path) -> String {
    sha256_of(&std::fs::read(path).unwrap())
}

/// The sha256 digest (`sha256:<hex>`) of `bytes`, by `sha256sum`.
pub fn sha256_of(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    format!(
        "sha256:{}",
        String::from_utf8_lossy(&output.stdout)
            .split(' ')
            .next()
            .unwrap()
    )
}

/// Poll `condition` until it holds or `within` passes; panics with `what`.
pub fn wait_until(within: Duration, what: &str, condition: impl FnMut() -> bool) {
    poll_until(within, what, Duration::from_millis(20), condition);
}

/// [`wait_until`] polling every millisecond, returning how long it took: for
/// the benches, which report that time, so the polling must not blur it.
pub fn time_until(within: Duration, what: &str, condition: impl FnMut() -> bool) -> Duration {
    poll_until(within, what, Duration::from_millis(1), condition)
}

fn poll_until(
    within: Duration,
    what: &str,
    every: Duration,
    mut condition: impl FnMut() -> bool,
) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
    started.elapsed()
}

pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether the tests run as root: the containerd peer and iptables need it.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Milliseconds since the epoch of an RFC 3339 time as tend writes it.
pub fn epoch_ms(rfc3339: &str) -> u64 {
    humantime::parse_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("{rfc3339:?} is not an RFC 3339 time: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One HTTP/1.0 exchange with 127.0.0.1:`port` (the server closes the
/// connection after its answer): (status, body). `headers` are sent as given.
pub fn http_call(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    Ok(split_response(&String::from_utf8_lossy(&response)))
}

/// Append records `first..` with `messages` to `path`, a kernel log in the
/// `/dev/kmsg` record format (`prio,seq,usec,flags;message` then a ` KEY=value`
/// line), as the kernel would at `priority`; answers the next sequence number.
pub fn append_kmsg(
    path: &Path,
    first: u64,
    priority: u8,
    messages: impl IntoIterator<Item = String>,
) -> u64 {
    let mut text = String::new();
    let mut seq = first;
    for message in messages {
        text += &format!(
            "{priority},{seq},{},-;{message}\n SUBSYSTEM=test\n",
            seq * 1000
        );
        seq += 1;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    seq
}

#[cfg(test)]
mod tests {
    use super::claim_port;

    /// What keeps two test binaries from giving the same port: a claim
    /// held anywhere (here, another open file) refuses the next until let go.
    #[test]
    fn a_claimed_port_is_refused_until_its_claim_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = claim_port(dir.path(), 20_000).expect("the port is free to claim");
        assert!(claim_port(dir.path(), 20_000).is_none(), "claimed twice");
        drop(held);
        assert!(claim_port(dir.path(), 20_000).is_some(), "not given back");
    }
}
