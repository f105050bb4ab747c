//! ipam-sweeper against the SDK's fakes: a host-local directory in FakeFiles,
//! sandboxes in FakeCri, and the time each pass runs at.

use super::*;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Health, PodSandbox, SandboxState, State};

const NETWORKS: &str = "/var/lib/cni/networks";
const CBR0: &str = "/var/lib/cni/networks/cbr0";
/// An arbitrary wall-clock start, so nothing depends on time zero.
const T0: u64 = 1_700_000_000_000;
const MINUTE: u64 = 60_000;

/// Full sandbox ids, as the runtime lists them.
const POD_A: &str = "3f1c2a9b8d3e5a6b7c8d3f1c2a9b8d3e5a6b7c8d3f1c2a9b8d3e5a6b7c8d0001";
const POD_B: &str = "5b2d3e4f5a6b7c8d9e0f5b2d3e4f5a6b7c8d9e0f5b2d3e4f5a6b7c8d9e0f0002";
const GONE: &str = "9e8d7c6b5a4f3e2d1c0b9e8d7c6b5a4f3e2d1c0b9e8d7c6b5a4f3e2d1c0b0003";

/// A host granting the IPAM directory read-write, CRI reads and the removal
/// of NOTREADY sandboxes (the example configs' grant).
fn host() -> FakeHost {
    let host = FakeHost::named("ipam-sweeper");
    host.files.grant(NETWORKS, true);
    host.cri
        .grant_read()
        .grant_operations(&["remove-pod-sandbox"])
        .grant_states(&["notready"]);
    host
}

/// host-local's allocation of `ip` in cbr0 to sandbox `id` (id, CRLF, interface).
fn allocate(host: &FakeHost, ip: &str, id: &str) {
    host.files
        .put(&format!("{CBR0}/{ip}"), format!("{id}\r\neth0").as_bytes());
}

fn context(config: &str) -> Context {
    Context::new("ipam-sweeper", config)
}

fn pass(host: &FakeHost, now_ms: u64) -> Outcome {
    run(&context("{}"), host, now_ms).unwrap()
}

/// The files left in cbr0.
fn files(host: &FakeHost) -> Vec<String> {
    let prefix = format!("{CBR0}/");
    host.files
        .paths()
        .into_iter()
        .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

fn orphans(host: &FakeHost) -> Orphans {
    let state: &dyn State = &host.state;
    state.get_json(ORPHANS).unwrap().unwrap_or_default()
}

fn minutes(m: u64) -> Option<Duration> {
    Some(Duration::from_millis(m * MINUTE))
}

#[test]
fn the_allocation_of_a_ready_sandbox_is_kept_and_nothing_is_remembered() {
    let host = host();
    host.cri.add_sandbox(POD_A, "uid-a", 0, SandboxState::Ready);
    allocate(&host, "10.85.0.2", POD_A);
    let outcome = pass(&host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "1 allocation(s) in 1 network(s), 1 sandbox(es)"
    );
    assert_eq!(outcome.requeue_after_ms, None);
    assert_eq!(files(&host), ["10.85.0.2"]);
    assert!(host.state.list_keys("").unwrap().is_empty());
}

#[test]
fn an_unknown_sandbox_loses_its_ip_only_after_the_grace() {
    let host = host();
    allocate(&host, "10.85.0.3", GONE);
    let outcome = pass(&host, T0);
    assert_eq!(outcome.health, Health::Progressing);
    assert_eq!(
        outcome.message,
        "1 allocation(s) in 1 network(s), 0 sandbox(es); 1 orphaned IP(s) waiting out the 5m grace: 10.85.0.3 (cbr0, sandbox 9e8d7c6b5a4f gone) 5m left"
    );
    assert_eq!(
        outcome.requeue_after_ms.map(Duration::from_millis),
        minutes(5),
        "run again when the grace ends"
    );
    assert_eq!(orphans(&host)["cbr0/10.85.0.3"].since_ms, T0);

    let outcome = pass(&host, T0 + 3 * MINUTE + 30_000);
    assert!(
        outcome.message.ends_with("1m 30s left"),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.requeue_after_ms, Some(90_000));
    assert_eq!(files(&host), ["10.85.0.3"]);

    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "1 allocation(s) in 1 network(s), 0 sandbox(es); released 1 IP(s): 10.85.0.3 (cbr0, sandbox 9e8d7c6b5a4f gone)"
    );
    assert_eq!(files(&host), Vec::<String>::new());
    assert!(
        host.state.list_keys("").unwrap().is_empty(),
        "bookkeeping dropped"
    );
}

