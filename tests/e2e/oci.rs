//! Plugins as OCI artifacts, with the real `tend run` and a real registry
//! (distribution, plain HTTP on loopback): published with `tend-author
//! plugins push`, loaded by tag and by digest, reloaded when the config names another
//! digest, refused when the registry's blob was tampered with or the cosign
//! signature is missing or made with another key (the old version keeps
//! running), and loaded from the cache with the registry gone.

use std::process::Command;
use tend_e2e::{
    Daemon, Registry, Sandbox, author_bin, digest_of, free_port, plugin, push_plugin,
    wait_for_plugin,
};

/// Push `file` as `reference`, signed with the sandbox's `key` if given.
fn push(sandbox: &Sandbox, file: &std::path::Path, reference: &str, key: Option<&str>) -> String {
    push_plugin(file, reference, key.map(|key| sandbox.path(key)).as_deref())
}

fn keygen(sandbox: &Sandbox, dir: &str) {
    let out = Command::new(author_bin())
        .args(["plugins", "keygen"])
        .arg(sandbox.path(dir))
        .env("COSIGN_PASSWORD", "test")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A config with one plugin `p` from `file`, its own cache, plain HTTP to `registry`.
fn config(sandbox: &Sandbox, port: u16, registry: &Registry, file: &str, extra: &str) {
    sandbox.config_with_host(
        &format!(
            "cache-dir = \"cache\"\nlisten = \"127.0.0.1:{port}\"\n[host.oci]\ninsecure-registries = [\"127.0.0.1:{}\"]\ntimeout = \"20s\"\n",
            registry.port
        ),
        &format!("[plugins.p]\nfile = \"{file}\"\ninterval = \"100ms\"\n{extra}[plugins.p.config]\nmode = \"ok\"\n"),
    );
}

fn runs_version(p: &serde_json::Value, version: &str) -> bool {
    p["state"] == "ready"
        && p["last"]["message"]
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("({version})"))
}

fn error_of(p: &serde_json::Value) -> String {
    p["load_error"].as_str().unwrap_or("").to_string()
}

