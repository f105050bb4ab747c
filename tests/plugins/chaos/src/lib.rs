//! chaos: a test-only plugin that misbehaves on request, so end-to-end tests can
//! prove the host contains it. Its config picks what one reconcile does:
//!
//! - `{"mode": "noop"}`: healthy, calls nothing (host overhead benchmarks).
//! - `{"mode": "ok"}`: healthy, and counts its runs in `state` ("runs").
//! - `{"mode": "loop"}`: spins forever (the deadline must stop it).
//! - `{"mode": "alloc"}`: allocates without bound (the memory limit must stop it).
//! - `{"mode": "panic"}`: panics with a message.
//! - `{"mode": "fail"}`: returns an error.
//! - `{"mode": "burst", "dir": D, "files": N, "size": S}`: rewrites N files of S
//!   bytes, each all one letter (the run count), then counts the run in `state`.
//! - `{"mode": "disrupt", "path": P}`: writes its count of such writes to P, a
//!   mutation a fleet class may cover; a refusal is a degraded outcome, not a
//!   failure, so the next run (not a backoff) asks again (tests/e2e/fleet.rs).
//! - `{"mode": "read", "path": P}` / `{"mode": "write", "path": P, "content": C}`:
//!   one file operation; its error, if any, is the reconcile's error.
//! - `{"mode": "remove", "paths": [P, ...]}`: removes each path, going on after
//!   an error; degraded, naming every error, when any failed.
//! - `{"mode": "post", "url": U, "timeout-ms": T}`: one HTTP POST (a mutation);
//!   its error, if any, is the reconcile's error.
//!
//! Hostile modes, each an attack the host must contain (tests/e2e/hostile.rs):
//! - `{"mode": "cloud-calls", "calls": [...]}`: cloud calls with any identifiers,
//!   ungranted operations and instances of other owners (see `cloud.rs`).
//! - `{"mode": "write", "path": P, "content": C, "file-mode": M}`: `write` with a mode
//!   (for example setuid 0o4755).
//! - `{"mode": "get", "url": U}`: one GET; its error is the reconcile's error.
//! - `{"mode": "flood", "dir": D, "count": N, "name-len": L}`: N writes of distinct
//!   files with names L bytes long; the outcome counts the errors by kind.
//! - `{"mode": "state-flood", "count": N, "size": S}`: N state values of S bytes.
//! - `{"mode": "log-flood", "lines": N, "text": T}`: N log lines of text T.
//! - `{"mode": "log", "message": M}`: one log line (newlines and escapes included).
//! - `{"mode": "requeue", "ms": N}`: healthy, asking to run again after N ms.
//! - `{"mode": "outcome", "text": T, "repeat": N, "fail": F, "requeue-ms": R}`:
//!   T repeated N times (default 1) as the outcome message (degraded), or as
//!   the error when F is true; asks to run again after R ms when given.
//!
//! Node modes (tests/e2e/hostile_node.rs), each healthy whatever the host refuses:
//! - `{"mode": "cri-sandboxes", "op": "stop"|"remove", "ids": [ID, ...]}`: stops or
//!   removes each id (prefixes included); "ID: ok; ID: <error>; ...".
//! - `{"mode": "metric-names", "gauges": [N, ...], "counters": [N, ...]}`: sets each
//!   gauge to 1 and adds 1 to each counter; "N: ok; N: <error kind>; ...".
//! - `{"mode": "unit-files", "op": "enable"|"disable", "units": [U, ...]}`: one enable
//!   or disable of the units; "ok" or the error's text.
//! - `{"mode": "daemon-reloads", "count": N}`: N daemon-reloads; as the kube load
//!   modes, "N ok, errors: {kind: count}; first: TEXT".
//!
//! Logs modes (tests/e2e/logs.rs):
//! - `{"mode": "condition", "op": "set"|"clear"|"list", "condition": C,
//!   "reason": R, "message": M, "ttl": N?}`: one conditions call; healthy "ok"
//!   (a list logs "held C=true(R), ..."), or degraded "KIND message".
//! - `{"mode": "log-matches"}`: takes the watch rules' matches and logs one
//!   line per entry, "matched RULE: MESSAGE", and per rule "missed RULE: N,
//!   gap G"; healthy "N matched; triggers: kind:subject, ...".
//! - `{"mode": "logs-read", "source": S, "since": C?, "max": N, "units": [...]}`:
//!   one `read`; healthy "read N: MESSAGE | ... cursor C", or the error's
//!   kind and message.
//!
//! Kubernetes modes (tests/e2e of the `kube` capability):
//! - `{"mode": "kube-label", "node": N, "key": K, "value": V}`: merge-patches
//!   Node N's label K=V, then emits a Normal Event "LabelApplied" on N; healthy
//!   "labeled N K=V", or degraded with the first error's text.
//! - `{"mode": "kube-list", "api-version": A, "kind": K, "namespace": NS?,
//!   "label-selector": S?}`: one list; healthy "listed N K: a, b" (names
//!   sorted), or degraded with the error's text.
//! - `{"mode": "kube-watch"}`: calls nothing; healthy "triggers: kind:subject, ..."
//!   (a trigger without a subject is its kind alone).
//!
//! Hostile kube calls (tests/e2e/hostile_kube.rs):
//! - `{"mode": "kube-call", "op": "get"|"list"|"create"|"patch"|"delete"|"emit-event",
//!   "api-version": A, "kind": K, "namespace": NS?, "name": N?, "patch-type":
//!   "merge"|"json"|"apply"?, "body": JSON text?, "label-selector": S?,
//!   "field-selector": S?}`: one call exactly as given; healthy "ok" (a list:
//!   "listed a, b", names sorted), or degraded with the error's text.
//!
//! - `{"mode": "drain", "deadline-ms": N, "uncordon-on-give-up": B}`: drains its
//!   Node (tests/e2e/drain.rs): healthy "drained: evicted a, b; skipped c: why",
//!   degraded "gave up (uncordoned: B): remaining a: why; evicted ...", or
//!   degraded with the error's kind and text.
//!
//! Kubernetes load modes (tests/e2e/hostile_kube_load.rs), each healthy
//! "N ok, errors: {kind: count}; first: TEXT" whatever the host refuses:
//! - `{"mode": "kube-list-many", "api-version": A, "kind": K, "namespace": NS?,
//!   "count": N}`: N lists, the i-th with the label selector `!chaos-i` (distinct
//!   selectors that all match every unlabelled object: one watch cache each).
//! - `{"mode": "kube-get-many", "api-version": A, "kind": K, "namespace": NS?,
//!   "name": X, "count": N, "distinct-kinds": B?}`: N gets of X; with
//!   distinct-kinds, the i-th asks for kind `K<i>` (kinds the server lacks).
//! - `{"mode": "kube-event-flood", "api-version": A, "kind": K, "namespace": NS?,
//!   "name": X, "count": N, "requeue-ms": R}`: N Warning Events "Flood" about X,
//!   each with a message never seen before, then asks to run again after R ms.
//! - `{"mode": "condition-flood", "op": "flip"|"message"|"renew", "condition": C,
//!   "count": N, "ttl": T?, "requeue-ms": R}`: N conditions calls on C, then
//!   asks to run again after R ms: "flip" sets and clears in turn, "message"
//!   sets with a new message each call, "renew" sets the same report
//!   (tests/e2e/hostile_conditions.rs).

