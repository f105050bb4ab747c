//! Plugin calls: each WIT function of world `plugin`, by its WIT name, on the
//! [`Host`] of a fake, its answer the WIT result as JSON.

use crate::wit::{Bytes, answer};
use crate::{Args, unknown_fn};
use serde_json::{Value, json};
use std::time::Duration;
use tend_rules::wit::INTERFACES;
use tend_sdk::testing::FakeHost;
use tend_sdk::{Host, Level, Request, Rule};

/// The WIT functions of `cap`, or what to write instead.
pub(crate) fn functions(cap: &str) -> Result<&'static [&'static str], String> {
    INTERFACES
        .iter()
        .find(|(name, _)| *name == cap)
        .map(|(_, functions)| *functions)
        .ok_or_else(|| {
            let names: Vec<&str> = INTERFACES.iter().map(|(name, _)| *name).collect();
            format!("no capability {cap:?}; expected one of {names:?}")
        })
}

/// `&[String]` as the `&[&str]` the SDK's traits take.
fn strs(items: &[String]) -> Vec<&str> {
    items.iter().map(String::as_str).collect()
}

/// A kube object or patch, JSON text in the WIT: text that is not JSON is
/// the plugin's `invalid` call, not a misuse of the ABI.
fn json_text(call: &str, text: &str) -> tend_sdk::Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| tend_sdk::Error::Invalid(format!("kube {call}: not JSON: {e}")))
}

/// A kube answer: the object as JSON text.
fn object_text(result: tend_sdk::Result<Value>) -> tend_sdk::Result<String> {
    result.map(|object| object.to_string())
}

pub(crate) fn call(
    host: &FakeHost,
    cap: &str,
    function: &str,
    a: &mut Args,
) -> Result<Value, String> {
    let known = functions(cap)?;
    if !known.contains(&function) {
        return Err(unknown_fn(cap, function, known));
    }
    // Each arm takes its arguments, checks none is left over, then calls.
    macro_rules! run {
        ($($name:ident: $ty:ty),* => $call:expr) => {{
            $( let $name: $ty = a.get(stringify!($name))?; )*
            a.done()?;
            $call
        }};
    }
    Ok(match (cap, function) {
        ("log", _) => run!(level: Level, message: String => {
            host.log(level, &message);
            json!({ "ok": null })
        }),
        ("state", "get") => {
            run!(key: String => answer(host.state().get(&key).map(|v| v.map(Bytes))))
        }
        ("state", "set") => {
            run!(key: String, value: Bytes => answer(host.state().set(&key, &value.0)))
        }
        ("state", "delete") => run!(key: String => answer(host.state().delete(&key))),
        ("state", _) => run!(prefix: String => answer(host.state().list_keys(&prefix))),
        ("files", "read") => run!(path: String => answer(host.files().read(&path).map(Bytes))),
        ("files", "write") => {
            run!(path: String, contents: Bytes, mode: Option<u32> =>
                answer(host.files().write(&path, &contents.0, mode)))
        }
        ("files", "remove") => run!(path: String => answer(host.files().remove(&path))),
        ("files", "list-dir") => run!(path: String => answer(host.files().list(&path))),
        ("files", _) => run!(path: String => answer(host.files().metadata(&path))),
        ("http", "send") => run!(req: Request => answer(host.http().send(&req))),
        ("http", _) => run!(reqs: Vec<Request> => {
            // One host call, not the SDK's splitting `send_all`: over 32 requests are refused.
            let results: Vec<Value> = host.http.send_batch(&reqs).into_iter().map(answer).collect();
            json!({ "ok": results })
        }),
        ("systemd", _) => systemd(host, function, a)?,
        ("cri", _) => cri(host, function, a)?,
        ("metrics", "counter-add") => {
            run!(name: String, labels: Vec<(String, String)>, value: f64 => {
                let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                answer(host.metrics().counter_add(&name, &labels, value))
            })
        }
        ("metrics", _) => run!(name: String, labels: Vec<(String, String)>, value: f64 => {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            answer(host.metrics().gauge_set(&name, &labels, value))
        }),
        ("kube", _) => kube(host, function, a)?,
        ("cloud", _) => cloud(host, function, a)?,
        _ => unreachable!("every interface of INTERFACES has an arm"),
    })
}

