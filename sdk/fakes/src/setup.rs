//! Setup calls: the Rust fakes' own methods (grant, seed, script failures,
//! inspect what was done), by their names in kebab case. Inputs the Rust
//! methods would panic on (a test's setup error) are checked first and
//! answered as a `misuse`, so a wrong setup never traps the module.

use crate::calls::functions;
use crate::wit::{Bytes, Wit};
use crate::{Args, unknown_fn};
use serde_json::{Value, json};
use std::time::Duration;
use tend_rules::cloud::CloudGrant;
use tend_rules::conditions::ConditionsGrant;
use tend_rules::cri::{CriGrant, normalize_image};
use tend_rules::files::FileGrant;
use tend_rules::http::UrlPattern;
use tend_rules::kube::KubeRule;
use tend_rules::logs::LogsGrant;
use tend_rules::systemd::SystemdGrant;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Error, SandboxState};

/// The setup functions of each fake.
const SETUP: [(&str, &[&str]); 11] = [
    ("host", &["log-lines", "plugin"]),
    ("files", &["grant", "put", "get", "paths"]),
    ("http", &["grant", "respond", "status", "sent", "batches"]),
    ("state", &[]),
    ("metrics", &["counter", "gauge"]),
    (
        "systemd",
        &[
            "grant",
            "set-unit",
            "put-unit",
            "job-result",
            "fail-with",
            "actions",
        ],
    ),
    (
        "cri",
        &[
            "grant",
            "set-version",
            "add-sandbox",
            "put-sandbox",
            "put-sandbox-status",
            "add-container",
            "add-image",
            "fail-with",
            "fail-call",
            "fail-pull",
            "pull-takes",
            "set-time-left",
            "actions",
            "sandbox-ids",
        ],
    ),
    (
        "kube",
        &[
            "grant",
            "set-node-name",
            "node-name",
            "set-own-lease",
            "add-kind",
            "put",
            "object",
            "remove",
            "fail-with",
            "fail-call",
            "actions",
            "patches",
            "events",
            "block-eviction",
            "unblock-eviction",
            "uncordon-during-drain",
        ],
    ),
    (
        "cloud",
        &[
            "grant",
            "put-instance",
            "remove-instance",
            "instance",
            "put-group",
            "remove-group",
            "group",
            "fail-with",
            "fail-call",
            "actions",
        ],
    ),
    ("logs", &["grant", "kernel", "journal"]),
    (
        "conditions",
        &[
            "grant",
            "hold",
            "advance",
            "now",
            "fail-with",
            "fail-call",
            "actions",
        ],
    ),
];

fn ok(value: impl Wit) -> Value {
    json!({ "ok": value.to_json() })
}

