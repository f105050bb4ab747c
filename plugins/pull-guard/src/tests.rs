//! pull-guard against the SDK's fakes: containerd's config in FakeFiles, its
//! unit in FakeSystemd, the runtime and its images in FakeCri.

use super::*;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Error, State};

const CONFIG: &str = "/etc/containerd/config.toml";
const UNIT: &str = "containerd.service";
const T0: u64 = 1_700_000_000_000;
const BUSYBOX: &str = "docker.io/library/busybox:1.36";
const TRAINER: &str = "registry.example.com/ml/trainer:2.1";

/// containerd 1.7's config as a node image ships it.
const CONTAINERD_17: &str = r#"# containerd config managed by the node image
version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  # the pause image of this cluster
  sandbox_image = "registry.k8s.io/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
"#;

/// A host granting containerd's config, its restart, CRI reads and pulls of
/// two registries; the runtime is containerd v1.7.13.
fn host() -> FakeHost {
    let host = FakeHost::named("pull-guard");
    host.files.grant("/etc/containerd", true);
    host.systemd.grant(&[UNIT], &["restart"]);
    host.cri
        .grant_read()
        .grant_operations(&["pull-image"])
        .grant_images(&["docker.io/library/*", "registry.example.com/ml/*"]);
    host
}

fn context(config: &str) -> Context {
    Context::new("pull-guard", config)
}

fn run_at(ctx: &Context, host: &FakeHost, now_ms: u64) -> Outcome {
    run(ctx, host, &|| now_ms).unwrap()
}

fn config_file(host: &FakeHost) -> String {
    String::from_utf8(host.files.get(CONFIG).unwrap()).unwrap()
}

fn pulls(host: &FakeHost) -> usize {
    host.cri
        .actions()
        .iter()
        .filter(|a| a.starts_with("pull-image "))
        .count()
}

fn stored_failures(host: &FakeHost) -> Failures {
    let state: &dyn State = &host.state;
    state.get_json(FAILURES).unwrap().unwrap_or_default()
}

#[test]
fn containerd_17_gets_the_setting_in_its_cri_table_and_one_restart() {
    let host = host();
    host.files.put(CONFIG, CONTAINERD_17.as_bytes());
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "set image_pull_progress_timeout = \"10m0s\" in /etc/containerd/config.toml (was unset); restarted containerd.service"
    );
    assert_eq!(
        config_file(&host),
        CONTAINERD_17.replace(
            "  sandbox_image = \"registry.k8s.io/pause:3.9\"\n",
            "  sandbox_image = \"registry.k8s.io/pause:3.9\"\n  image_pull_progress_timeout = \"10m0s\"\n"
        ),
        "comments and layout kept"
    );
    assert_eq!(host.systemd.actions(), ["restart containerd.service"]);
    assert!(
        host.state.list_keys("").unwrap().is_empty(),
        "no restart owed"
    );

    let outcome = run_at(&context("{}"), &host, T0 + 1000);
    assert_eq!(
        outcome.message,
        "image_pull_progress_timeout = \"10m0s\" in /etc/containerd/config.toml is at least 10m"
    );
    assert_eq!(host.systemd.actions().len(), 1, "no second restart");
}

#[test]
fn a_config_already_at_least_the_value_is_neither_written_nor_restarted() {
    for value in ["15m0s", "10m", "1h", "0s", "0"] {
        let host = host();
        let text = format!(
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  image_pull_progress_timeout = \"{value}\" # raised for big images\n"
        );
        // Read-only: a write would be denied, so none is attempted.
        let host_ro = FakeHost::named("pull-guard");
        host_ro
            .files
            .grant("/etc/containerd", false)
            .put(CONFIG, text.as_bytes());
        host_ro.cri.grant_read();
        let outcome = run_at(&context("{}"), &host_ro, T0);
        assert_eq!(
            outcome.health,
            Health::Healthy,
            "{value}: {}",
            outcome.message
        );
        assert_eq!(
            outcome.message,
            format!(
                "image_pull_progress_timeout = \"{value}\" in /etc/containerd/config.toml is at least 10m"
            )
        );
        assert!(host_ro.systemd.actions().is_empty());
        host.files.put(CONFIG, text.as_bytes());
        run_at(&context("{}"), &host, T0);
        assert_eq!(config_file(&host), text, "{value} never lowered");
    }
}

