//! mirror-gate's logic against the SDK's in-memory fakes.

use super::*;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Health, Metrics, State};

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
    assert_eq!(
        outcome.message,
        "1 mirror(s) active; docker.io: mirror via http://127.0.0.1:5000 (healthy)"
    );
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
    assert_eq!(probe.timeout_ms, Some(2000));
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
        assert_eq!(outcome.requeue_after_ms, Some(5_000));
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
    let logged = host.log_lines().len();
    MirrorGate::reconcile(&context(DOCKER), &host).unwrap();
    assert_eq!(
        host.log_lines().len(),
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

#[test]
fn two_caches_for_one_upstream_are_invalid() {
    let err = MirrorGate::reconcile(&context(&format!("{DOCKER}, {DOCKER}")), &host()).unwrap_err();
    assert_eq!(
        err,
        Error::Invalid("upstream docker.io has two caches: give each upstream one cache".into())
    );
}

// Withdrawing and restoring mirrors, at times the tests pick.

const T0: u64 = 1_700_000_000_000;
const SECOND: u64 = 1000;
const PROBE: &str = "http://127.0.0.1:5000/v2/";
const QUAY: &str = r#"{"upstream": "quay.io", "endpoint": "http://127.0.0.1:5001"}"#;
const QUAY_HOSTS: &str = "/etc/containerd/certs.d/quay.io/hosts.toml";

fn run_at(ctx: &Context, host: &FakeHost, at: u64) -> Outcome {
    reconcile_at(ctx, host, at).unwrap()
}

fn answering(host: &FakeHost, url: &str) {
    host.http.status(url, 200);
}

fn silent(host: &FakeHost, url: &str) {
    host.http.respond(
        "GET",
        url,
        Err(Error::Timeout(format!("GET {url}: no answer in 2s"))),
    );
}

fn withdrawn_seconds(host: &FakeHost, cache: &str) -> f64 {
    host.metrics
        .counter("cache_withdrawn_seconds", &[("cache", cache)])
}

fn withdrawn_gauge(host: &FakeHost, cache: &str) -> Option<f64> {
    host.metrics.gauge("cache_withdrawn", &[("cache", cache)])
}

/// docker.io's mirror written at T0, then its cache silent from T0 + 1 s and
/// withdrawn at T0 + 11 s.
fn withdrawn_docker_mirror() -> FakeHost {
    let host = host();
    let ctx = context(DOCKER);
    answering(&host, PROBE);
    run_at(&ctx, &host, T0);
    silent(&host, PROBE);
    run_at(&ctx, &host, T0 + SECOND);
    let outcome = run_at(&ctx, &host, T0 + 11 * SECOND);
    assert_eq!(host.files.get(HOSTS), None, "{}", outcome.message);
    host
}

#[test]
fn all_caches_are_probed_at_once() {
    let host = host();
    let caches: Vec<String> = (0..5)
        .map(|i| {
            format!(r#"{{"upstream": "r{i}.example", "endpoint": "http://127.0.0.1:600{i}"}}"#)
        })
        .collect();
    let outcome = run_at(&context(&caches.join(", ")), &host, T0);
    assert_eq!(host.http.batches(), [5]);
    assert_eq!(host.http.sent().len(), 5);
    for i in 0..5 {
        assert!(
            outcome.message.contains(&format!(
                "waiting for r{i}.example (GET http://127.0.0.1:600{i}/v2/: connection refused)"
            )),
            "{}",
            outcome.message
        );
    }
}

#[test]
fn a_cache_that_stops_answering_is_withdrawn_after_withdraw_after() {
    let host = host();
    let ctx = context(DOCKER);
    answering(&host, PROBE);
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(
        outcome.requeue_after_ms, None,
        "nothing to watch while healthy"
    );
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(0.0));

    silent(&host, PROBE);
    let outcome = run_at(&ctx, &host, T0 + SECOND);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(
        outcome.message,
        "1 mirror(s) active; docker.io: mirror via http://127.0.0.1:5000 (failing for 0s, withdrawn after 10s: GET http://127.0.0.1:5000/v2/: no answer in 2s)"
    );
    assert_eq!(outcome.requeue_after_ms, Some(5_000));
    assert!(
        host.files.get(HOSTS).is_some(),
        "kept while failing briefly"
    );

    let outcome = run_at(&ctx, &host, T0 + 8 * SECOND);
    assert_eq!(
        outcome.requeue_after_ms,
        Some(3_000),
        "woken when withdraw-after ends"
    );
    assert!(host.files.get(HOSTS).is_some());

    let outcome = run_at(&ctx, &host, T0 + 11 * SECOND);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "0 mirror(s) active; docker.io: withdrawn 0s (not answering: GET http://127.0.0.1:5000/v2/: no answer in 2s)"
    );
    assert_eq!(outcome.requeue_after_ms, Some(5_000));
    assert_eq!(host.files.get(HOSTS), None);
    assert!(
        host.log_lines()
            .iter()
            .any(|(level, line)| *level == Level::Warn
                && line.starts_with("docker.io: mirror withdrawn from")),
        "{:?}",
        host.log_lines()
    );
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(1.0));

    let outcome = run_at(&ctx, &host, T0 + 23 * SECOND);
    assert!(
        outcome
            .message
            .contains("docker.io: withdrawn 12s (not answering: "),
        "{}",
        outcome.message
    );
    assert_eq!(withdrawn_seconds(&host, "docker.io"), 12.0);
}

