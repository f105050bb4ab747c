//! A hostile registry against the real `tend run` (tests/peers/hostile-registry.py
//! on loopback, plain HTTP): a 512 MiB manifest is refused after at most the
//! manifest bound was read (RSS stays put, the old version keeps running); an
//! 8 MiB error body full of newlines and escapes shows up cut and inert in
//! the load error, `/status` and the log; a redirect to the metadata address
//! and a link-local token realm are refused by name, without their answer;
//! a redirect to another loopback origin (allowed: the registry is on
//! loopback) is followed but what it answers is never shown; a manifest's
//! 1 MiB media type is shown cut.
//! (HTTPS downgrades are covered by the unit tests of host/src/peer.rs: no
//! TLS registry here.)

use std::time::Duration;
use tend_e2e::{
    HostileRegistry, Sandbox, free_port, http_get, peak_rss_kib, plugin, plugin_status,
    reset_peak_rss, rss_kib, wait_for_plugin, wait_until,
};

/// The most bytes a load error may take.
const MAX_ERROR: usize = 4096;
/// The manifest bound (`oci::MAX_MANIFEST`).
const MAX_MANIFEST_KIB: u64 = 4096;
/// What reading up to the bound may cost beyond it (a growing buffer's
/// doubling, one chunk, the connection): a few MiB.
const SLACK_KIB: u64 = 12 * 1024;

fn config(sandbox: &Sandbox, port: u16, registry: &HostileRegistry, file: &str) {
    sandbox.config_with_host(
        &format!(
            "cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n[host.oci]\ninsecure-registries = [\"127.0.0.1:{}\"]\ntimeout = \"60s\"\n",
            registry.port
        ),
        &format!("[plugins.p]\nfile = \"{file}\"\ninterval = \"100ms\"\n[plugins.p.config]\nmode = \"ok\"\n"),
    );
}

fn error_of(p: &serde_json::Value) -> String {
    p["load_error"].as_str().unwrap_or("").to_string()
}

/// Point plugin p at `file` and wait until its load error contains `needle`
/// (`what` names the wait): that error, checked to be bounded.
fn load_error(
    sandbox: &Sandbox,
    (port, registry): (u16, &HostileRegistry),
    file: &str,
    what: &str,
    needle: &str,
) -> String {
    config(sandbox, port, registry, file);
    let p = wait_for_plugin(port, "p", what, |p| error_of(p).contains(needle));
    let error = error_of(&p);
    assert!(
        error.len() < MAX_ERROR,
        "a load error of {} bytes",
        error.len()
    );
    error
}

fn runs_v1(p: &serde_json::Value) -> bool {
    p["state"] == "ready"
        && p["last"]["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("(v1)")
}

/// The version running so far (v1) keeps reconciling.
fn v1_keeps_running(port: u16) {
    let before = plugin_status(port, "p")["reconciles"].as_u64();
    wait_for_plugin(port, "p", "v1 keeps reconciling", |q| {
        runs_v1(q) && q["reconciles"].as_u64() > before
    });
}

/// A version from the hostile registry's good repository, running.
fn start_with_v1(sandbox: &Sandbox, port: u16, registry: &HostileRegistry) -> tend_e2e::Daemon {
    config(sandbox, port, registry, &registry.at("good"));
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "p", "v1 from the registry reconciles", runs_v1);
    daemon
}

#[test]
fn a_512_mib_manifest_is_refused_while_read_and_the_old_version_keeps_running() {
    let sandbox = Sandbox::new();
    let registry = HostileRegistry::start(&plugin("chaos"));
    let port = free_port();
    let daemon = start_with_v1(&sandbox, port, &registry);
    // v1's first runs are Winch's build: its Cranelift build, compiled in the
    // background, must be done before the peak is reset, or its compile's
    // working memory is what the bound below measures (stop 48's CI: 17 MB).
    wait_for_plugin(port, "p", "v1's Cranelift build runs", |p| {
        runs_v1(p) && p["compiler"] == "cranelift"
    });
    reset_peak_rss(daemon.pid());
    let rss_before = rss_kib(daemon.pid());

    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("big"),
        "the huge manifest is refused",
        "larger than",
    );
    assert!(
        error.contains("the manifest is larger than 4194304 bytes: refused"),
        "{error}"
    );
    // The registry gave up sending: the client stopped reading near the bound.
    wait_until(
        Duration::from_secs(30),
        "the registry to record the big answer",
        || {
            registry
                .requests()
                .iter()
                .any(|r| r["path"].as_str().unwrap().contains("/big/"))
        },
    );
    for request in registry.requests() {
        if request["path"].as_str().unwrap().contains("/big/") {
            let sent = request["sent"].as_u64().unwrap();
            assert!(sent < 64 << 20, "the registry sent {sent} bytes");
        }
    }
    let peak_after = peak_rss_kib(daemon.pid());
    eprintln!(
        "RSS before {rss_before} KiB, peak while refusing the 512 MiB manifest {peak_after} KiB"
    );
    assert!(
        peak_after <= rss_before + MAX_MANIFEST_KIB + SLACK_KIB,
        "tend's RSS grew past the bound: {rss_before} KiB before, peak {peak_after} KiB"
    );
    // The old version keeps running.
    v1_keeps_running(port);
}