mod cloud;

use serde::Deserialize;
use tend_sdk::{
    Context, Error, EventType, Host, ListParams, ObjectKey, Outcome, PatchType, Plugin, PluginInfo,
    Request, Result,
};

#[derive(Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
enum Mode {
    #[serde(rename_all = "kebab-case")]
    Condition {
        op: String,
        #[serde(default)]
        condition: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        ttl: Option<u32>,
    },
    LogMatches,
    #[serde(rename_all = "kebab-case")]
    Drain {
        deadline_ms: u64,
        #[serde(default)]
        uncordon_on_give_up: bool,
    },
    #[serde(rename_all = "kebab-case")]
    LogsRead {
        source: String,
        #[serde(default)]
        since: Option<String>,
        max: u32,
        #[serde(default)]
        units: Vec<String>,
    },
    Noop,
    Ok,
    Loop,
    Alloc,
    Panic,
    Fail,
    Burst {
        dir: String,
        files: u32,
        size: usize,
    },
    Disrupt {
        path: String,
    },
    Read {
        path: String,
    },
    #[serde(rename_all = "kebab-case")]
    Write {
        path: String,
        content: String,
        #[serde(default)]
        file_mode: Option<u32>,
    },
    Get {
        url: String,
    },
    #[serde(rename_all = "kebab-case")]
    Flood {
        dir: String,
        count: u32,
        name_len: usize,
    },
    StateFlood {
        count: u32,
        size: usize,
    },
    LogFlood {
        lines: u32,
        text: String,
    },
    Log {
        message: String,
    },
    Requeue {
        ms: u64,
    },
    /// A chosen outcome message (or error), possibly huge.
    #[serde(rename_all = "kebab-case")]
    Outcome {
        text: String,
        #[serde(default)]
        repeat: Option<usize>,
        #[serde(default)]
        fail: bool,
        #[serde(default)]
        requeue_ms: Option<u64>,
    },

