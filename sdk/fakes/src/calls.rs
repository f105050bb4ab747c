//! Plugin calls: each WIT function of world `plugin`, by its WIT name, on the
//! [`Host`] of a fake, its answer the WIT result as JSON. The arguments are
//! taken by the generated dispatch (`dispatch.rs`); what is here is how each
//! function reaches the Rust fakes, whose methods take Rust's shapes.

use crate::dispatch::{Functions, dispatch};
use crate::wit::{Bytes, answer};
use crate::{Args, unknown_fn};
use serde_json::{Value, json};
use std::time::Duration;
use tend_rules::wit::INTERFACES;
use tend_sdk::testing::FakeHost;
use tend_sdk::{
    ConditionReport, DrainOptions, Host, Level, ListParams, LogFilter, LogSource, ObjectKey,
    OwnerTag, PatchType, Request, Rule, SandboxFilter,
};

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

pub(crate) fn call(
    host: &FakeHost,
    cap: &str,
    function: &str,
    a: &mut Args,
) -> Result<Value, String> {
    let known = functions(cap)?;
    dispatch(host, cap, function, a)?.ok_or_else(|| unknown_fn(cap, function, known))
}

/// `&[String]` as the `&[&str]` the SDK's traits take.
fn strs(items: &[String]) -> Vec<&str> {
    items.iter().map(String::as_str).collect()
}

/// Metric labels as the `&[(&str, &str)]` the SDK's trait takes.
fn label_refs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
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