/// A grant in `tend.toml` shape, read by the host's own config types.
fn grant<T: serde::de::DeserializeOwned>(a: &mut Args) -> Result<T, String> {
    let value = a.raw("grant")?.clone();
    a.done()?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// A WIT call name of `cap` for `fail-call`.
fn call_name(cap: &str, a: &mut Args) -> Result<String, String> {
    let call: String = a.get("call")?;
    let known = functions(cap)?;
    if known.contains(&call.as_str()) {
        Ok(call)
    } else {
        Err(unknown_fn(cap, &call, known))
    }
}

/// An image reference the fake can normalize.
fn image(a: &mut Args, name: &'static str) -> Result<String, String> {
    let image: String = a.get(name)?;
    normalize_image(&image).map_err(|e| e.message().to_string())?;
    Ok(image)
}

pub(crate) fn setup(
    host: &FakeHost,
    fake: &str,
    function: &str,
    a: &mut Args,
) -> Result<Value, String> {
    let Some((_, known)) = SETUP.iter().find(|(name, _)| *name == fake) else {
        let names: Vec<&str> = SETUP.iter().map(|(name, _)| *name).collect();
        return Err(format!("no fake {fake:?}; expected one of {names:?}"));
    };
    if !known.contains(&function) {
        return Err(unknown_fn(&format!("the {fake} fake"), function, known));
    }
    let answer = match fake {
        "host" => host_setup(host, function, a),
        "files" => files(host, function, a),
        "http" => http(host, function, a),
        "metrics" => {
            let name: String = a.get("name")?;
            let labels: Vec<(String, String)> = a.get("labels")?;
            a.done()?;
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            Ok(if function == "counter" {
                ok(host.metrics.counter(&name, &labels))
            } else {
                ok(host.metrics.gauge(&name, &labels))
            })
        }
        "systemd" => systemd(host, function, a),
        "cri" => cri(host, function, a),
        "kube" => kube(host, function, a),
        "logs" => logs(host, function, a),
        "conditions" => conditions(host, function, a),
        _ => cloud(host, function, a),
    };
    answer.map_err(|e| format!("{fake} {function}: {e}"))
}

fn host_setup(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    a.done()?;
    Ok(if function == "plugin" {
        ok(host.plugin().to_string())
    } else {
        let logs: Vec<Value> = host
            .log_lines()
            .into_iter()
            .map(|(level, message)| json!({ "level": level.to_json(), "message": message }))
            .collect();
        json!({ "ok": logs })
    })
}

fn files(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    Ok(match function {
        "grant" => {
            let grants: Vec<FileGrant> = grant(a)?;
            for g in grants {
                let root = g.path.to_str().ok_or("grant paths are UTF-8")?;
                host.files.grant(root, g.write);
            }
            ok(())
        }
        "put" => {
            let path: String = a.get("path")?;
            let contents: Bytes = a.get("contents")?;
            a.done()?;
            host.files.put(&path, &contents.0);
            ok(())
        }
        "get" => {
            let path: String = a.get("path")?;
            a.done()?;
            ok(host.files.get(&path).map(Bytes))
        }
        _ => {
            a.done()?;
            ok(host.files.paths())
        }
    })
}

fn http(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    Ok(match function {
        "grant" => {
            let patterns: Vec<UrlPattern> = grant(a)?;
            for pattern in patterns {
                host.http.grant(&pattern.text);
            }
            ok(())
        }
        "respond" => {
            let method: String = a.get("method")?;
            let url: String = a.get("url")?;
            let response = crate::wit::scripted_response(a.raw("response")?, "args.response")?;
            a.done()?;
            host.http.respond(&method, &url, response);
            ok(())
        }
        "status" => {
            let url: String = a.get("url")?;
            let status: u16 = a.get("status")?;
            a.done()?;
            host.http.status(&url, status);
            ok(())
        }
        "sent" => {
            a.done()?;
            ok(host.http.sent())
        }
        _ => {
            a.done()?;
            let batches: Vec<u64> = host.http.batches().into_iter().map(|n| n as u64).collect();
            ok(batches)
        }
    })
}

fn systemd(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let systemd = &host.systemd;
    Ok(match function {
        "grant" => {
            systemd.extend_grant(&grant::<SystemdGrant>(a)?);
            ok(())
        }
        "set-unit" => {
            let unit: String = a.get("unit")?;
            let state: String = a.get("active-state")?;
            a.done()?;
            systemd.set_unit(&unit, &state);
            ok(())
        }
        "put-unit" => {
            let status = a.get("status")?;
            a.done()?;
            systemd.put_unit(status);
            ok(())
        }
        "job-result" => {
            let unit: String = a.get("unit")?;
            let result = a.get("result")?;
            a.done()?;
            systemd.job_result(&unit, result);
            ok(())
        }
        "fail-with" => {
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            systemd.fail_with(error);
            ok(())
        }
        _ => {
            a.done()?;
            ok(systemd.actions())
        }
    })
}

fn cri(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let cri = &host.cri;
    match function {
        "grant" => {
            cri.extend_grant(&grant::<CriGrant>(a)?);
        }
        "set-version" => {
            let name: String = a.get("name")?;
            let version: String = a.get("version")?;
            a.done()?;
            cri.set_version(&name, &version);
        }
        "add-sandbox" => {
            let id: String = a.get("id")?;
            let uid: String = a.get("uid")?;
            let attempt: u32 = a.get("attempt")?;
            let state: SandboxState = a.get("state")?;
            a.done()?;
            cri.add_sandbox(&id, &uid, attempt, state);
        }
        "put-sandbox" => {
            let sandbox = a.get("sandbox")?;
            a.done()?;
            cri.put_sandbox(sandbox);
        }
        "put-sandbox-status" => {
            let status = a.get("status")?;
            a.done()?;
            cri.put_sandbox_status(status);
        }
        "add-container" => {
            let container = a.get("container")?;
            a.done()?;
            cri.add_container(container);
        }
        "add-image" => {
            let reference = image(a, "reference")?;
            a.done()?;
            cri.add_image(&reference);
        }
        "fail-with" => {
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            cri.fail_with(error);
        }
        "fail-call" => {
            let call = call_name("cri", a)?;
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            cri.fail_call(&call, error);
        }
        "fail-pull" => {
            let reference = image(a, "image")?;
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            cri.fail_pull(&reference, error);
        }
        "pull-takes" => {
            let reference = image(a, "image")?;
            let ms: u64 = a.get("ms")?;
            a.done()?;
            cri.pull_takes(&reference, Duration::from_millis(ms));
        }
        "set-time-left" => {
            let ms: Option<u64> = a.get("ms")?;
            a.done()?;
            cri.set_time_left(ms.map(Duration::from_millis));
        }
        "actions" => {
            a.done()?;
            return Ok(ok(cri.actions()));
        }
        _ => {
            a.done()?;
            return Ok(ok(cri.sandbox_ids()));
        }
    }
    Ok(ok(()))
}

fn kube(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let kube = &host.kube;
    match function {
        "grant" => {
            kube.grant(grant::<Vec<KubeRule>>(a)?);
        }
        "set-node-name" => {
            let node: String = a.get("node")?;
            a.done()?;
            kube.set_node_name(&node);
        }
        "node-name" => {
            a.done()?;
            return Ok(ok(kube.node_name()));
        }
        "set-own-lease" => {
            let namespace: String = a.get("namespace")?;
            let name: String = a.get("name")?;
            a.done()?;
            kube.set_own_lease(&namespace, &name);
        }
        "add-kind" => {
            let api_version: String = a.get("api-version")?;
            let kind: String = a.get("kind")?;
            let plural: String = a.get("plural")?;
            let namespaced: bool = a.get("namespaced")?;
            a.done()?;
            kube.add_kind(&api_version, &kind, &plural, namespaced);
        }
        "put" => {
            let object = a.raw("object")?.clone();
            a.done()?;
            kube.try_put(object)?;
        }
        "object" | "remove" => {
            let key = a.get("key")?;
            a.done()?;
            let found = if function == "object" {
                kube.object(&key)
            } else {
                kube.remove(&key)
            };
            return Ok(json!({ "ok": found }));
        }
        "fail-with" => {
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            kube.fail_with(error);
        }
        "fail-call" => {
            let call = call_name("kube", a)?;
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            kube.fail_call(&call, error);
        }
        "actions" => {
            a.done()?;
            return Ok(ok(kube.actions()));
        }
        "block-eviction" | "unblock-eviction" => {
            let namespace: String = a.get("namespace")?;
            let name: String = a.get("name")?;
            if function == "block-eviction" {
                let budget: String = a.get("budget")?;
                a.done()?;
                kube.block_eviction(&namespace, &name, &budget);
            } else {
                a.done()?;
                kube.unblock_eviction(&namespace, &name);
            }
        }
        "uncordon-during-drain" => {
            let evictions: u32 = a.get("evictions")?;
            a.done()?;
            kube.uncordon_during_drain(evictions as usize);
        }
        "patches" => {
            a.done()?;
            let patches: Vec<Value> = kube
                .patches()
                .into_iter()
                .map(|p| json!({ "key": p.key.to_json(), "patch-type": p.patch_type.to_json(), "patch": p.patch }))
                .collect();
            return Ok(json!({ "ok": patches }));
        }
        _ => {
            a.done()?;
            let events: Vec<Value> = kube
                .events()
                .into_iter()
                .map(|e| {
                    json!({
                        "regarding": e.regarding.to_json(),
                        "event-type": e.event_type.to_json(),
                        "reason": e.reason,
                        "message": e.message,
                        "count": e.count,
                    })
                })
                .collect();
            return Ok(json!({ "ok": events }));
        }
    }
    Ok(ok(()))
}

fn cloud(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let cloud = &host.cloud;
    match function {
        "grant" => {
            cloud.extend_grant(&grant::<CloudGrant>(a)?);
        }
        "put-instance" => {
            let instance = a.get("instance")?;
            a.done()?;
            cloud.put_instance(instance);
        }
        "put-group" => {
            let group = a.get("group")?;
            a.done()?;
            cloud.put_group(group);
        }
        "instance" | "remove-instance" => {
            let id: String = a.get("id")?;
            a.done()?;
            let found = if function == "instance" {
                cloud.instance(&id)
            } else {
                cloud.remove_instance(&id)
            };
            return Ok(ok(found));
        }
        "group" | "remove-group" => {
            let id: String = a.get("id")?;
            a.done()?;
            let found = if function == "group" {
                cloud.group(&id)
            } else {
                cloud.remove_group(&id)
            };
            return Ok(ok(found));
        }
        "fail-with" => {
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            cloud.fail_with(error);
        }
        "fail-call" => {
            let call = call_name("cloud", a)?;
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            cloud.fail_call(&call, error);
        }
        _ => {
            a.done()?;
            return Ok(ok(cloud.actions()));
        }
    }
    Ok(ok(()))
}

fn logs(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let logs = &host.logs;
    match function {
        "grant" => {
            logs.extend_grant(&grant::<LogsGrant>(a)?);
        }
        "kernel" => {
            let priority: u8 = a.get("priority")?;
            let message: String = a.get("message")?;
            a.done()?;
            logs.kernel(priority, &message);
        }
        _ => {
            let unit: Option<String> = a.get("unit")?;
            let identifier: Option<String> = a.get("identifier")?;
            let priority: u8 = a.get("priority")?;
            let message: String = a.get("message")?;
            a.done()?;
            logs.journal(unit.as_deref(), identifier.as_deref(), priority, &message);
        }
    }
    Ok(ok(()))
}

fn conditions(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let conditions = &host.conditions;
    Ok(match function {
        "grant" => {
            conditions.extend_grant(&grant::<ConditionsGrant>(a)?);
            ok(())
        }
        "hold" => {
            let condition: String = a.get("condition")?;
            let active: bool = a.get("active")?;
            let reason: String = a.get("reason")?;
            let message: String = a.get("message")?;
            a.done()?;
            conditions.hold(&condition, active, &reason, &message);
            ok(())
        }
        "advance" => {
            let seconds: u64 = a.get("seconds")?;
            a.done()?;
            conditions.advance(Duration::from_secs(seconds));
            ok(())
        }
        "now" => {
            a.done()?;
            ok(conditions.now())
        }
        "fail-with" => {
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            conditions.fail_with(error);
            ok(())
        }
        "fail-call" => {
            let call = call_name("conditions", a)?;
            let error: Option<Error> = a.get("error")?;
            a.done()?;
            conditions.fail_call(&call, error);
            ok(())
        }
        _ => {
            a.done()?;
            ok(conditions.actions())
        }
    })
}