    Remove {
        paths: Vec<String>,
    },
    #[serde(rename_all = "kebab-case")]
    Post {
        url: String,
        timeout_ms: u64,
    },
    /// Record `count` distinct gauge series.
    MetricsFlood {
        count: u32,
    },
    /// Stop or remove each sandbox id.
    CriSandboxes {
        op: String,
        ids: Vec<String>,
    },
    /// Gauges and counters of the given names.
    MetricNames {
        #[serde(default)]
        gauges: Vec<String>,
        #[serde(default)]
        counters: Vec<String>,
    },
    /// One enable or disable of `units`.
    UnitFiles {
        op: String,
        units: Vec<String>,
    },
    /// `count` daemon-reloads.
    DaemonReloads {
        count: u32,
    },
    /// `count` GETs of `url` in one host `send-all` call (the raw import:
    /// the SDK would split it into batches the host accepts).
    SendAll {
        url: String,
        count: usize,
    },
    /// List pod sandboxes, then pull `image`.
    #[serde(rename_all = "kebab-case")]
    Pull {
        image: String,
        timeout_ms: u64,
    },
    /// Label a Node (merge patch), then emit an Event about it.
    KubeLabel {
        node: String,
        key: String,
        value: String,
    },
    /// List objects of one kind.
    #[serde(rename_all = "kebab-case")]
    KubeList {
        api_version: String,
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        label_selector: Option<String>,
    },
    /// Report the triggers of this reconcile.
    KubeWatch,
    /// One kube call as given (tests/e2e/hostile_kube.rs).
    #[serde(rename_all = "kebab-case")]
    KubeCall {
        op: String,
        api_version: String,
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        patch_type: Option<String>,
        #[serde(default)]
        body: Option<String>,
        #[serde(default)]
        label_selector: Option<String>,
        #[serde(default)]
        field_selector: Option<String>,
    },
    /// Lists with `count` distinct label selectors.
    #[serde(rename_all = "kebab-case")]
    KubeListMany {
        api_version: String,
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        count: u32,
    },
    /// `count` gets (of kinds the server lacks, with `distinct-kinds`).
    #[serde(rename_all = "kebab-case")]
    KubeGetMany {
        api_version: String,
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        name: String,
        count: u32,
        #[serde(default)]
        distinct_kinds: bool,
    },
    /// Cloud calls, each in turn (see `cloud.rs`).
    CloudCalls {
        calls: Vec<cloud::CloudCall>,
    },
    /// `count` Events with distinct messages about one object, then requeue.
    #[serde(rename_all = "kebab-case")]
    KubeEventFlood {
        api_version: String,
        kind: String,
        #[serde(default)]
        namespace: Option<String>,
        name: String,
        count: u32,
        requeue_ms: u64,
    },
    #[serde(rename_all = "kebab-case")]
    ConditionFlood {
        op: String,
        condition: String,
        count: u32,
        #[serde(default)]
        ttl: Option<u32>,
        requeue_ms: u64,
    },
    /// Each mode in turn, in one reconcile.
    Steps {
        steps: Vec<Mode>,
    },
}

/// Which build this is: "v1", or "v2" with the `v2` feature (which also
/// declares fewer capabilities: the `export_plugin!` below).
const BUILD: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

pub struct Chaos;

impl Plugin for Chaos {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "chaos",
            env!("CARGO_PKG_VERSION"),
            "misbehaves on request, for tests",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        Chaos::run(ctx.config::<Mode>()?, ctx, host)
    }
}