#[test]
fn a_withdrawn_mirror_returns_after_its_cache_answers_for_restore_after() {
    let host = withdrawn_docker_mirror();
    let ctx = context(DOCKER);
    answering(&host, PROBE);
    let outcome = run_at(&ctx, &host, T0 + 20 * SECOND);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(host.files.get(HOSTS), None, "one answer is not enough");
    let outcome = run_at(&ctx, &host, T0 + 45 * SECOND);
    assert_eq!(
        outcome.message,
        "0 mirror(s) active; docker.io: withdrawn 34s (answering for 25s, restored after 30s)"
    );
    assert_eq!(outcome.requeue_after_ms, Some(5_000));

    let outcome = run_at(&ctx, &host, T0 + 50 * SECOND);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "1 mirror(s) active; docker.io: mirror via http://127.0.0.1:5000 (healthy)"
    );
    assert_eq!(outcome.requeue_after_ms, None);
    assert!(host.files.get(HOSTS).is_some());
    assert_eq!(
        withdrawn_seconds(&host, "docker.io"),
        39.0,
        "T0 + 11 s to T0 + 50 s"
    );
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(0.0));
    assert!(
        host.log_lines().iter().any(|(_, line)| line.starts_with(
            "docker.io: mirror via http://127.0.0.1:5000 restored in /etc/containerd/certs.d/docker.io/hosts.toml"
        )),
        "{:?}",
        host.log_lines()
    );
}

#[test]
fn a_flapping_cache_never_churns_the_file() {
    let host = host();
    let ctx = context(DOCKER);
    answering(&host, PROBE);
    run_at(&ctx, &host, T0);
    let writes = || {
        host.log_lines()
            .iter()
            .filter(|(_, line)| line.contains("enabled in") || line.contains("withdrawn from"))
            .count()
    };
    // Down 8 s, up, down 8 s, ... for ten minutes, probed every 4 s.
    for (i, at) in (1..150).map(|i| (i, T0 + i * 4 * SECOND)) {
        if i % 3 == 0 {
            answering(&host, PROBE);
        } else {
            silent(&host, PROBE);
        }
        run_at(&ctx, &host, at);
        assert!(host.files.get(HOSTS).is_some(), "probe {i}");
    }
    assert_eq!(writes(), 1, "{:?}", host.log_lines());
}

