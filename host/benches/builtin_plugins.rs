//! The built-in plugins' own targets (numbers go to docs/benchmarks.md).
//! Needs `cargo xtask plugins` first.
//!
//!   cargo bench -p tend --bench builtin_plugins
//!
//! - ipam-sweeper: one pass over 1000 allocation files (real files in a temp
//!   dir) and 200 sandboxes (the in-memory runtime), grace not yet over;
//! - mirror-gate: one reconcile with five caches of which four drop SYNs (a
//!   listener with a full accept queue), against the real HTTP backend;
//! - mirror-gate: from a cache going dark to its mirror being withdrawn.

mod common;
use common::{bench_config, plugins_dir, timed_reconcile};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tend::capabilities::Services;
use tend::capabilities::cri::SandboxState;
use tend::capabilities::files::RealFiles;
use tend::capabilities::http::RealHttp;
use tend::config::Config;
use tend::runtime::Runtime;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

async fn reconcile(
    runtime: &Runtime,
    services: &Services,
    config: &Config,
    name: &str,
) -> (Duration, String) {
    let plugin_config = &config.plugins[name];
    let plugin = runtime.load(&plugin_config.file).unwrap();
    let (elapsed, report) = timed_reconcile(runtime, &plugin, plugin_config, services).await;
    let outcome = report.result.unwrap_or_else(|e| panic!("{name}: {e}"));
    (elapsed, outcome.message)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A port on 127.0.0.1 that drops SYNs: its one-slot accept queue is full.
async fn dark_port(port: u16) -> (TcpListener, TcpStream) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(([127, 0, 0, 1], port).into()).unwrap();
    let listener = socket.listen(0).unwrap();
    let filler = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    (listener, filler)
}

/// A registry stand-in answering every request with 200 until aborted.
fn answering(listener: TcpListener) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    })
}

fn main() {
    let plugins = plugins_dir();
    let runtime = Runtime::new(None, 4).unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(ipam_sweeper(&runtime, &plugins));
    tokio.block_on(mirror_gate_dead_caches(&runtime, &plugins));
    tokio.block_on(mirror_gate_withdrawal(&runtime, &plugins));
}

async fn ipam_sweeper(runtime: &Runtime, plugins: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let network = dir.path().join("cbr0");
    std::fs::create_dir(&network).unwrap();
    let (mut services, fakes) = Services::fake();
    services.backends.files = Arc::new(RealFiles);
    for i in 0..200u32 {
        fakes.cri.add_sandbox(
            &format!("{i:064x}"),
            &format!("uid-{i}"),
            0,
            SandboxState::Ready,
        );
    }
    // 800 allocations held by READY sandboxes, 200 orphans still in their grace.
    for i in 0..1000u32 {
        let owner = if i < 800 { i % 200 } else { 10_000 + i };
        std::fs::write(
            network.join(format!("10.85.{}.{}", i / 250, i % 250 + 1)),
            format!("{owner:064x}\neth0"),
        )
        .unwrap();
    }
    std::fs::write(network.join("last_reserved_ip.0"), "10.85.3.250").unwrap();
    let config = bench_config(&format!(
        r#"
[plugins.ipam-sweeper]
file = "{plugins}/ipam-sweeper.wasm"
[plugins.ipam-sweeper.grants]
files = [{{ path = "{dir}", write = true }}]
cri = {{ read = true }}
[plugins.ipam-sweeper.config]
networks-dir = "{dir}"
grace = "1h"
"#,
        plugins = plugins.display(),
        dir = dir.path().display()
    ));
    let mut samples = Vec::new();
    let mut message = String::new();
    for _ in 0..40 {
        let (elapsed, outcome) = reconcile(runtime, &services, &config, "ipam-sweeper").await;
        samples.push(elapsed);
        message = outcome;
    }
    assert!(message.contains("200 orphaned IP(s) waiting"), "{message}");
    samples.sort();
    println!(
        "ipam-sweeper pass, 1000 files / 200 sandboxes: min {:.1} ms, p50 {:.1} ms, max {:.1} ms (n=40)",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1])
    );
}