#[test]
fn a_lower_value_is_raised_keeping_its_comment() {
    let host = host();
    host.files.put(
        CONFIG,
        b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  image_pull_progress_timeout = \"5m0s\" # vendor default\n",
    );
    let ctx = context(r#"{"progress-timeout": "1h30m"}"#);
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(
        outcome.message,
        "raised image_pull_progress_timeout from 5m0s to 1h30m0s in /etc/containerd/config.toml; restarted containerd.service"
    );
    assert_eq!(
        config_file(&host),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  image_pull_progress_timeout = \"1h30m0s\" # vendor default\n"
    );
}

#[test]
fn containerd_2_edits_the_table_its_config_version_names() {
    let host = host();
    host.cri.set_version("containerd", "v2.0.2");
    host.files.put(
        CONFIG,
        b"version = 3\n\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'overlayfs'\n",
    );
    run_at(&context("{}"), &host, T0);
    assert_eq!(
        config_file(&host),
        "version = 3\n\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'overlayfs'\n  image_pull_progress_timeout = \"10m0s\"\n"
    );

    // containerd 2.x still reads (and migrates) a version 2 file.
    host.files.put(
        CONFIG,
        b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n",
    );
    run_at(&context("{}"), &host, T0);
    assert_eq!(
        config_file(&host),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = \"10m0s\"\n"
    );
    assert_eq!(host.systemd.actions().len(), 2);
}

#[test]
fn a_missing_or_empty_config_gets_the_version_of_the_runtime() {
    let host = host();
    run_at(&context("{}"), &host, T0);
    assert_eq!(
        config_file(&host),
        "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = \"10m0s\"\n"
    );
    let host = self::host();
    host.cri.set_version("containerd", "2.1.0");
    host.files.put(CONFIG, b"# nothing yet\n");
    run_at(&context("{}"), &host, T0);
    assert_eq!(
        config_file(&host),
        "# nothing yet\nversion = 3\n\n[plugins.\"io.containerd.cri.v1.images\"]\nimage_pull_progress_timeout = \"10m0s\"\n"
    );
}

#[test]
fn containerd_16_has_no_such_setting_and_the_pre_pulls_still_run() {
    let host = host();
    host.cri.set_version("containerd", "1.6.20");
    let outcome = run_at(
        &context(&format!(r#"{{"images": ["{BUSYBOX}"]}}"#)),
        &host,
        T0,
    );
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "containerd 1.6.20 has no image_pull_progress_timeout setting (it came with 1.7): relying on pre-pulls; images: docker.io/library/busybox:1.36 pulled in 0s"
    );
    assert_eq!(
        host.files.paths(),
        Vec::<String>::new(),
        "no config written"
    );
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn other_runtimes_and_unknown_versions_are_not_edited() {
    let host = host();
    host.files.put(CONFIG, CONTAINERD_17.as_bytes());
    host.cri.set_version("cri-o", "1.29.1");
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert_eq!(
        outcome.message,
        "cri-o 1.29.1 is not handled (only containerd's image_pull_progress_timeout is): relying on pre-pulls"
    );
    host.cri.set_version("containerd", "main-dev");
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(
        outcome.message,
        "containerd version \"main-dev\" is not understood: set runtime-config.version (\"1.7\", \"2.0\")"
    );
    assert_eq!(config_file(&host), CONTAINERD_17);
    assert!(host.systemd.actions().is_empty());
}

#[test]
fn an_explicit_version_skips_asking_the_runtime() {
    let host = host();
    host.cri.set_version("containerd", "1.6.20").fail_call(
        "version",
        Some(Error::Unavailable("the runtime did not answer".into())),
    );
    host.files.put(CONFIG, CONTAINERD_17.as_bytes());
    let ctx = context(r#"{"runtime-config": {"version": "1.7"}}"#);
    let outcome = run_at(&ctx, &host, T0);
    assert!(
        outcome
            .message
            .starts_with("set image_pull_progress_timeout"),
        "{}",
        outcome.message
    );

    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert_eq!(
        outcome.message,
        "image_pull_progress_timeout not ensured: unavailable: the runtime did not answer"
    );
}

#[test]
fn configs_pull_guard_cannot_read_right_are_left_alone() {
    for (text, why) in [
        (
            "root = \"/var/lib/containerd\"\n",
            "has no version key (config version 1)",
        ),
        (
            "version = 3\n",
            "is config version 3, which needs containerd 2.0 or later",
        ),
        (
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = \"soon\"\n",
            "has image_pull_progress_timeout = \"soon\", which is not a duration",
        ),
        (
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = 300\n",
            "has a image_pull_progress_timeout that is not a string",
        ),
        (
            "version = 2\nplugins = 1\n",
            "has a plugins that is not a table",
        ),
        ("version = [\n", "is not valid TOML"),
    ] {
        let host = host();
        host.files.put(CONFIG, text.as_bytes());
        let outcome = run_at(&context("{}"), &host, T0);
        assert_eq!(outcome.health, Health::Degraded, "{text}");
        assert!(
            outcome.message.starts_with(&format!(
                "image_pull_progress_timeout not ensured: /etc/containerd/config.toml {why}"
            )),
            "{text}: {}",
            outcome.message
        );
        assert_eq!(config_file(&host), text);
        assert!(host.systemd.actions().is_empty());
    }
}

#[test]
fn a_refused_restart_is_owed_and_done_next_time_without_another_write() {
    let host = FakeHost::named("pull-guard");
    host.files
        .grant("/etc/containerd", true)
        .put(CONFIG, CONTAINERD_17.as_bytes());
    host.cri.grant_read();
    host.systemd.grant(&[UNIT], &[]);
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.ends_with(
            "(was unset); containerd.service not restarted yet: denied: systemd restart of containerd.service is not granted: add \"restart\" to operations in [plugins.pull-guard.grants] systemd"
        ),
        "{}",
        outcome.message
    );
    let written = config_file(&host);
    host.systemd.grant(&[UNIT], &["restart"]);
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert!(
        outcome
            .message
            .ends_with("is at least 10m; restarted containerd.service"),
        "{}",
        outcome.message
    );
    assert_eq!(config_file(&host), written);
    run_at(&context("{}"), &host, T0);
    assert_eq!(host.systemd.actions(), ["restart containerd.service"]);
}

#[test]
fn a_failed_restart_job_is_retried() {
    let host = host();
    host.files.put(CONFIG, CONTAINERD_17.as_bytes());
    host.systemd.job_result(UNIT, JobResult::Failed);
    let outcome = run_at(&context("{}"), &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome
            .message
            .ends_with("; restart of containerd.service ended Failed, to be retried"),
        "{}",
        outcome.message
    );
    host.systemd.job_result(UNIT, JobResult::Done);
    assert_eq!(run_at(&context("{}"), &host, T0).health, Health::Healthy);
    assert_eq!(host.systemd.actions().len(), 2);
}

#[test]
fn a_dry_run_says_what_it_would_do() {
    let host = host();
    host.files.put(
        CONFIG,
        b"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = \"1m0s\"\n",
    );
    let mut ctx = context("{}");
    ctx.dry_run = true;
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(
        outcome.message,
        "would raise image_pull_progress_timeout from 1m0s to 10m0s in /etc/containerd/config.toml; would restart containerd.service"
    );
}

#[test]
fn a_dry_run_plans_pulls_without_claiming_them() {
    let host = host();
    host.cri.set_version("containerd", "1.6.20");
    let mut ctx = context(r#"{"images": ["busybox:1.36"]}"#);
    ctx.dry_run = true;
    let outcome = run_at(&ctx, &host, T0);
    assert!(
        outcome
            .message
            .ends_with("images: busybox:1.36 would be pulled"),
        "{}",
        outcome.message
    );
}

#[test]
fn versions_are_read_as_cri_reports_them() {
    assert_eq!(runtime::release("1.6.20"), Some((1, 6)));
    assert_eq!(runtime::release("v1.7.13"), Some((1, 7)));
    assert_eq!(runtime::release("2.0.0-rc.1"), Some((2, 0)));
    assert_eq!(runtime::release("1.7.13-k3s1"), Some((1, 7)));
    assert_eq!(runtime::release("1.7"), Some((1, 7)));
    assert_eq!(runtime::release("v2"), None);
    assert_eq!(runtime::release("auto"), None);
    assert_eq!(
        runtime::support("containerd", "v1.7.0"),
        Support::Setting((1, 7))
    );
    assert_eq!(
        runtime::support("containerd", "2.0.0"),
        Support::Setting((2, 0))
    );
    assert!(matches!(
        runtime::support("containerd", "1.6.9"),
        Support::Unsupported(_)
    ));
}

#[test]
fn go_durations_are_parsed_and_written_as_containerd_does() {
    let secs = Duration::from_secs;
    for (text, value) in [
        ("5m0s", Some(secs(300))),
        ("1h30m", Some(secs(5400))),
        ("1.5s", Some(Duration::from_millis(1500))),
        ("300ms", Some(Duration::from_millis(300))),
        ("0", Some(Duration::ZERO)),
        ("0s", Some(Duration::ZERO)),
        ("+2m", Some(secs(120))),
        ("-5m", None),
        ("5", None),
        ("", None),
        ("5d", None),
        ("1.2.3s", None),
        ("m", None),
    ] {
        assert_eq!(runtime::go_duration(text), value, "{text}");
    }
    assert_eq!(runtime::go_format(secs(600)), "10m0s");
    assert_eq!(runtime::go_format(secs(3600)), "1h0m0s");
    assert_eq!(runtime::go_format(secs(45)), "45s");
    assert_eq!(
        runtime::go_format(Duration::from_millis(1500)),
        "2s",
        "rounded up"
    );
}

#[test]
fn a_present_image_is_not_pulled_and_an_absent_one_is() {
    let host = host();
    host.files.put(CONFIG, CONTAINERD_17.as_bytes());
    host.cri.add_image("busybox:1.36");
    let ctx = context(&format!(r#"{{"images": ["busybox:1.36", "{TRAINER}"]}}"#));
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(outcome.health, Health::Healthy);
    assert!(
        outcome.message.ends_with(
            "; images: busybox:1.36 present, registry.example.com/ml/trainer:2.1 pulled in 0s"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(
        host.cri.actions(),
        ["pull-image registry.example.com/ml/trainer:2.1"]
    );
    let outcome = run_at(&ctx, &host, T0);
    assert!(
        outcome.message.ends_with(
            "; images: busybox:1.36 present, registry.example.com/ml/trainer:2.1 present"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(pulls(&host), 1);
}

#[test]
fn each_pull_has_the_plugins_own_deadline() {
    let host = host();
    host.cri.pull_takes(TRAINER, Duration::from_secs(20 * 60));
    let ctx = context(&format!(
        r#"{{"images": ["{TRAINER}"], "runtime-config": {{"version": "1.6"}}}}"#
    ));
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.ends_with(
            "images: registry.example.com/ml/trainer:2.1 failed (attempt 1, next try in 30s: timeout: cri pull-image did not finish within 900s)"
        ),
        "{}",
        outcome.message
    );
    let ctx = context(&format!(
        r#"{{"images": ["{TRAINER}"], "runtime-config": {{"version": "1.6"}}, "pull-timeout": "30m"}}"#
    ));
    let outcome = run_at(&ctx, &host, T0 + 30_000);
    assert!(
        outcome.message.ends_with("trainer:2.1 pulled in 0s"),
        "{}",
        outcome.message
    );
    assert!(stored_failures(&host).is_empty());
}

#[test]
fn failed_pulls_back_off_doubling_up_to_the_cap() {
    let host = host();
    host.cri.fail_pull(
        BUSYBOX,
        Some(Error::Unavailable(
            "registry-1.docker.io: connection refused".into(),
        )),
    );
    let ctx = context(&format!(
        r#"{{"images": ["{BUSYBOX}"], "runtime-config": {{"version": "1.6"}}, "retry-backoff": {{"initial": "30s", "max": "2m"}}}}"#
    ));
    let mut now = T0;
    for (attempt, wait) in [(1, "30s"), (2, "1m"), (3, "2m"), (4, "2m")] {
        let outcome = run_at(&ctx, &host, now);
        assert_eq!(outcome.health, Health::Degraded);
        assert!(
            outcome.message.ends_with(&format!(
                "images: docker.io/library/busybox:1.36 failed (attempt {attempt}, next try in {wait}: unavailable: registry-1.docker.io: connection refused)"
            )),
            "{}",
            outcome.message
        );
        let wait = humantime::parse_duration(wait).unwrap();
        assert_eq!(
            outcome.requeue_after_ms.map(Duration::from_millis),
            Some(wait)
        );
        assert_eq!(pulls(&host), attempt);

        // Not tried again before its time.
        let outcome = run_at(&ctx, &host, now + wait.as_millis() as u64 - 10_000);
        assert!(
            outcome.message.contains("next try in 10s"),
            "{}",
            outcome.message
        );
        assert_eq!(pulls(&host), attempt);
        now += wait.as_millis() as u64;
    }
    assert_eq!(stored_failures(&host)[BUSYBOX].attempts, 4);
    host.cri.fail_pull(BUSYBOX, None);
    let outcome = run_at(&ctx, &host, now);
    assert_eq!(outcome.health, Health::Healthy);
    assert!(
        host.state.list_keys("").unwrap().is_empty(),
        "failures forgotten once pulled"
    );
}

#[test]
fn failures_of_images_no_longer_listed_are_forgotten() {
    let host = host();
    host.cri
        .fail_pull(BUSYBOX, Some(Error::Other("manifest unknown".into())));
    let listed = |images: &str| {
        context(&format!(
            r#"{{"images": [{images}], "runtime-config": {{"version": "1.6"}}}}"#
        ))
    };
    run_at(&listed(&format!("\"{BUSYBOX}\", \"{TRAINER}\"")), &host, T0);
    assert_eq!(stored_failures(&host).len(), 1);
    run_at(&listed(&format!("\"{TRAINER}\"")), &host, T0 + 1000);
    assert!(host.state.list_keys("").unwrap().is_empty());
}

#[test]
fn ungranted_images_and_unknown_presence_are_reported_not_counted() {
    let host = host();
    host.cri.add_image(BUSYBOX);
    let ctx = context(
        r#"{"images": ["quay.io/evil/miner:1", "docker.io/library/busybox:1.36"], "runtime-config": {"version": "1.6"}}"#,
    );
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.ends_with(
            "images: quay.io/evil/miner:1 not pulled: denied: no cri images pattern covers quay.io/evil/miner:1: add \"quay.io/evil/miner:1\" (or a pattern such as \"quay.io/evil/miner:*\") to images in [plugins.pull-guard.grants] cri, docker.io/library/busybox:1.36 present"
        ),
        "{}",
        outcome.message
    );
    assert!(stored_failures(&host).is_empty());
    host.cri.fail_call(
        "image-status",
        Some(Error::Unavailable("the runtime did not answer".into())),
    );
    let outcome = run_at(&ctx, &host, T0);
    assert!(
        outcome.message.contains(
            "images: quay.io/evil/miner:1 not checked: unavailable: the runtime did not answer"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(pulls(&host), 0);
}

#[test]
fn pulls_that_no_longer_fit_the_reconciles_deadline_wait_for_the_next() {
    let host = host();
    let ctx = context(&format!(
        r#"{{"images": ["{TRAINER}", "{BUSYBOX}", "nginx:1.27"], "runtime-config": {{"version": "1.6"}}}}"#
    ));
    // The limit is below pull-timeout: the first pull is refused, naming it.
    host.cri.set_time_left(Some(Duration::from_secs(60)));
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(outcome.health, Health::Degraded);
    assert!(
        outcome.message.contains(
            "registry.example.com/ml/trainer:2.1 not pulled: invalid: cri pull-image of registry.example.com/ml/trainer:2.1 with a timeout of 900s does not fit"
        ),
        "{}",
        outcome.message
    );
    assert!(
        outcome.message.ends_with(
            "docker.io/library/busybox:1.36 not tried (registry.example.com/ml/trainer:2.1 was refused), nginx:1.27 not tried (registry.example.com/ml/trainer:2.1 was refused)"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.requeue_after_ms, None);
    assert_eq!(pulls(&host), 0);

    // A limit above pull-timeout, but the first pull uses most of it.
    host.cri
        .set_time_left(Some(Duration::from_secs(20 * 60)))
        .pull_takes(TRAINER, Duration::from_secs(10 * 60));
    let outcome = run_at(&ctx, &host, T0);
    assert_eq!(outcome.health, Health::Progressing);
    assert!(
        outcome.message.ends_with(
            "trainer:2.1 pulled in 0s, docker.io/library/busybox:1.36 left for the next reconcile (deadline near), nginx:1.27 left for the next reconcile (deadline near)"
        ),
        "{}",
        outcome.message
    );
    assert_eq!(outcome.requeue_after_ms, Some(1_000));
    host.cri.set_time_left(Some(Duration::from_secs(20 * 60)));
    let outcome = run_at(&ctx, &host, T0 + 1000);
    assert_eq!(outcome.health, Health::Healthy, "{}", outcome.message);
    assert_eq!(pulls(&host), 3);
}

#[test]
fn a_budget_refusal_stops_the_pulls_of_this_reconcile() {
    let host = host();
    host.cri.fail_call(
        "pull-image",
        Some(Error::BudgetExhausted(
            "budget \"pulls\" allows 2 of cri.pull-image per 1h".into(),
        )),
    );
    let ctx = context(&format!(
        r#"{{"images": ["{TRAINER}", "{BUSYBOX}"], "runtime-config": {{"version": "1.6"}}}}"#
    ));
    let outcome = run_at(&ctx, &host, T0);
    assert!(
        outcome.message.ends_with(
            "images: registry.example.com/ml/trainer:2.1 not pulled: budget-exhausted: budget \"pulls\" allows 2 of cri.pull-image per 1h, docker.io/library/busybox:1.36 not tried (registry.example.com/ml/trainer:2.1 was refused)"
        ),
        "{}",
        outcome.message
    );
    assert!(
        stored_failures(&host).is_empty(),
        "a budget is no failed attempt"
    );
}

#[test]
fn invalid_config_names_the_key() {
    let host = host();
    for (config, expected) in [
        (
            r#"{"progress-timeout": "10 minutes please"}"#,
            "[plugins.pull-guard.config] progress-timeout: invalid value: string \"10 minutes please\", expected a duration",
        ),
        (
            r#"{"progress-timeout": "10ms"}"#,
            "[plugins.pull-guard.config] progress-timeout: must be at least 1s",
        ),
        (
            r#"{"runtime-config": {"version": "latest"}}"#,
            "[plugins.pull-guard.config] runtime-config.version: \"latest\" is neither \"auto\" nor a containerd version",
        ),
        (
            r#"{"runtime-config": {"path": "config.toml"}}"#,
            "[plugins.pull-guard.config] runtime-config.path: must be an absolute path",
        ),
        (
            r#"{"runtime-config": {"unit": "a b"}}"#,
            "[plugins.pull-guard.config] runtime-config.unit: must be a unit name",
        ),
        (
            r#"{"runtime-config": {"socket": "/run/x"}}"#,
            "[plugins.pull-guard.config] runtime-config.socket: unknown field `socket`",
        ),
        (
            r#"{"images": ["busybox", "Bad Image"]}"#,
            "[plugins.pull-guard.config] images[1]: \"Bad Image\" is not an image reference",
        ),
        (
            r#"{"images": ["busybox", "docker.io/library/busybox:latest"]}"#,
            "[plugins.pull-guard.config] images[1]: \"docker.io/library/busybox:latest\" is images[0] again",
        ),
        (
            r#"{"pull-timeout": "0s"}"#,
            "[plugins.pull-guard.config] pull-timeout: must be more than 0s",
        ),
        (
            r#"{"retry-backoff": {"initial": "5m", "max": "1m"}}"#,
            "[plugins.pull-guard.config] retry-backoff.max: must be at least retry-backoff.initial",
        ),
        (
            r#"{"retry-backoff": {"initial": 30}}"#,
            "[plugins.pull-guard.config] retry-backoff.initial: invalid type: integer `30`, expected a duration",
        ),
    ] {
        let err = run(&context(config), &host, &|| T0).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(err.message().starts_with(expected), "{config}: {err}");
    }
}

#[test]
fn dotted_keys_inline_tables_and_subtables_are_edited_where_they_are() {
    for (text, edited) in [
        (
            "version = 2\nplugins.\"io.containerd.grpc.v1.cri\".sandbox_image = \"p:3.9\"\n",
            "version = 2\nplugins.\"io.containerd.grpc.v1.cri\".sandbox_image = \"p:3.9\"\nplugins.\"io.containerd.grpc.v1.cri\".image_pull_progress_timeout = \"10m0s\"\n",
        ),
        (
            "version = 2\nplugins = { \"io.containerd.grpc.v1.cri\" = { sandbox_image = \"p:3.9\" } }\n",
            "version = 2\nplugins = { \"io.containerd.grpc.v1.cri\" = { sandbox_image = \"p:3.9\" , image_pull_progress_timeout = \"10m0s\" } }\n",
        ),
        (
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"x\"\n",
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\nimage_pull_progress_timeout = \"10m0s\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nsnapshotter = \"x\"\n",
        ),
    ] {
        match runtime::raise(text, (1, 7), Duration::from_secs(600)) {
            Ok(Edit::Raised { text, .. }) => assert_eq!(text, edited),
            other => panic!("{text}: {other:?}"),
        }
    }
}