#[test]
fn each_cache_is_reported_and_one_withdrawn_degrades_the_whole() {
    let host = host();
    let ctx = context(&format!("{DOCKER}, {QUAY}"));
    answering(&host, PROBE);
    answering(&host, "http://127.0.0.1:5001/v2/");
    run_at(&ctx, &host, T0);
    silent(&host, "http://127.0.0.1:5001/v2/");
    run_at(&ctx, &host, T0 + SECOND);
    run_at(&ctx, &host, T0 + 11 * SECOND);
    let outcome = run_at(&ctx, &host, T0 + 23 * SECOND);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "1 mirror(s) active; docker.io: mirror via http://127.0.0.1:5000 (healthy); quay.io: withdrawn 12s (not answering: GET http://127.0.0.1:5001/v2/: no answer in 2s)"
    );
    assert!(host.files.get(HOSTS).is_some());
    assert_eq!(host.files.get(QUAY_HOSTS), None);
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(0.0));
    assert_eq!(withdrawn_gauge(&host, "quay.io"), Some(1.0));
}

#[test]
fn a_restored_mirror_does_not_overwrite_a_file_the_operator_put_in_its_place() {
    let host = withdrawn_docker_mirror();
    let ctx = context(DOCKER);
    host.files.put(HOSTS, b"server = \"https://mine\"\n");
    answering(&host, PROBE);
    run_at(&ctx, &host, T0 + 20 * SECOND);
    let outcome = run_at(&ctx, &host, T0 + 50 * SECOND);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains("docker.io: not overwriting /etc/containerd/certs.d/docker.io/hosts.toml (not written by mirror-gate; set adopt = true"),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.files.get(HOSTS).unwrap(),
        b"server = \"https://mine\"\n"
    );
    assert!(
        host.state.list_keys("").unwrap().is_empty(),
        "no longer ours"
    );
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(0.0));
    // And removing the cache leaves the operator's file alone.
    run_at(&context(""), &host, T0 + 60 * SECOND);
    assert!(host.files.get(HOSTS).is_some());
}

#[test]
fn a_removed_cache_that_was_withdrawn_leaves_what_stands_there() {
    let host = withdrawn_docker_mirror();
    host.files.put(HOSTS, b"operator's own");
    let outcome = run_at(&context(""), &host, T0 + 20 * SECOND);
    assert_eq!(outcome.message, "0 mirror(s) active");
    assert_eq!(host.files.get(HOSTS).unwrap(), b"operator's own");
    assert!(host.state.list_keys("").unwrap().is_empty());
    assert_eq!(withdrawn_gauge(&host, "docker.io"), Some(0.0));
    assert_eq!(
        withdrawn_seconds(&host, "docker.io"),
        9.0,
        "counted to its removal"
    );
}

#[test]
fn a_mirror_recorded_by_0_1_0_is_in_place_and_can_be_withdrawn() {
    let host = host();
    let ctx = context(DOCKER);
    host.files.put(HOSTS, b"written by mirror-gate 0.1.0");
    host.state
        .set(
            "written/docker.io",
            format!(r#"{{"path": "{HOSTS}"}}"#).as_bytes(),
        )
        .unwrap();
    silent(&host, PROBE);
    run_at(&ctx, &host, T0);
    assert!(host.files.get(HOSTS).is_some());
    run_at(&ctx, &host, T0 + 10 * SECOND);
    assert_eq!(host.files.get(HOSTS), None);
}

#[test]
fn a_plan_counts_nothing() {
    let host = withdrawn_docker_mirror();
    let counted = withdrawn_seconds(&host, "docker.io");
    let mut plan = context(DOCKER);
    plan.dry_run = true;
    run_at(&plan, &host, T0 + 60 * SECOND);
    assert_eq!(withdrawn_seconds(&host, "docker.io"), counted);
}

#[test]
fn metrics_the_host_refuses_do_not_fail_the_gate() {
    let host = host();
    // The host's limit: 64 series a plugin.
    for i in 0..64 {
        host.metrics
            .gauge_set("filler", &[("n", &i.to_string())], 0.0)
            .unwrap();
    }
    answering(&host, PROBE);
    let outcome = run_at(&context(DOCKER), &host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert!(host.files.get(HOSTS).is_some());
    assert!(
        host.log_lines()
            .iter()
            .any(|(level, line)| *level == Level::Warn
                && line.starts_with("docker.io: metrics not updated: budget-exhausted")),
        "{:?}",
        host.log_lines()
    );
}