impl Chaos {
    /// One reconcile doing what `mode` asks.
    fn run(mode: Mode, ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        match mode {
            Mode::Noop => Ok(Outcome::healthy("nothing to do")),
            Mode::Ok => {
                let runs = host.state().get_json::<u64>("runs")?.unwrap_or(0) + 1;
                host.state().set_json("runs", &runs)?;
                Ok(Outcome::healthy(format!("run {runs} ({BUILD})")))
            }
            Mode::Loop => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Mode::Alloc => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            Mode::Panic => panic!("chaos was asked to panic"),
            Mode::Fail => Err(Error::Other("chaos was asked to fail".into())),
            Mode::Burst { dir, files, size } => {
                let runs = host.state().get_json::<u64>("runs")?.unwrap_or(0) + 1;
                let content = vec![b'a' + (runs % 26) as u8; size];
                for i in 0..files {
                    host.files()
                        .write(&format!("{dir}/file-{i}"), &content, None)?;
                }
                host.state().set_json("runs", &runs)?;
                Ok(Outcome::healthy(format!("burst {runs}")))
            }
            Mode::Disrupt { path } => {
                let runs = host.state().get_json::<u64>("runs")?.unwrap_or(0) + 1;
                match host.files().write(&path, runs.to_string().as_bytes(), None) {
                    Ok(_) => {
                        host.state().set_json("runs", &runs)?;
                        Ok(Outcome::healthy(format!("disrupted {runs}")))
                    }
                    // A budget's "not now" is no failure: the next run asks again.
                    Err(e) => Ok(Outcome::degraded(e.to_string())),
                }
            }
            Mode::Read { path } => {
                let bytes = host.files().read(&path)?;
                Ok(Outcome::healthy(format!("read {} bytes", bytes.len())))
            }
            Mode::Write {
                path,
                content,
                file_mode,
            } => {
                let changed = host.files().write(&path, content.as_bytes(), file_mode)?;
                Ok(Outcome::healthy(format!(
                    "wrote {path} (changed: {changed})"
                )))
            }
            Mode::Remove { paths } => {
                let errors: Vec<String> = paths
                    .iter()
                    .filter_map(|path| host.files().remove(path).err())
                    .map(|e| e.to_string())
                    .collect();
                if errors.is_empty() {
                    Ok(Outcome::healthy(format!("removed {}", paths.len())))
                } else {
                    Ok(Outcome::degraded(errors.join("; ")))
                }
            }
            Mode::Get { url } => {
                let response = host.http().send(&Request::get(&url))?;
                Ok(Outcome::healthy(format!("got: {}", response.status)))
            }
            Mode::Flood {
                dir,
                count,
                name_len,
            } => {
                let mut errors = std::collections::BTreeMap::<String, u32>::new();
                for i in 0..count {
                    let name = format!("{i:0width$}", width = name_len.max(1));
                    if let Err(e) = host.files().write(&format!("{dir}/{name}"), b"x", None) {
                        *errors.entry(e.kind().to_string()).or_default() += 1;
                    }
                }
                Ok(Outcome::healthy(format!("flood errors: {errors:?}")))
            }
            Mode::StateFlood { count, size } => {
                let value = vec![7u8; size];
                let mut first_error = None;
                let mut stored = 0;
                for i in 0..count {
                    match host.state().set(&format!("k{i}"), &value) {
                        Ok(()) => stored += 1,
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                Ok(Outcome::healthy(format!(
                    "stored {stored}; first error: {}",
                    first_error.map_or("none".to_string(), |e| e.to_string())
                )))
            }
            Mode::LogFlood { lines, text } => {
                for _ in 0..lines {
                    host.log(tend_sdk::Level::Info, &text);
                }
                Ok(Outcome::healthy(format!("logged {lines} lines")))
            }
            Mode::Log { message } => {
                host.log(tend_sdk::Level::Warn, &message);
                Ok(Outcome::healthy("logged"))
            }
            Mode::Requeue { ms } => {
                Ok(Outcome::healthy("again").requeue_after(std::time::Duration::from_millis(ms)))
            }
            Mode::Outcome {
                text,
                repeat,
                fail,
                requeue_ms,
            } => {
                let message = text.repeat(repeat.unwrap_or(1));
                if fail {
                    return Err(Error::Other(message));
                }
                let outcome = Outcome::degraded(message);
                Ok(match requeue_ms {
                    Some(ms) => outcome.requeue_after(std::time::Duration::from_millis(ms)),
                    None => outcome,
                })
            }
            Mode::Post { url, timeout_ms } => {
                let mut request =
                    Request::get(&url).timeout(std::time::Duration::from_millis(timeout_ms));
                request.method = "POST".into();
                request.body = Some(b"chaos".to_vec());
                let response = host.http().send(&request)?;
                Ok(Outcome::healthy(format!("posted: {}", response.status)))
            }
            Mode::MetricsFlood { count } => {
                let mut recorded = 0;
                for i in 0..count {
                    let series = i.to_string();
                    match host
                        .metrics()
                        .gauge_set("flood", &[("series", &series)], 1.0)
                    {
                        Ok(()) => recorded += 1,
                        Err(e) => {
                            return Ok(Outcome::healthy(format!(
                                "recorded {recorded} series, then {e}"
                            )));
                        }
                    }
                }
                Ok(Outcome::healthy(format!("recorded {recorded} series")))
            }
            Mode::CloudCalls { calls } => Ok(Outcome::healthy(cloud::run_all(host, &calls))),
            Mode::CriSandboxes { op, ids } => {
                let results: Vec<String> = ids
                    .iter()
                    .map(|id| {
                        let result = match op.as_str() {
                            "stop" => host.cri().stop_pod_sandbox(id),
                            _ => host.cri().remove_pod_sandbox(id),
                        };
                        match result {
                            Ok(()) => format!("{id}: ok"),
                            Err(e) => format!("{id}: {e}"),
                        }
                    })
                    .collect();
                Ok(Outcome::healthy(results.join("; ")))
            }
            Mode::MetricNames { gauges, counters } => {
                let gauges = gauges
                    .iter()
                    .map(|n| (n, host.metrics().gauge_set(n, &[], 1.0)));
                let counters = counters
                    .iter()
                    .map(|n| (n, host.metrics().counter_add(n, &[], 1.0)));
                let results: Vec<String> = gauges
                    .chain(counters)
                    .map(|(name, result)| match result {
                        Ok(()) => format!("{name}: ok"),
                        Err(e) => format!("{name}: {}", e.kind()),
                    })
                    .collect();
                Ok(Outcome::healthy(results.join("; ")))
            }
            Mode::UnitFiles { op, units } => {
                let units: Vec<&str> = units.iter().map(String::as_str).collect();
                let result = match op.as_str() {
                    "enable" => host.systemd().enable(&units),
                    _ => host.systemd().disable(&units),
                };
                Ok(Outcome::healthy(match result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.to_string(),
                }))
            }
            Mode::DaemonReloads { count } => {
                Ok(tally((0..count).map(|_| host.systemd().daemon_reload())))
            }
            Mode::SendAll { url, count } => {
                let results = raw_send_all(&url, count);
                let failed: Vec<&String> =
                    results.iter().filter_map(|r| r.as_ref().err()).collect();
                Ok(Outcome::healthy(format!(
                    "{} answered, {} failed{}",
                    results.len() - failed.len(),
                    failed.len(),
                    failed.first().map(|e| format!(": {e}")).unwrap_or_default()
                )))
            }
            Mode::Pull { image, timeout_ms } => {
                let listed = match host.cri().list_pod_sandboxes(&Default::default()) {
                    Ok(sandboxes) => format!("{} sandboxes", sandboxes.len()),
                    Err(e) => format!("list: {e}"),
                };
                let pulled = host
                    .cri()
                    .pull_image(&image, std::time::Duration::from_millis(timeout_ms));
                Ok(Outcome::healthy(match pulled {
                    Ok(image_ref) => format!("{listed}; pulled {image_ref}"),
                    Err(e) => format!("{listed}; pull: {e}"),
                }))
            }
            Mode::KubeLabel { node, key, value } => {
                Ok(match kube_label(host, &node, &key, &value) {
                    Ok(()) => Outcome::healthy(format!("labeled {node} {key}={value}")),
                    Err(e) => Outcome::degraded(e.to_string()),
                })
            }
            Mode::KubeList {
                api_version,
                kind,
                namespace,
                label_selector,
            } => {
                let params = ListParams {
                    label_selector,
                    ..ListParams::default()
                };
                let listed = host
                    .kube()
                    .list(&api_version, &kind, namespace.as_deref(), &params);
                Ok(match listed {
                    Ok(list) => {
                        let mut names = list.names();
                        names.sort_unstable();
                        Outcome::healthy(format!(
                            "listed {} {kind}: {}",
                            names.len(),
                            names.join(", ")
                        ))
                    }
                    Err(e) => Outcome::degraded(e.to_string()),
                })
            }
            Mode::KubeCall {
                op,
                api_version,
                kind,
                namespace,
                name,
                patch_type,
                body,
                label_selector,
                field_selector,
            } => {
                let key = object_key(&api_version, &kind, namespace.as_deref(), &name);
                let body: serde_json::Value = serde_json::from_str(body.as_deref().unwrap_or("{}"))
                    .map_err(|e| Error::Other(format!("body: {e}")))?;
                let kube = host.kube();
                let done: Result<String> = match op.as_str() {
                    "get" => kube.get(&key).map(|_| "ok".to_string()),
                    "list" => {
                        let params = ListParams {
                            label_selector,
                            field_selector,
                            ..ListParams::default()
                        };
                        kube.list(&api_version, &kind, namespace.as_deref(), &params)
                            .map(|list| {
                                let mut names = list.names();
                                names.sort_unstable();
                                format!("listed {}", names.join(", "))
                            })
                    }
                    "create" => kube
                        .create(&api_version, &kind, namespace.as_deref(), &body)
                        .map(|_| "ok".to_string()),
                    "patch" => {
                        let patch_type = match patch_type.as_deref() {
                            Some("json") => PatchType::Json,
                            Some("apply") => PatchType::Apply,
                            _ => PatchType::Merge,
                        };
                        kube.patch(&key, patch_type, &body)
                            .map(|_| "ok".to_string())
                    }
                    "delete" => kube.delete(&key).map(|()| "ok".to_string()),
                    "emit-event" => kube
                        .emit_event(&key, EventType::Normal, "Hostile", "hostile")
                        .map(|()| "ok".to_string()),
                    other => Err(Error::Other(format!("no kube op {other:?}"))),
                };
                Ok(match done {
                    Ok(text) => Outcome::healthy(text),
                    Err(e) => Outcome::degraded(e.to_string()),
                })
            }
            Mode::KubeWatch => Ok(Outcome::healthy(format!("triggers: {}", triggers(ctx)))),
            Mode::Condition {
                op,
                condition,
                reason,
                message,
                ttl,
            } => {
                let conditions = host.conditions();
                let done = match op.as_str() {
                    "set" => conditions.set(&tend_sdk::ConditionReport {
                        condition,
                        reason,
                        message,
                        ttl_seconds: ttl,
                    }),
                    "clear" => conditions.clear(&condition, &reason, &message),
                    _ => conditions.list().map(|held| {
                        let held: Vec<String> = held
                            .iter()
                            .map(|h| format!("{}={}({})", h.condition, h.active, h.reason))
                            .collect();
                        host.log(tend_sdk::Level::Info, &format!("held {}", held.join(", ")));
                    }),
                };
                Ok(match done {
                    Ok(()) => Outcome::healthy("ok"),
                    Err(e) => Outcome::degraded(format!("{} {e}", e.kind())),
                })
            }
            Mode::Drain {
                deadline_ms,
                uncordon_on_give_up,
            } => {
                let options = tend_sdk::DrainOptions {
                    deadline_ms,
                    uncordon_on_give_up,
                };
                Ok(match host.kube().drain(&options) {
                    Ok(report) if report.completed() => Outcome::healthy(format!(
                        "drained: evicted {}; skipped {}",
                        report.evicted.join(", "),
                        report.skipped.join(", ")
                    )),
                    Ok(report) => Outcome::degraded(format!(
                        "gave up (uncordoned: {}): remaining {}; evicted {}",
                        report.uncordoned,
                        report.remaining.join("; "),
                        report.evicted.join(", ")
                    )),
                    Err(e) => Outcome::degraded(format!("{} {e}", e.kind())),
                })
            }
            Mode::LogMatches => {
                let mut count = 0;
                for matched in host.logs().matches()? {
                    for entry in &matched.entries {
                        count += 1;
                        host.log(
                            tend_sdk::Level::Info,
                            &format!("matched {}: {}", matched.rule, entry.message),
                        );
                    }
                    host.log(
                        tend_sdk::Level::Info,
                        &format!(
                            "missed {}: {}, gap {}",
                            matched.rule, matched.missed, matched.gap
                        ),
                    );
                }
                Ok(Outcome::healthy(format!(
                    "{count} matched; triggers: {}",
                    triggers(ctx)
                )))
            }
            Mode::LogsRead {
                source,
                since,
                max,
                units,
            } => {
                let source = if source == "kernel" {
                    tend_sdk::LogSource::Kernel
                } else {
                    tend_sdk::LogSource::Journal
                };
                let filter = tend_sdk::LogFilter {
                    units,
                    ..Default::default()
                };
                Ok(Outcome::healthy(
                    match host.logs().read(source, since.as_deref(), &filter, max) {
                        Ok(page) => {
                            let messages: Vec<&str> =
                                page.entries.iter().map(|e| e.message.as_str()).collect();
                            format!(
                                "read {}: {} cursor {}",
                                messages.len(),
                                messages.join(" | "),
                                page.cursor.unwrap_or_default()
                            )
                        }
                        Err(e) => format!("error {}: {e}", e.kind()),
                    },
                ))
            }
            Mode::KubeListMany {
                api_version,
                kind,
                namespace,
                count,
            } => Ok(tally((0..count).map(|i| {
                let params = ListParams::labels(&format!("!chaos-{i}"));
                host.kube()
                    .list(&api_version, &kind, namespace.as_deref(), &params)
                    .map(drop)
            }))),
            Mode::KubeGetMany {
                api_version,
                kind,
                namespace,
                name,
                count,
                distinct_kinds,
            } => Ok(tally((0..count).map(|i| {
                let kind = if distinct_kinds {
                    format!("{kind}{i}")
                } else {
                    kind.clone()
                };
                host.kube()
                    .get(&object_key(
                        &api_version,
                        &kind,
                        namespace.as_deref(),
                        &name,
                    ))
                    .map(drop)
            }))),
            Mode::KubeEventFlood {
                api_version,
                kind,
                namespace,
                name,
                count,
                requeue_ms,
            } => {
                let runs = host.state().get_json::<u64>("runs")?.unwrap_or(0) + 1;
                host.state().set_json("runs", &runs)?;
                let key = object_key(&api_version, &kind, namespace.as_deref(), &name);
                let outcome = tally((0..count).map(|i| {
                    host.kube().emit_event(
                        &key,
                        EventType::Warning,
                        "Flood",
                        &format!("flood {runs}-{i}"),
                    )
                }));
                Ok(outcome.requeue_after(std::time::Duration::from_millis(requeue_ms)))
            }
            Mode::ConditionFlood {
                op,
                condition,
                count,
                ttl,
                requeue_ms,
            } => {
                let runs = host.state().get_json::<u64>("runs")?.unwrap_or(0) + 1;
                host.state().set_json("runs", &runs)?;
                let conditions = host.conditions();
                let outcome = tally((0..count).map(|i| {
                    let message = match op.as_str() {
                        "message" => format!("flood {runs}-{i}"),
                        _ => "flood".to_string(),
                    };
                    if op == "flip" && i % 2 == 1 {
                        return conditions.clear(&condition, "Flood", &message);
                    }
                    conditions.set(&tend_sdk::ConditionReport {
                        condition: condition.clone(),
                        reason: "Flood".into(),
                        message,
                        ttl_seconds: ttl,
                    })
                }));
                Ok(outcome.requeue_after(std::time::Duration::from_millis(requeue_ms)))
            }
            Mode::Steps { steps } => {
                let results: Vec<String> = steps
                    .into_iter()
                    .enumerate()
                    .map(|(i, step)| match Chaos::run(step, ctx, host) {
                        Ok(outcome) => format!("{}: {}", i + 1, outcome.message),
                        Err(e) => format!("{}: {e}", i + 1),
                    })
                    .collect();
                Ok(Outcome::healthy(results.join("; ")))
            }
        }
    }
}

/// "N ok, errors: {kind: count}; first: TEXT" of a run of kube calls.
fn tally(results: impl Iterator<Item = Result<()>>) -> Outcome {
    let (mut ok, mut errors, mut first) =
        (0, std::collections::BTreeMap::<String, u32>::new(), None);
    for result in results {
        match result {
            Ok(()) => ok += 1,
            Err(e) => {
                *errors.entry(e.kind().to_string()).or_default() += 1;
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Outcome::healthy(format!(
        "{ok} ok, errors: {errors:?}; first: {}",
        first.unwrap_or_default()
    ))
}

fn object_key(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) => ObjectKey::namespaced(api_version, kind, ns, name),
        None => ObjectKey::cluster(api_version, kind, name),
    }
}

/// Set label `key`=`value` on Node `node` and say so in an Event.
fn kube_label(host: &dyn Host, node: &str, key: &str, value: &str) -> Result<()> {
    let node_key = ObjectKey::cluster("v1", "Node", node);
    let patch = serde_json::json!({ "metadata": { "labels": { key: value } } });
    host.kube().patch(&node_key, PatchType::Merge, &patch)?;
    host.kube().emit_event(
        &node_key,
        EventType::Normal,
        "LabelApplied",
        &format!("set {key}={value}"),
    )
}

/// `count` GETs of `url` in one call of the host's `send-all`: each result
/// as "ok" or the error's text. (v1's component only: the bindings' own http
/// import, which v2 does not declare.)
#[cfg(all(target_arch = "wasm32", not(feature = "v2")))]
fn raw_send_all(url: &str, count: usize) -> Vec<std::result::Result<(), String>> {
    use tend_sdk::bindings::tend::plugin::{http, types};
    let request = http::Request {
        method: "GET".into(),
        url: url.into(),
        headers: vec![],
        body: None,
        timeout_ms: None,
    };
    let show = |e: types::Error| match e {
        types::Error::Invalid(m) => format!("invalid: {m}"),
        other => format!("{other:?}"),
    };
    http::send_all(&vec![request; count])
        .into_iter()
        .map(|r| r.map(drop).map_err(show))
        .collect()
}

#[cfg(not(all(target_arch = "wasm32", not(feature = "v2"))))]
fn raw_send_all(_: &str, count: usize) -> Vec<std::result::Result<(), String>> {
    vec![Err("send-all is raw only in chaos v1's component".into()); count]
}

// v1 declares every capability, so every hostile mode reaches the host. v2
// is a new version that declares only what the hot-reload, OCI and fleet
// tests run it for (`ok`: state; `write`, `disrupt`: files): its component
// imports only those, and a call to another is refused in the guest
// (tests/e2e/sandbox.rs).
#[cfg(not(feature = "v2"))]
tend_sdk::export_plugin!(Chaos);
#[cfg(feature = "v2")]
tend_sdk::export_plugin!(Chaos, uses: [files, state]);

/// The reconcile's triggers as "kind:subject, ...".
fn triggers(ctx: &Context) -> String {
    let triggers: Vec<String> = ctx
        .triggers
        .iter()
        .map(|t| match &t.subject {
            Some(subject) => format!("{}:{subject}", t.kind),
            None => t.kind.clone(),
        })
        .collect();
    triggers.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tend_sdk::testing::FakeHost;
    use tend_sdk::{Health, Trigger};

    fn run(host: &FakeHost, config: serde_json::Value) -> Outcome {
        let mut ctx = Context::new("chaos", &config.to_string());
        ctx.node_name = "node-1".into();
        Chaos::reconcile(&ctx, host).unwrap()
    }

    #[test]
    fn kube_modes_report_what_they_did() {
        let host = FakeHost::named("chaos");
        for name in ["node-1", "node-2"] {
            host.kube
                .put(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}));
        }
        host.kube.grant(
            r#"{ resource = "nodes", verbs = ["get", "list", "patch"], names = ["$NODE"] }"#,
        );
        let label = json!({"mode": "kube-label", "node": "node-1", "key": "a", "value": "b"});
        assert_eq!(run(&host, label).message, "labeled node-1 a=b");
        assert_eq!(
            host.kube.actions(),
            [
                "patch nodes/node-1 merge",
                "event nodes/node-1 LabelApplied: set a=b"
            ]
        );
        let other = json!({"mode": "kube-label", "node": "node-2", "key": "a", "value": "b"});
        let outcome = run(&host, other);
        assert_eq!(outcome.health, Health::Degraded);
        assert!(
            outcome
                .message
                .starts_with("denied: no kube grant allows patch nodes named node-2"),
            "{}",
            outcome.message
        );
        let list = json!({"mode": "kube-list", "api-version": "v1", "kind": "Node"});
        assert_eq!(run(&host, list).message, "listed 1 Node: node-1");

        let mut ctx = Context::new("chaos", r#"{"mode": "kube-watch"}"#);
        ctx.triggers = vec![
            Trigger::new("startup"),
            Trigger {
                kind: "kube".into(),
                subject: Some("pods/default/web".into()),
            },
        ];
        assert_eq!(
            Chaos::reconcile(&ctx, &host).unwrap().message,
            "triggers: startup, kube:pods/default/web"
        );
    }
}
