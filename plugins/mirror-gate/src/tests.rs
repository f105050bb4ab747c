//! mirror-gate's logic against the SDK's in-memory fakes.

use super::*;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Health, State};

const HOSTS: &str = "/etc/containerd/certs.d/docker.io/hosts.toml";

fn context(caches: &str) -> Context {
    Context::new(
        "mirror-gate",
        &format!(r#"{{"certs-dir": "/etc/containerd/certs.d", "caches": [{caches}]}}"#),
    )
}

const DOCKER: &str = r#"{"upstream": "docker.io", "endpoint": "http://127.0.0.1:5000"}"#;

/// The grants of the quickstart config: the certs dir writable, the cache probe.
fn host() -> FakeHost {
    let host = FakeHost::named("mirror-gate");
    host.files.grant("/etc/containerd/certs.d", true);
    host.http.grant("http://127.0.0.1:*/*");
    host
}

#[test]
fn healthy_cache_gets_a_hosts_toml() {
    let host = host();
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    let outcome = MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(outcome.message, "1 mirror(s) active");
    let written = String::from_utf8(host.files.get(HOSTS).unwrap()).unwrap();
    assert_eq!(
        written,
        hosts::render(
            "docker.io",
            "http://127.0.0.1:5000",
            &default_capabilities()
        )
    );
    let probe = &host.http.sent()[0];
    assert_eq!(probe.timeout, Some(Duration::from_millis(2000)));
}

#[test]
fn unreachable_or_unhealthy_cache_gets_no_file_and_a_quick_requeue() {
    for status in [None, Some(503), Some(401)] {
        let host = host();
        if let Some(status) = status {
            host.http.status("http://127.0.0.1:5000/v2/", status);
        }
        let outcome = MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
        assert_eq!(outcome.health, Health::Progressing, "{status:?}");
        assert_eq!(outcome.requeue_after, Some(Duration::from_secs(5)));
        assert!(
            outcome.message.contains("waiting for docker.io"),
            "{}",
            outcome.message
        );
        assert!(
            host.files.paths().is_empty(),
            "no file while the cache is not healthy"
        );
    }
}

#[test]
fn accepted_statuses_are_configurable() {
    let host = host();
    host.http.status("http://127.0.0.1:5000/v2/", 401);
    let cache = r#"{"upstream": "docker.io", "endpoint": "http://127.0.0.1:5000", "accept-status": [200, 401]}"#;
    let outcome = MirrorGate::reconcile(&context(cache), &host).unwrap();
    assert_eq!(outcome.health, Health::Healthy);
    assert!(host.files.get(HOSTS).is_some());
}

#[test]
fn removed_upstream_loses_only_the_file_mirror_gate_wrote() {
    let host = host();
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    host.files.put(
        "/etc/containerd/certs.d/quay.io/hosts.toml",
        b"operator's own",
    );
    MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert!(host.files.get(HOSTS).is_some());
    let outcome = MirrorGate::reconcile(&context(""), &host).unwrap();
    assert_eq!(outcome.message, "0 mirror(s) active, 1 removed");
    assert_eq!(host.files.get(HOSTS), None);
    assert_eq!(
        host.files.paths(),
        ["/etc/containerd/certs.d/quay.io/hosts.toml"]
    );
    assert!(host.state.list_keys("").unwrap().is_empty());
}

#[test]
fn an_operators_hosts_toml_is_not_overwritten_unless_adopted() {
    let host = host();
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    host.files.put(HOSTS, b"server = \"https://mine\"\n");
    let outcome = MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains("set adopt = true"),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.files.get(HOSTS).unwrap(),
        b"server = \"https://mine\"\n"
    );
    let adopt = r#"{"upstream": "docker.io", "endpoint": "http://127.0.0.1:5000", "adopt": true}"#;
    assert_eq!(
        MirrorGate::reconcile(&context(adopt), &host)
            .unwrap()
            .health,
        Health::Healthy
    );
    assert!(
        String::from_utf8(host.files.get(HOSTS).unwrap())
            .unwrap()
            .contains("127.0.0.1:5000")
    );
}

#[test]
fn second_reconcile_changes_nothing() {
    let host = host();
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    let logged = host.logs().len();
    MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert_eq!(
        host.logs().len(),
        logged,
        "no 'enabled' log line when nothing changed"
    );
}

#[test]
fn a_denied_write_fails_the_reconcile_with_the_grant_to_add() {
    let host = FakeHost::named("mirror-gate");
    host.files.grant("/etc/containerd", false);
    host.http.grant("http://127.0.0.1:*/*");
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    let err = MirrorGate::reconcile(&context(DOCKER), &host).unwrap_err();
    assert_eq!(
        err,
        Error::Denied(format!(
            "{HOSTS} is granted read-only by {{ path = \"/etc/containerd\" }}: set write = true on that grant in [plugins.mirror-gate.grants] files"
        ))
    );
}

#[test]
fn an_ungranted_probe_waits_and_names_the_http_grant_to_add() {
    let host = FakeHost::named("mirror-gate");
    host.files.grant("/etc/containerd/certs.d", true);
    host.http.status("http://127.0.0.1:5000/v2/", 200);
    let outcome = MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert_eq!(outcome.health, Health::Progressing);
    assert!(
        outcome.message.contains(
            "denied: GET http://127.0.0.1:5000/v2/: no http grant matches; add \"http://127.0.0.1:5000/*\" to [plugins.mirror-gate.grants] http"
        ),
        "{}",
        outcome.message
    );
    assert!(host.http.sent().is_empty());
    assert!(host.files.paths().is_empty());
}

#[test]
fn bad_config_is_invalid_and_names_the_problem() {
    let host = host();
    let err = MirrorGate::reconcile(
        &context(r#"{"upstream": "../etc", "endpoint": "http://x"}"#),
        &host,
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("registry host")),
        "{err}"
    );
    let err = MirrorGate::reconcile(&Context::new("mirror-gate", r#"{"cachez": []}"#), &host)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("cachez")),
        "{err}"
    );
}