impl Functions for FakeHost {
    fn logs_matches(&self) -> Value {
        answer(self.logs().matches())
    }
    fn logs_read(
        &self,
        source: LogSource,
        since: Option<String>,
        filter: LogFilter,
        max: u32,
    ) -> Value {
        answer(self.logs().read(source, since.as_deref(), &filter, max))
    }
    fn conditions_set(&self, report: ConditionReport) -> Value {
        answer(self.conditions().set(&report))
    }
    fn conditions_clear(&self, condition: String, reason: String, message: String) -> Value {
        answer(self.conditions().clear(&condition, &reason, &message))
    }
    fn conditions_list(&self) -> Value {
        answer(self.conditions().list())
    }
    fn log_log(&self, level: Level, message: String) -> Value {
        self.log(level, &message);
        json!({ "ok": null })
    }
    fn state_get(&self, key: String) -> Value {
        answer(self.state().get(&key).map(|v| v.map(Bytes)))
    }
    fn state_set(&self, key: String, value: Bytes) -> Value {
        answer(self.state().set(&key, &value.0))
    }
    fn state_delete(&self, key: String) -> Value {
        answer(self.state().delete(&key))
    }
    fn state_list_keys(&self, prefix: String) -> Value {
        answer(self.state().list_keys(&prefix))
    }
    fn files_read(&self, path: String) -> Value {
        answer(self.files().read(&path).map(Bytes))
    }
    fn files_write(&self, path: String, contents: Bytes, mode: Option<u32>) -> Value {
        answer(self.files().write(&path, &contents.0, mode))
    }
    fn files_remove(&self, path: String) -> Value {
        answer(self.files().remove(&path))
    }
    fn files_list_dir(&self, path: String) -> Value {
        answer(self.files().list(&path))
    }
    fn files_stat(&self, path: String) -> Value {
        answer(self.files().metadata(&path))
    }
    fn http_send(&self, req: Request) -> Value {
        answer(self.http().send(&req))
    }
    fn http_send_all(&self, reqs: Vec<Request>) -> Value {
        // One host call, not the SDK's splitting `send_all`: over 32 requests are refused.
        let results: Vec<Value> = self
            .http
            .send_batch(&reqs)
            .into_iter()
            .map(answer)
            .collect();
        json!({ "ok": results })
    }
    fn systemd_status(&self, unit: String) -> Value {
        answer(self.systemd().status(&unit))
    }
    fn systemd_list_units(&self, patterns: Vec<String>) -> Value {
        answer(self.systemd().list_units(&strs(&patterns)))
    }
    fn systemd_start(&self, unit: String) -> Value {
        answer(self.systemd().start(&unit))
    }
    fn systemd_stop(&self, unit: String) -> Value {
        answer(self.systemd().stop(&unit))
    }
    fn systemd_restart(&self, unit: String) -> Value {
        answer(self.systemd().restart(&unit))
    }
    fn systemd_reload_or_restart(&self, unit: String) -> Value {
        answer(self.systemd().reload_or_restart(&unit))
    }
    fn systemd_try_restart(&self, unit: String) -> Value {
        answer(self.systemd().try_restart(&unit))
    }
    fn systemd_reset_failed(&self, unit: String) -> Value {
        answer(self.systemd().reset_failed(&unit))
    }
    fn systemd_enable(&self, units: Vec<String>) -> Value {
        answer(self.systemd().enable(&strs(&units)))
    }
    fn systemd_disable(&self, units: Vec<String>) -> Value {
        answer(self.systemd().disable(&strs(&units)))
    }
    fn systemd_daemon_reload(&self) -> Value {
        answer(self.systemd().daemon_reload())
    }
    fn cri_version(&self) -> Value {
        answer(self.cri().version())
    }
    fn cri_list_pod_sandboxes(&self, filter: SandboxFilter) -> Value {
        answer(self.cri().list_pod_sandboxes(&filter))
    }
    fn cri_pod_sandbox_status(&self, id: String) -> Value {
        answer(self.cri().pod_sandbox_status(&id))
    }
    fn cri_stop_pod_sandbox(&self, id: String) -> Value {
        answer(self.cri().stop_pod_sandbox(&id))
    }
    fn cri_remove_pod_sandbox(&self, id: String) -> Value {
        answer(self.cri().remove_pod_sandbox(&id))
    }
    fn cri_list_containers(&self, pod_sandbox_id: Option<String>) -> Value {
        answer(self.cri().list_containers(pod_sandbox_id.as_deref()))
    }
    fn cri_list_images(&self) -> Value {
        answer(self.cri().list_images())
    }
    fn cri_image_status(&self, image: String) -> Value {
        answer(self.cri().image_status(&image))
    }
    fn cri_pull_image(&self, image: String, timeout_ms: u32) -> Value {
        let timeout = Duration::from_millis(timeout_ms.into());
        answer(self.cri().pull_image(&image, timeout))
    }
    fn metrics_counter_add(
        &self,
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    ) -> Value {
        answer(
            self.metrics()
                .counter_add(&name, &label_refs(&labels), value),
        )
    }
    fn metrics_gauge_set(&self, name: String, labels: Vec<(String, String)>, value: f64) -> Value {
        answer(self.metrics().gauge_set(&name, &label_refs(&labels), value))
    }
    fn kube_get(&self, key: ObjectKey) -> Value {
        answer(object_text(self.kube().get(&key)))
    }
    fn kube_list(
        &self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        params: ListParams,
    ) -> Value {
        answer(
            self.kube()
                .list(&api_version, &kind, namespace.as_deref(), &params),
        )
    }
    fn kube_create(
        &self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        object: String,
    ) -> Value {
        let created = json_text("create", &object).and_then(|object| {
            self.kube()
                .create(&api_version, &kind, namespace.as_deref(), &object)
        });
        answer(object_text(created))
    }
    fn kube_patch(&self, key: ObjectKey, patch_type: PatchType, patch: String) -> Value {
        let patched = json_text("patch", &patch)
            .and_then(|patch| self.kube().patch(&key, patch_type, &patch));
        answer(object_text(patched))
    }
    fn kube_delete(&self, key: ObjectKey) -> Value {
        answer(self.kube().delete(&key))
    }
    fn kube_emit_event(
        &self,
        regarding: ObjectKey,
        event_type: tend_sdk::EventType,
        reason: String,
        message: String,
    ) -> Value {
        answer(
            self.kube()
                .emit_event(&regarding, event_type, &reason, &message),
        )
    }
    fn kube_cordon(&self, unschedulable: bool) -> Value {
        answer(self.kube().cordon(unschedulable))
    }
    fn kube_evict(&self, namespace: String, name: String) -> Value {
        answer(self.kube().evict(&namespace, &name))
    }
    fn kube_drain(&self, options: DrainOptions) -> Value {
        answer(self.kube().drain(&options))
    }
    fn cloud_list_instances(&self, owner: OwnerTag) -> Value {
        answer(self.cloud().list_instances(&owner))
    }
    fn cloud_get_instance(&self, id: String) -> Value {
        answer(self.cloud().get_instance(&id))
    }
    fn cloud_delete_instance(&self, id: String) -> Value {
        answer(self.cloud().delete_instance(&id))
    }
    fn cloud_list_security_groups(&self, ids: Vec<String>) -> Value {
        answer(self.cloud().list_security_groups(&strs(&ids)))
    }
    fn cloud_find_security_group(&self, name: String) -> Value {
        answer(self.cloud().find_security_group(&name))
    }
    fn cloud_ensure_rule(&self, group_id: String, rule: Rule) -> Value {
        answer(self.cloud().ensure_rule(&group_id, &rule))
    }
    fn cloud_add_to_group(&self, instance_id: String, group_id: String) -> Value {
        answer(self.cloud().add_to_group(&instance_id, &group_id))
    }
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
            setup("host", "log-lines", json!({})),
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