#[test]
fn a_failed_sandbox_listing_releases_nothing() {
    let host = host();
    allocate(&host, "10.85.0.3", GONE);
    pass(&host, T0);
    host.cri.fail_call(
        "list-pod-sandboxes",
        Some(Error::Unavailable("the runtime did not answer".into())),
    );
    let outcome = pass(&host, T0 + 60 * MINUTE);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "released nothing: listing pod sandboxes failed: unavailable: the runtime did not answer"
    );
    assert_eq!(files(&host), ["10.85.0.3"]);
    assert_eq!(orphans(&host)["cbr0/10.85.0.3"].since_ms, T0, "timers kept");

    host.cri.fail_call("list-pod-sandboxes", None);
    let denied = FakeHost::named("ipam-sweeper");
    denied.files.grant(NETWORKS, true);
    allocate(&denied, "10.85.0.3", GONE);
    let outcome = pass(&denied, T0);
    assert!(
        outcome
            .message
            .ends_with("set read = true in [plugins.ipam-sweeper.grants] cri"),
        "{}",
        outcome.message
    );
    assert_eq!(files(&denied), ["10.85.0.3"]);
}

#[test]
fn two_ready_sandboxes_of_one_pod_uid_abort_the_pass_naming_both() {
    let host = host();
    host.cri
        .add_sandbox(POD_A, "uid-a", 0, SandboxState::Ready)
        .add_sandbox(POD_B, "uid-a", 1, SandboxState::Ready);
    allocate(&host, "10.85.0.3", GONE);
    let previous = Orphans::from([(
        "cbr0/10.85.0.3".to_string(),
        sweep::Orphan {
            owner: GONE.into(),
            since_ms: T0,
        },
    )]);
    (&host.state as &dyn State)
        .set_json(ORPHANS, &previous)
        .unwrap();
    let outcome = pass(&host, T0 + 60 * MINUTE);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        format!("aborted, released nothing: pod uid uid-a has READY sandboxes {POD_A}, {POD_B}")
    );
    assert_eq!(files(&host), ["10.85.0.3"]);
    assert_eq!(orphans(&host), previous);
}

#[test]
fn a_not_ready_attempt_loses_its_ip_after_the_grace_and_the_ready_attempt_keeps_its_own() {
    let host = host();
    host.cri
        .add_sandbox(POD_A, "uid-a", 0, SandboxState::NotReady)
        .add_sandbox(POD_B, "uid-a", 1, SandboxState::Ready);
    allocate(&host, "10.85.0.4", POD_A);
    allocate(&host, "10.85.0.5", POD_B);
    let outcome = pass(&host, T0);
    assert!(
        outcome
            .message
            .contains("10.85.0.4 (cbr0, sandbox 3f1c2a9b8d3e not ready) 5m left"),
        "{}",
        outcome.message
    );
    assert_eq!(files(&host), ["10.85.0.4", "10.85.0.5"]);
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert!(
        outcome
            .message
            .contains("; released 1 IP(s): 10.85.0.4 (cbr0, sandbox 3f1c2a9b8d3e not ready);"),
        "{}",
        outcome.message
    );
    assert_eq!(files(&host), ["10.85.0.5"]);
    assert!(
        host.cri.actions().is_empty(),
        "the sandbox itself is left alone"
    );
}