fn mirror_config(plugins: &Path, certs: &Path, caches: &[(&str, u16)], extra: &str) -> Config {
    let mut text = format!(
        r#"
[plugins.mirror-gate]
file = "{plugins}/mirror-gate.wasm"
[plugins.mirror-gate.grants]
files = [{{ path = "{certs}", write = true }}]
http = ["http://127.0.0.1:*/*"]
[plugins.mirror-gate.config]
certs-dir = "{certs}"
{extra}
"#,
        plugins = plugins.display(),
        certs = certs.display()
    );
    for (upstream, port) in caches {
        text.push_str(&format!(
            "[[plugins.mirror-gate.config.caches]]\nupstream = \"{upstream}\"\nendpoint = \"http://127.0.0.1:{port}\"\n"
        ));
    }
    bench_config(&text)
}

fn real_http_services() -> Services {
    let (mut services, _) = Services::fake();
    services.backends.files = Arc::new(RealFiles);
    services.backends.http = Arc::new(RealHttp::new().unwrap());
    services
}

async fn mirror_gate_dead_caches(runtime: &Runtime, plugins: &Path) {
    let certs = tempfile::tempdir().unwrap();
    let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let live_port = live.local_addr().unwrap().port();
    let server = answering(live);
    let mut dark = Vec::new();
    for _ in 0..4 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        dark.push((port, dark_port(port).await));
    }
    let caches = [
        ("docker.io", live_port),
        ("quay.io", dark[0].0),
        ("ghcr.io", dark[1].0),
        ("registry.k8s.io", dark[2].0),
        ("gcr.io", dark[3].0),
    ];
    let config = mirror_config(plugins, certs.path(), &caches, "probe-timeout-ms = 2000");
    let services = real_http_services();
    let mut samples = Vec::new();
    for _ in 0..5 {
        samples.push(
            reconcile(runtime, &services, &config, "mirror-gate")
                .await
                .0,
        );
    }
    samples.sort();
    println!(
        "mirror-gate, 5 caches of which 4 drop SYNs, probe-timeout 2 s: p50 {:.0} ms, max {:.0} ms (n=5; sequential probes would take 8000+ ms)",
        ms(samples[2]),
        ms(samples[4])
    );
    server.abort();
}

async fn mirror_gate_withdrawal(runtime: &Runtime, plugins: &Path) {
    let certs = tempfile::tempdir().unwrap();
    let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = live.local_addr().unwrap().port();
    let server = answering(live);
    let config = mirror_config(
        plugins,
        certs.path(),
        &[("docker.io", port)],
        "probe-timeout-ms = 500\nwithdraw-after-ms = 1000\npending-requeue-ms = 250",
    );
    let services = real_http_services();
    let hosts = certs.path().join("docker.io/hosts.toml");
    reconcile(runtime, &services, &config, "mirror-gate").await;
    assert!(hosts.exists(), "the live cache got its mirror");
    server.abort();
    let _ = server.await;
    let _dark = dark_port(port).await;
    let dark_at = Instant::now();
    // The scheduler would run it again at pending-requeue-ms while the cache fails.
    while hosts.exists() {
        let (elapsed, _) = reconcile(runtime, &services, &config, "mirror-gate").await;
        tokio::time::sleep(Duration::from_millis(250).saturating_sub(elapsed)).await;
        assert!(
            dark_at.elapsed() < Duration::from_secs(10),
            "never withdrawn"
        );
    }
    println!(
        "mirror-gate, cache dark -> mirror withdrawn: {:.0} ms (withdraw-after 1000 ms, probes every 250 ms, probe-timeout 500 ms)",
        ms(dark_at.elapsed())
    );
}