    #[test]
    fn cordon_evict_and_drain_answer_as_the_rust_fake() {
        let host = new_host("drainer");
        let call = |function: &str, args| {
            ask(json!({"op": "call", "host": host, "cap": "kube", "fn": function, "args": args}))
        };
        let setup = |function: &str, args| {
            ask(json!({"op": "setup", "host": host, "fake": "kube", "fn": function, "args": args}))
        };
        let options = json!({"options": {"deadline-ms": 60000, "uncordon-on-give-up": true}});
        assert_eq!(
            call("cordon", json!({"unschedulable": true})),
            json!({"err": {"kind": "denied", "message": "no kube grant allows patch nodes named node-1: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-1\"] } to [plugins.drainer.grants] kube"}})
        );
        assert_eq!(call("drain", options.clone())["err"]["kind"], "denied");
        setup(
            "grant",
            json!({"grant": [
                {"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["spec.unschedulable"]},
                {"resource": "pods", "verbs": ["list", "get"], "field-selector": "spec.nodeName=$NODE"},
                {"resource": "pods/eviction", "verbs": ["create"], "field-selector": "spec.nodeName=$NODE"},
            ]}),
        );
        setup(
            "put",
            json!({"object": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}}),
        );
        for name in ["web", "db", "api"] {
            setup(
                "put",
                json!({"object": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": "node-1"}}}),
            );
        }
        assert_eq!(
            call(
                "evict",
                json!({"namespace": "default", "name": "web/status"})
            )["err"]["kind"],
            "invalid"
        );
        assert_eq!(
            call("evict", json!({"namespace": "default", "name": "api"})),
            json!({"ok": null})
        );
        assert_eq!(
            setup(
                "block-eviction",
                json!({"namespace": "default", "name": "db", "budget": "db-pdb"})
            ),
            json!({"ok": null})
        );
        let blocked = call("evict", json!({"namespace": "default", "name": "db"}));
        assert_eq!(blocked["err"]["kind"], "budget-exhausted");
        assert_eq!(
            call("drain", options.clone()),
            json!({"ok": {
                "evicted": ["default/web"],
                "skipped": [],
                "remaining": ["default/db: [pdb:default/db-pdb] blocked by PodDisruptionBudget default/db-pdb"],
                "uncordoned": true,
            }})
        );
        setup(
            "unblock-eviction",
            json!({"namespace": "default", "name": "db"}),
        );
        setup("uncordon-during-drain", json!({"evictions": 0}));
        let stopped = call("drain", options);
        assert_eq!(
            stopped["ok"]["remaining"],
            json!(["default/db: not evicted yet"])
        );
        assert_eq!(stopped["ok"]["uncordoned"], false);
        assert_eq!(
            setup("actions", json!({})),
            json!({"ok": [
                "evict pods/default/api",
                "cordon nodes/node-1",
                "evict pods/default/web",
                "uncordon nodes/node-1",
                "cordon nodes/node-1",
            ]})
        );
    }

    #[test]
    fn conditions_expire_on_the_fakes_clock() {
        let host = new_host("problem-detector");
        let call = |function: &str, args| {
            ask(
                json!({"op": "call", "host": host, "cap": "conditions", "fn": function, "args": args}),
            )
        };
        let setup = |function: &str, args| {
            ask(
                json!({"op": "setup", "host": host, "fake": "conditions", "fn": function, "args": args}),
            )
        };
        let report = json!({"report": {"condition": "KernelDeadlock", "reason": "TaskHung", "message": "blocked", "ttl-seconds": 60}});
        assert_eq!(call("set", report.clone())["err"]["kind"], "denied");
        setup("grant", json!({"grant": ["KernelDeadlock"]}));
        assert_eq!(call("set", report), json!({"ok": null}));
        let set_at = setup("now", json!({}))["ok"].as_u64().unwrap();
        setup("advance", json!({"seconds": 61}));
        let held = &call("list", json!({}))["ok"][0];
        assert_eq!(
            *held,
            json!({
                "condition": "KernelDeadlock", "active": false, "reason": "Expired",
                "message": "not reported again within 60s: was TaskHung: blocked",
                "since": set_at + 60, "expires-in": null, "written": true,
            })
        );
    }
}