#[test]
fn a_file_naming_no_sandbox_is_an_orphan_whose_timer_restarts_when_an_id_appears() {
    let host = host();
    host.cri.add_sandbox(POD_A, "uid-a", 0, SandboxState::Ready);
    host.files.put(&format!("{CBR0}/10.85.0.6"), b"");
    host.files
        .put(&format!("{CBR0}/10.85.0.7"), b"\x00\xff not an id\nmore");
    let outcome = pass(&host, T0);
    assert!(
        outcome.message.contains(
            "10.85.0.6 (cbr0, no sandbox id in the file) 5m left, 10.85.0.7 (cbr0, no sandbox id in the file) 5m left"
        ),
        "{}",
        outcome.message
    );
    // host-local finishes writing .6 for a sandbox the listing did not have yet.
    allocate(&host, "10.85.0.6", GONE);
    let outcome = pass(&host, T0 + 4 * MINUTE);
    assert!(
        outcome
            .message
            .contains("10.85.0.6 (cbr0, sandbox 9e8d7c6b5a4f gone) 5m left"),
        "{}",
        outcome.message
    );
    assert_eq!(orphans(&host)["cbr0/10.85.0.6"].since_ms, T0 + 4 * MINUTE);
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert!(
        outcome
            .message
            .contains("released 1 IP(s): 10.85.0.7 (cbr0, no sandbox id in the file)"),
        "{}",
        outcome.message
    );
    assert_eq!(files(&host), ["10.85.0.6"]);
}

#[test]
fn an_orphan_owned_again_is_forgotten() {
    let host = host();
    allocate(&host, "10.85.0.8", POD_A);
    pass(&host, T0);
    assert_eq!(orphans(&host).len(), 1);
    host.cri.add_sandbox(POD_A, "uid-a", 0, SandboxState::Ready);
    let outcome = pass(&host, T0 + 10 * MINUTE);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(files(&host), ["10.85.0.8"]);
    assert!(host.state.list_keys("").unwrap().is_empty());
}

#[test]
fn host_locals_own_files_and_other_names_are_never_touched() {
    let host = host();
    for name in [
        "lock",
        "last_reserved_ip.0",
        "last_reserved_ip.1",
        "10.85.0.x",
        "notes.txt",
    ] {
        host.files
            .put(&format!("{CBR0}/{name}"), format!("{GONE}\n").as_bytes());
    }
    host.files
        .put(&format!("{CBR0}/10.85.0.9/inner"), GONE.as_bytes());
    allocate(&host, "10.85.0.10", GONE);
    pass(&host, T0);
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert!(
        outcome.message.contains("released 1 IP(s): 10.85.0.10"),
        "{}",
        outcome.message
    );
    assert_eq!(
        files(&host),
        [
            "10.85.0.9/inner",
            "10.85.0.x",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock",
            "notes.txt"
        ]
    );
}