#[test]
fn tags_and_digests_load_a_new_digest_reloads_a_tampered_blob_is_refused_and_a_restart_needs_no_registry()
 {
    let sandbox = Sandbox::new();
    let registry = Registry::start();
    let port = free_port();
    let at = |path: &str| format!("oci://127.0.0.1:{}/tend/{path}", registry.port);
    let v1 = push(&sandbox, &plugin("chaos"), &at("chaos:v1"), None);
    let v2 = push(&sandbox, &plugin("chaos-v2"), &at("chaos:v2"), None);
    assert_ne!(v1, v2);

    // A tag resolves, and /status shows the digest it pinned.
    config(&sandbox, port, &registry, &at("chaos:v1"), "");
    let daemon = sandbox.daemon();
    let p = wait_for_plugin(port, "p", "v1 from the tag reconciles", |p| {
        runs_version(p, "v1")
    });
    assert_eq!(p["pinned"], v1.as_str(), "{p:#}");
    assert_eq!(p["last"]["digest"], digest_of(&plugin("chaos")).as_str());
    let shown = sandbox.tend(&["status"]);
    assert!(
        shown.stdout.contains(&format!("pinned: {v1}")),
        "{}",
        shown.stdout
    );

    // The config names another digest: hot reload, no restart.
    config(&sandbox, port, &registry, &v2, "");
    wait_for_plugin(port, "p", "v2 by digest reconciles", |p| {
        runs_version(p, "v2") && p["pinned"] == v2.as_str()
    });

    // A tampered blob in the registry: refused, v2 keeps running.
    let other = push(&sandbox, &plugin("unit-doctor"), &at("doctor:1"), None);
    let blob = registry.blob_file(&digest_of(&plugin("unit-doctor")));
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    config(&sandbox, port, &registry, &other, "");
    let p = wait_for_plugin(port, "p", "the tampered blob is refused", |p| {
        error_of(p).contains("digest")
    });
    assert!(error_of(&p).contains(&other), "{p:#}");
    assert_eq!(p["pinned"], v2.as_str(), "{p:#}");
    wait_for_plugin(port, "p", "v2 keeps reconciling", |q| {
        runs_version(q, "v2") && q["reconciles"].as_u64() > p["reconciles"].as_u64()
    });
    assert!(daemon.log().contains("the previous version keeps running"));

    // A restart with the registry gone: v2 by digest comes from the cache.
    config(&sandbox, port, &registry, &v2, "");
    assert!(daemon.terminate(std::time::Duration::from_secs(30)));
    drop(registry);
    // `tend check` finds it in the cache too (a daemon holds the state store: stopped).
    let checked = sandbox.tend(&["check"]);
    assert!(
        checked.success && checked.stdout.contains("ok: p"),
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    let daemon = sandbox.daemon();
    let p = wait_for_plugin(port, "p", "v2 from the cache reconciles", |p| {
        runs_version(p, "v2")
    });
    assert_eq!(p["pinned"], v2.as_str());
    assert!(
        daemon.log().contains("from_registry=false"),
        "{}",
        daemon.log()
    );
}

#[test]
fn unsigned_and_wrongly_signed_artifacts_are_refused_while_the_old_version_runs() {
    let sandbox = Sandbox::new();
    let registry = Registry::start();
    let port = free_port();
    let at = |path: &str| format!("oci://127.0.0.1:{}/tend/{path}", registry.port);
    keygen(&sandbox, "a");
    keygen(&sandbox, "b");
    let verify = "verify = { key = \"a/cosign.pub\" }\n";
    let v1 = push(
        &sandbox,
        &plugin("chaos"),
        &at("chaos:v1"),
        Some("a/cosign.key"),
    );
    config(&sandbox, port, &registry, &v1, verify);
    let _daemon: Daemon = sandbox.daemon();
    wait_for_plugin(port, "p", "signed v1 reconciles", |p| runs_version(p, "v1"));

    // Unsigned: refused, the error names the key and what is missing.
    let v2 = push(&sandbox, &plugin("chaos-v2"), &at("chaos:v2"), None);
    config(&sandbox, port, &registry, &v2, verify);
    let p = wait_for_plugin(port, "p", "unsigned v2 is refused", |p| {
        !error_of(p).is_empty()
    });
    let error = error_of(&p);
    assert!(
        error.contains("no cosign signature verifies with") && error.contains("a/cosign.pub"),
        "{error}"
    );
    assert!(
        runs_version(&p, "v1") && p["pinned"] == v1.as_str(),
        "{p:#}"
    );

    // Signed with another key (the same artifact, by tag this time): refused.
    assert_eq!(
        push(
            &sandbox,
            &plugin("chaos-v2"),
            &at("chaos:v2"),
            Some("b/cosign.key")
        ),
        v2
    );
    config(&sandbox, port, &registry, &at("chaos:v2"), verify);
    let p = wait_for_plugin(port, "p", "v2 signed by b is refused", |p| {
        error_of(p).contains("does not verify with")
    });
    assert!(
        runs_version(&p, "v1") && p["pinned"] == v1.as_str(),
        "{p:#}"
    );

    // Signed with the key the config names: v2 runs.
    push(
        &sandbox,
        &plugin("chaos-v2"),
        &at("chaos:v2"),
        Some("a/cosign.key"),
    );
    config(&sandbox, port, &registry, &v2, verify);
    wait_for_plugin(port, "p", "v2 signed by a reconciles", |p| {
        runs_version(p, "v2") && p["pinned"] == v2.as_str() && error_of(p).is_empty()
    });
}

/// A push to a plain-HTTP registry without `--insecure` fails saying how to
/// reach it (it said only "error sending request"), and nothing is stored.
#[test]
fn a_push_to_a_plain_http_registry_without_insecure_names_the_flag() {
    let registry = Registry::start();
    let reference = format!("oci://127.0.0.1:{}/plugins/chaos:v1", registry.port);
    let out = Command::new(author_bin())
        .args(["plugins", "push"])
        .arg(plugin("chaos"))
        .arg(&reference)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("pass --insecure") && stderr.contains("error sending request"),
        "{stderr}"
    );
    // The same push with the flag works: the hint named the only difference.
    assert!(push_plugin(&plugin("chaos"), &reference, None).contains("@sha256:"));
}