fn systemd(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let systemd = host.systemd();
    if function == "daemon-reload" {
        a.done()?;
        return Ok(answer(systemd.daemon_reload()));
    }
    if matches!(function, "list-units" | "enable" | "disable") {
        let key = if function == "list-units" {
            "patterns"
        } else {
            "units"
        };
        let names: Vec<String> = a.get(key)?;
        a.done()?;
        let names = strs(&names);
        return Ok(match function {
            "list-units" => answer(systemd.list_units(&names)),
            "enable" => answer(systemd.enable(&names)),
            _ => answer(systemd.disable(&names)),
        });
    }
    let unit: String = a.get("unit")?;
    a.done()?;
    Ok(match function {
        "status" => answer(systemd.status(&unit)),
        "start" => answer(systemd.start(&unit)),
        "stop" => answer(systemd.stop(&unit)),
        "restart" => answer(systemd.restart(&unit)),
        "reload-or-restart" => answer(systemd.reload_or_restart(&unit)),
        "try-restart" => answer(systemd.try_restart(&unit)),
        _ => answer(systemd.reset_failed(&unit)),
    })
}

fn cri(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let cri = host.cri();
    let result = match function {
        "version" => {
            a.done()?;
            answer(cri.version())
        }
        "list-pod-sandboxes" => {
            let filter = a.get("filter")?;
            a.done()?;
            answer(cri.list_pod_sandboxes(&filter))
        }
        "list-containers" => {
            let id: Option<String> = a.get("pod-sandbox-id")?;
            a.done()?;
            answer(cri.list_containers(id.as_deref()))
        }
        "list-images" => {
            a.done()?;
            answer(cri.list_images())
        }
        "image-status" => {
            let image: String = a.get("image")?;
            a.done()?;
            answer(cri.image_status(&image))
        }
        "pull-image" => {
            let image: String = a.get("image")?;
            let timeout: u32 = a.get("timeout-ms")?;
            a.done()?;
            answer(cri.pull_image(&image, Duration::from_millis(timeout.into())))
        }
        _ => {
            let id: String = a.get("id")?;
            a.done()?;
            match function {
                "pod-sandbox-status" => answer(cri.pod_sandbox_status(&id)),
                "stop-pod-sandbox" => answer(cri.stop_pod_sandbox(&id)),
                _ => answer(cri.remove_pod_sandbox(&id)),
            }
        }
    };
    Ok(result)
}

fn kube(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let kube = host.kube();
    let result = match function {
        "get" | "delete" => {
            let key = a.get("key")?;
            a.done()?;
            if function == "get" {
                answer(object_text(kube.get(&key)))
            } else {
                answer(kube.delete(&key))
            }
        }
        "list" | "create" => {
            let api_version: String = a.get("api-version")?;
            let kind: String = a.get("kind")?;
            let namespace: Option<String> = a.get("namespace")?;
            if function == "list" {
                let params = a.get("params")?;
                a.done()?;
                answer(kube.list(&api_version, &kind, namespace.as_deref(), &params))
            } else {
                let object: String = a.get("object")?;
                a.done()?;
                answer(object_text(json_text("create", &object).and_then(
                    |object| kube.create(&api_version, &kind, namespace.as_deref(), &object),
                )))
            }
        }
        "patch" => {
            let key = a.get("key")?;
            let patch_type = a.get("patch-type")?;
            let patch: String = a.get("patch")?;
            a.done()?;
            answer(object_text(
                json_text("patch", &patch).and_then(|patch| kube.patch(&key, patch_type, &patch)),
            ))
        }
        _ => {
            let regarding = a.get("regarding")?;
            let event_type = a.get("event-type")?;
            let reason: String = a.get("reason")?;
            let message: String = a.get("message")?;
            a.done()?;
            answer(kube.emit_event(&regarding, event_type, &reason, &message))
        }
    };
    Ok(result)
}

fn cloud(host: &FakeHost, function: &str, a: &mut Args) -> Result<Value, String> {
    let cloud = host.cloud();
    let result = match function {
        "list-instances" => {
            let owner = a.get("owner")?;
            a.done()?;
            answer(cloud.list_instances(&owner))
        }
        "list-security-groups" => {
            let ids: Vec<String> = a.get("ids")?;
            a.done()?;
            answer(cloud.list_security_groups(&strs(&ids)))
        }
        "find-security-group" => {
            let name: String = a.get("name")?;
            a.done()?;
            answer(cloud.find_security_group(&name))
        }
        "ensure-rule" => {
            let group: String = a.get("group-id")?;
            let rule: Rule = a.get("rule")?;
            a.done()?;
            answer(cloud.ensure_rule(&group, &rule))
        }
        "add-to-group" => {
            let instance: String = a.get("instance-id")?;
            let group: String = a.get("group-id")?;
            a.done()?;
            answer(cloud.add_to_group(&instance, &group))
        }
        _ => {
            let id: String = a.get("id")?;
            a.done()?;
            if function == "get-instance" {
                answer(cloud.get_instance(&id))
            } else {
                answer(cloud.delete_instance(&id))
            }
        }
    };
    Ok(result)
}