#[test]
fn ipv6_allocations_and_every_network_are_swept() {
    let host = host();
    host.files
        .put(&format!("{NETWORKS}/v6net/fd00::7"), GONE.as_bytes())
        .put(&format!("{NETWORKS}/v6net/lock"), b"");
    allocate(&host, "10.85.0.11", GONE);
    pass(&host, T0);
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert!(
        outcome.message.starts_with(
            "2 allocation(s) in 2 network(s), 0 sandbox(es); released 2 IP(s): 10.85.0.11 (cbr0, sandbox 9e8d7c6b5a4f gone), fd00::7 (v6net, sandbox 9e8d7c6b5a4f gone)"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(host.files.paths(), [format!("{NETWORKS}/v6net/lock")]);
}

#[test]
fn only_the_configured_networks_are_swept_and_missing_ones_are_said() {
    let host = host();
    host.files
        .put(&format!("{NETWORKS}/other/10.0.0.2"), GONE.as_bytes());
    allocate(&host, "10.85.0.12", GONE);
    let ctx = context(r#"{"networks": ["cbr0", "absent"], "grace": "1m"}"#);
    run(&ctx, &host, T0).unwrap();
    let outcome = run(&ctx, &host, T0 + MINUTE).unwrap();
    assert_eq!(
        outcome.message,
        "1 allocation(s) in 2 network(s), 0 sandbox(es); released 1 IP(s): 10.85.0.12 (cbr0, sandbox 9e8d7c6b5a4f gone); /var/lib/cni/networks/absent does not exist"
    );
    assert_eq!(host.files.paths(), [format!("{NETWORKS}/other/10.0.0.2")]);

    let empty = FakeHost::named("ipam-sweeper");
    empty.files.grant("/var/lib/cni", false);
    empty.cri.grant_read();
    let outcome = pass(&empty, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "0 allocation(s) in 0 network(s), 0 sandbox(es); /var/lib/cni/networks does not exist"
    );
}

#[test]
fn a_dry_run_lists_the_ips_it_would_release() {
    let host = host();
    allocate(&host, "10.85.0.13", GONE);
    allocate(&host, "10.85.0.14", GONE);
    pass(&host, T0);
    let mut ctx = context("{}");
    ctx.dry_run = true;
    let outcome = run(&ctx, &host, T0 + 5 * MINUTE).unwrap();
    assert_eq!(
        outcome.message,
        "2 allocation(s) in 1 network(s), 0 sandbox(es); would release 2 IP(s): 10.85.0.13 (cbr0, sandbox 9e8d7c6b5a4f gone), 10.85.0.14 (cbr0, sandbox 9e8d7c6b5a4f gone)"
    );
}

#[test]
fn a_refused_release_stops_the_pass_and_keeps_the_orphans() {
    let host = FakeHost::named("ipam-sweeper");
    host.files.grant(NETWORKS, false);
    host.cri.grant_read();
    allocate(&host, "10.85.0.15", GONE);
    allocate(&host, "10.85.0.16", GONE);
    pass(&host, T0);
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.ends_with(
            "refused: 10.85.0.15 (cbr0, sandbox 9e8d7c6b5a4f gone): denied: /var/lib/cni/networks/cbr0/10.85.0.15 is granted read-only by { path = \"/var/lib/cni/networks\" }: set write = true on that grant in [plugins.ipam-sweeper.grants] files (1 more not tried)"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(files(&host), ["10.85.0.15", "10.85.0.16"]);
    assert_eq!(orphans(&host)["cbr0/10.85.0.15"].since_ms, T0);
}

#[test]
fn the_owner_is_read_again_before_its_file_is_removed() {
    let host = host();
    allocate(&host, "10.85.0.17", POD_B);
    let allocation = Allocation {
        network: "cbr0".into(),
        ip: "10.85.0.17".into(),
        path: format!("{CBR0}/10.85.0.17"),
        owner: GONE.into(),
    };
    let orphan = Orphaned {
        allocation: &allocation,
        why: sweep::Why::Gone,
        left_ms: 0,
    };
    assert!(!release(&host, &orphan).unwrap(), "handed out again: kept");
    assert_eq!(files(&host), ["10.85.0.17"]);
    allocate(&host, "10.85.0.17", GONE);
    assert!(release(&host, &orphan).unwrap());
    assert!(!release(&host, &orphan).unwrap(), "already gone");
}

#[test]
fn old_not_ready_sandboxes_are_reported_and_removed_only_when_asked() {
    let host = host();
    let created_ns = |ms: u64| i64::try_from(ms * 1_000_000).unwrap();
    host.cri
        .put_sandbox(PodSandbox {
            created_at_ns: created_ns(T0 - 3 * 60 * MINUTE),
            ..PodSandbox::new(POD_A, "uid-a", 0, SandboxState::NotReady)
        })
        .put_sandbox(PodSandbox {
            created_at_ns: created_ns(T0 - 10 * MINUTE),
            ..PodSandbox::new(POD_B, "uid-b", 0, SandboxState::NotReady)
        });
    let outcome = pass(&host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "0 allocation(s) in 0 network(s), 2 sandbox(es); NOTREADY for over 1h (set remove-notready = true to remove them): 3f1c2a9b8d3e (default/pod-uid-a, 3h old)"
    );
    assert!(host.cri.actions().is_empty());

    let ctx = context(r#"{"remove-notready": true, "notready-max-age": "5m"}"#);
    host.cri.fail_call(
        "remove-pod-sandbox",
        Some(Error::BudgetExhausted(
            "budget \"sandbox-removals\" allows 1 of cri.remove-pod-sandbox per 1h".into(),
        )),
    );
    let outcome = run(&ctx, &host, T0).unwrap();
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains(
            "refused: sandbox 3f1c2a9b8d3e (default/pod-uid-a, 3h old): budget-exhausted: budget \"sandbox-removals\" allows 1 of cri.remove-pod-sandbox per 1h (1 more not tried)"
        ),
        "{}",
        outcome.message
    );
    host.cri.fail_call("remove-pod-sandbox", None);
    let outcome = run(&ctx, &host, T0).unwrap();
    assert!(
        outcome.message.contains(
            "removed 2 NOTREADY sandbox(es) older than 5m: 3f1c2a9b8d3e (default/pod-uid-a, 3h old), 5b2d3e4f5a6b (default/pod-uid-b, 10m old)"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(host.cri.sandbox_ids(), Vec::<String>::new());
}

#[test]
fn invalid_config_names_the_key() {
    let host = host();
    for (config, expected) in [
        (
            r#"{"grace": "5 parsecs"}"#,
            "[plugins.ipam-sweeper.config] grace: invalid value: string \"5 parsecs\", expected a duration",
        ),
        (
            r#"{"grace": "0s"}"#,
            "[plugins.ipam-sweeper.config] grace: must be more than 0s",
        ),
        (
            r#"{"networks": "cbr0"}"#,
            "[plugins.ipam-sweeper.config] networks: invalid type: string \"cbr0\", expected a sequence",
        ),
        (
            r#"{"networks": ["../etc"]}"#,
            "[plugins.ipam-sweeper.config] networks: \"../etc\" is not a network name",
        ),
        (
            r#"{"networks": []}"#,
            "[plugins.ipam-sweeper.config] networks: lists no network",
        ),
        (
            r#"{"networks-dir": "cni"}"#,
            "[plugins.ipam-sweeper.config] networks-dir: must be an absolute path",
        ),
        (
            r#"{"remove-notready": "yes"}"#,
            "[plugins.ipam-sweeper.config] remove-notready: invalid type: string \"yes\", expected a boolean",
        ),
        (
            r#"{"grase": "5m"}"#,
            "[plugins.ipam-sweeper.config] grase: unknown field `grase`, expected one of `networks-dir`,",
        ),
    ] {
        let err = run(&context(config), &host, T0).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(err.message().starts_with(expected), "{config}: {err}");
    }
}

#[test]
fn owners_are_the_first_line_trimmed_and_only_plausible_ids() {
    assert_eq!(sweep::owner_of(b"abc123\r\neth0"), "abc123");
    assert_eq!(sweep::owner_of(b"  abc123  \n"), "abc123");
    assert_eq!(sweep::owner_of(b"abc123"), "abc123");
    assert_eq!(sweep::owner_of(b""), "");
    assert_eq!(sweep::owner_of(b"\neth0"), "");
    assert_eq!(sweep::owner_of(b"two words"), "");
    assert_eq!(sweep::owner_of("x".repeat(129).as_bytes()), "");
}

/// The whole pass over 1000 allocations and 200 sandboxes stays cheap: one
/// listing each, one read per file, one state write.
#[test]
fn a_pass_over_a_thousand_allocations_is_cheap() {
    let host = host();
    for pod in 0..200 {
        host.cri.add_sandbox(
            &format!("{pod:064x}"),
            &format!("uid-{pod}"),
            0,
            SandboxState::Ready,
        );
    }
    for n in 0..1000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a55_0000 + n);
        // The first 200 are owned; the other 800 belong to sandboxes long gone.
        allocate(&host, &ip.to_string(), &format!("{:064x}", n));
    }
    let started = std::time::Instant::now();
    let outcome = pass(&host, T0);
    let took = started.elapsed();
    assert!(
        outcome.message.starts_with(
            "1000 allocation(s) in 1 network(s), 200 sandbox(es); 800 orphaned IP(s) waiting out the 5m grace"
        ),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.ends_with(" and 790 more"),
        "{}",
        outcome.message
    );
    assert!(took < Duration::from_millis(500), "a pass took {took:?}");
    let outcome = pass(&host, T0 + 5 * MINUTE);
    assert!(
        outcome.message.contains("released 800 IP(s)"),
        "{}",
        outcome.message
    );
    assert_eq!(files(&host).len(), 200);
}