#[test]
fn error_bodies_redirects_and_token_realms_are_refused_without_echo() {
    let sandbox = Sandbox::new();
    let registry = HostileRegistry::start(&plugin("chaos"));
    let port = free_port();
    let daemon = start_with_v1(&sandbox, port, &registry);

    // 8 MiB of error body with newlines, escapes and a forged log line.
    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("noisy"),
        "the 404 is the load error",
        "404",
    );
    assert!(
        !error.chars().any(char::is_control),
        "a raw control character in {error:?}"
    );
    assert!(error.contains("unknown\\n2026-01-01T00:00:00Z"), "{error}");
    let (status, body) = http_get(port, "/status").unwrap();
    assert_eq!(status, 200);
    assert!(body.len() < 16 * 1024, "/status is {} bytes", body.len());
    assert!(!body.contains('\u{1b}') && !body.contains('\u{7}'));
    daemon.wait_for_log(Duration::from_secs(30), &["404"]);
    let log = daemon.log();
    for line in log.lines() {
        assert!(line.len() < MAX_ERROR, "a log line of {} bytes", line.len());
        assert!(
            !line.starts_with("2026-01-01T00:00:00Z"),
            "a forged log line: {line}"
        );
    }
    assert!(!log.contains('\u{7}') && !log.contains("]0;owned\u{7}"));
    assert!(log.len() < 1 << 20, "the log is {} bytes", log.len());

    // A redirect to the metadata address: refused by name, never connected
    // (the refusal, not a connection error), its answer never shown.
    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("redirect"),
        "the redirect is refused",
        "redirected",
    );
    assert!(
        error.contains(
            "the registry redirected to http://169.254.169.254, which is refused: it is a link-local address"
        ),
        "{error}"
    );
    assert!(
        !error.contains("see the metadata") && !error.contains("/iam/"),
        "{error}"
    );

    // A token realm on the metadata address: refused before it is asked.
    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("realm"),
        "the token realm is refused",
        "token realm",
    );
    assert!(
        error.contains(
            "its token realm http://169.254.169.254 is refused: it is a link-local address"
        ),
        "{error}"
    );
    // Nothing but the registry's own API was asked so far.
    for request in registry.requests() {
        assert!(
            request["path"].as_str().unwrap().starts_with("/v2/"),
            "{request}"
        );
    }

    // A redirect to another loopback origin: followed (the registry itself
    // is on loopback), but what that origin answers is never shown.
    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("internal"),
        "the redirect target's 404",
        "404",
    );
    assert!(
        error.contains("the answer of http://127.0.0.2:") && error.contains("is not shown"),
        "{error}"
    );
    assert!(
        registry
            .requests()
            .iter()
            .any(|r| r["path"] == "/internal/secret"),
        "the redirect was not followed: {:#?}",
        registry.requests()
    );
    let (_, status) = http_get(port, "/status").unwrap();
    assert!(!status.contains("INTERNAL-SECRET"), "{status}");
    assert!(!daemon.log().contains("INTERNAL-SECRET"));

    // A manifest's 1 MiB media type full of newlines: shown cut and inert.
    let error = load_error(
        &sandbox,
        (port, &registry),
        &registry.at("shape"),
        "the media type is refused",
        "config media type",
    );
    assert!(
        error.contains("m\\nm\\n") && !error.contains('\n'),
        "{error}"
    );
    let (_, status) = http_get(port, "/status").unwrap();
    assert!(
        status.len() < 16 * 1024,
        "/status is {} bytes",
        status.len()
    );

    // v1 still runs through all of it.
    v1_keeps_running(port);
    assert!(daemon.log().len() < 1 << 20);
}

#[test]
fn a_bearer_token_is_fetched_from_the_realm_with_the_configured_credentials() {
    let sandbox = Sandbox::new();
    let registry = HostileRegistry::start(&plugin("chaos"));
    let port = free_port();
    let auth = "dGVuZDpzM2NyZXQ="; // base64 of tend:s3cret
    let docker_config = sandbox.path("docker-config.json");
    std::fs::write(
        &docker_config,
        format!(
            "{{\"auths\": {{\"127.0.0.1:{}\": {{\"auth\": \"{auth}\"}}}}}}",
            registry.port
        ),
    )
    .unwrap();
    sandbox.config_with_host(
        &format!(
            "cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n[host.oci]\ninsecure-registries = [\"127.0.0.1:{}\"]\ndocker-config = \"{}\"\n",
            registry.port,
            docker_config.display()
        ),
        &format!(
            "[plugins.p]\nfile = \"{}\"\ninterval = \"100ms\"\n[plugins.p.config]\nmode = \"ok\"\n",
            registry.at("authed")
        ),
    );
    let _daemon = sandbox.daemon();
    wait_for_plugin(port, "p", "the authenticated pull reconciles", runs_v1);
    let requests = registry.requests();
    let token_requests: Vec<_> = requests
        .iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/token?"))
        .collect();
    assert_eq!(token_requests.len(), 1, "{requests:#?}");
    assert_eq!(token_requests[0]["status"], 200, "{requests:#?}");
    // Every request after the token carried it; none sent the password to the registry.
    let pulls: Vec<_> = requests
        .iter()
        .filter(|r| r["path"].as_str().unwrap().starts_with("/v2/tend/authed/"))
        .collect();
    // The manifest unauthenticated (401), again with the token, the layer.
    // The registry records a request once its answer is sent, so a 401 may
    // be recorded after the requests it caused: counted, not ordered.
    let (refused, served): (Vec<&&serde_json::Value>, Vec<&&serde_json::Value>) =
        pulls.iter().partition(|r| r["status"] == 401);
    assert_eq!(refused.len(), 1, "{requests:#?}");
    assert!(
        refused[0]["headers"]["authorization"].is_null(),
        "{requests:#?}"
    );
    assert!(served.len() >= 2, "{requests:#?}");
    for request in served {
        assert_eq!(
            request["headers"]["authorization"], "Bearer pull-token-for-tend",
            "{requests:#?}"
        );
    }
}