#[cfg(test)]
mod tests {
    use crate::tests::{ask, new_host};
    use serde_json::json;

    #[test]
    fn every_capability_answers_through_the_abi() {
        let host = new_host("node-probe");
        let call = |cap: &str, function: &str, args| {
            ask(json!({"op": "call", "host": host, "cap": cap, "fn": function, "args": args}))
        };
        let setup = |fake: &str, function: &str, args| {
            ask(json!({"op": "setup", "host": host, "fake": fake, "fn": function, "args": args}))
        };
        assert_eq!(
            call("files", "read", json!({"path": "/etc/hosts"})),
            json!({"err": {"kind": "denied", "message": "no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.node-probe.grants] files"}})
        );
        setup(
            "files",
            "grant",
            json!({"grant": [{"path": "/var/lib/node-probe", "write": true}]}),
        );
        let write = json!({"path": "/var/lib/node-probe/r", "contents": "aGkK", "mode": null});
        assert_eq!(call("files", "write", write), json!({"ok": true}));
        assert_eq!(
            setup("files", "get", json!({"path": "/var/lib/node-probe/r"})),
            json!({"ok": "aGkK"})
        );
        assert_eq!(
            call("state", "set", json!({"key": "runs", "value": "MQ=="})),
            json!({"ok": null})
        );
        assert_eq!(
            call("state", "get", json!({"key": "runs"})),
            json!({"ok": "MQ=="})
        );
        setup("http", "grant", json!({"grant": ["http://127.0.0.1:*/*"]}));
        setup(
            "http",
            "status",
            json!({"url": "http://127.0.0.1:1/", "status": 204}),
        );
        let req = json!({"method": "GET", "url": "http://127.0.0.1:1/", "headers": []});
        assert_eq!(
            call("http", "send", json!({"req": req}))["ok"]["status"],
            204
        );
        let all = call(
            "http",
            "send-all",
            json!({"reqs": [req, {"method": "GET", "url": "http://127.0.0.1:2/", "headers": []}]}),
        );
        assert_eq!(all["ok"][0]["ok"]["status"], 204);
        assert_eq!(all["ok"][1]["err"]["kind"], "unavailable");
        let over = call("http", "send-all", json!({"reqs": vec![req.clone(); 33]}));
        let refused = json!({"err": {"kind": "invalid", "message": "send-all takes at most 32 requests, got 33: split the call"}});
        assert_eq!(over["ok"], json!(vec![refused; 33]));
        assert_eq!(setup("http", "batches", json!({})), json!({"ok": [2]}));
        setup(
            "kube",
            "grant",
            json!({"grant": [{"resource": "nodes", "verbs": ["get"], "names": ["$NODE"]}]}),
        );
        setup(
            "kube",
            "put",
            json!({"object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}}),
        );
        let key = json!({"api-version": "v1", "kind": "Node", "namespace": null, "name": "node-1"});
        let got = call("kube", "get", json!({"key": key}));
        let object: serde_json::Value = serde_json::from_str(got["ok"].as_str().unwrap()).unwrap();
        assert_eq!(object["metadata"]["name"], "node-1");
        assert_eq!(
            call("kube", "delete", json!({"key": key}))["err"]["kind"],
            "denied"
        );
        assert_eq!(
            call("log", "log", json!({"level": "warn", "message": "m"})),
            json!({"ok": null})
        );
        assert_eq!(
            setup("host", "logs", json!({})),
            json!({"ok": [{"level": "warn", "message": "m"}]})
        );
        assert_eq!(
            call(
                "metrics",
                "gauge-set",
                json!({"name": "up", "labels": [], "value": 1})
            ),
            json!({"ok": null})
        );
        assert_eq!(
            setup("metrics", "gauge", json!({"name": "up", "labels": []})),
            json!({"ok": 1.0})
        );
        assert_eq!(
            call("systemd", "daemon-reload", json!({}))["err"]["kind"],
            "denied"
        );
        assert_eq!(call("cri", "version", json!({}))["err"]["kind"], "denied");
        let owner = json!({"owner": {"key": "k", "value": "v"}});
        assert_eq!(
            call("cloud", "list-instances", owner)["err"]["kind"],
            "denied"
        );
    }
}
