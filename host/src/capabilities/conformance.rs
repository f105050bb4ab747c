//! The host answers every case of the shared table
//! (`tend_conformance`) as the table says, through the same WIT
//! functions a plugin calls (the `Host` trait of each interface, behind
//! `Call::answer`), on fakes holding the table's fixture. The SDK's fakes run
//! the same table (`sdk/fakes`, and through them Python and JavaScript), so a
//! plugin's unit tests see what the real host would answer.
//!
//! Cases are WIT JSON (`sdk/fakes/README.md`); the host's bindgen types
//! read serde's JSON. [`Wit`] converts between the two by the WIT types
//! themselves (wit-parser on `wit/`), so no record is re-typed here.

use super::Capability;
use super::capability::AlwaysGranted;
use super::cloud::PluginCloud;
use super::conditions::PluginConditions;
use super::cri::PluginCri;
use super::files::PluginFiles;
use super::http::PluginHttp;
use super::kube::{OwnLease, PluginKube};
use super::log::PluginLog;
use super::logs::{self, PluginLogs};
use super::metrics::PluginMetrics;
use super::state::PluginState;
use super::systemd::PluginSystemd;
use super::testing::call;
use crate::wit::conditions as wit_conditions;
use crate::wit::logs as wit_logs;
use crate::wit::{cloud, cri, files, http, kube, log, metrics, state, systemd};
use heck::{ToSnakeCase, ToUpperCamelCase};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tend_conformance::{self as conformance, Case, fixture};
use wit_parser::{Function, Resolve, Type, TypeDefKind};

/// `wit/`, to convert values by their WIT types.
struct Wit {
    resolve: Resolve,
}

/// A list's or tuple's elements, each converted by its type.
fn elements<'t>(
    types: impl Iterator<Item = &'t Type>,
    value: &Value,
    convert: impl Fn(&Type, &Value) -> Value,
) -> Value {
    let items = value.as_array().expect("a list or tuple");
    Value::Array(types.zip(items).map(|(ty, v)| convert(ty, v)).collect())
}

impl Wit {
    fn load() -> Wit {
        let mut resolve = Resolve::default();
        resolve
            .push_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit"))
            .expect("wit/ parses");
        Wit { resolve }
    }

    fn function(&self, interface: &str, name: &str) -> &Function {
        self.resolve
            .interfaces
            .iter()
            .find(|(_, i)| i.name.as_deref() == Some(interface))
            .and_then(|(_, i)| i.functions.get(name))
            .unwrap_or_else(|| panic!("no WIT function {interface}.{name}"))
    }

    fn named(&self, interface: &str, name: &str) -> Type {
        let (_, iface) = self
            .resolve
            .interfaces
            .iter()
            .find(|(_, i)| i.name.as_deref() == Some(interface))
            .expect("an interface");
        Type::Id(iface.types[name])
    }

    /// A WIT JSON value of type `ty` as serde reads the bindgen type.
    fn to_serde(&self, ty: &Type, value: &Value) -> Value {
        let Type::Id(id) = ty else {
            return value.clone();
        };
        match &self.resolve.types[*id].kind {
            TypeDefKind::Type(inner) => self.to_serde(inner, value),
            TypeDefKind::Option(_) if value.is_null() => Value::Null,
            TypeDefKind::Option(inner) => self.to_serde(inner, value),
            TypeDefKind::Record(record) => Value::Object(
                record
                    .fields
                    .iter()
                    .map(|f| {
                        (
                            f.name.to_snake_case(),
                            self.to_serde(&f.ty, &value[&f.name]),
                        )
                    })
                    .collect(),
            ),
            TypeDefKind::Enum(_) => {
                json!(value.as_str().expect("an enum case").to_upper_camel_case())
            }
            TypeDefKind::Variant(variant) => {
                let (case, payload) = match value {
                    Value::String(case) => (case.as_str(), None),
                    Value::Object(one) => {
                        let (case, payload) = one.iter().next().expect("a variant case");
                        (case.as_str(), Some(payload))
                    }
                    other => panic!("not a variant: {other}"),
                };
                let ty = variant
                    .cases
                    .iter()
                    .find(|c| c.name == case)
                    .expect("a case");
                match (&ty.ty, payload) {
                    (Some(ty), Some(payload)) => {
                        json!({case.to_upper_camel_case(): self.to_serde(ty, payload)})
                    }
                    _ => json!(case.to_upper_camel_case()),
                }
            }
            TypeDefKind::List(Type::U8) => {
                use base64::Engine;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(value.as_str().expect("base64"))
                    .expect("base64");
                json!(bytes)
            }
            TypeDefKind::List(item) => {
                elements(std::iter::repeat(item), value, |t, v| self.to_serde(t, v))
            }
            TypeDefKind::Tuple(tuple) => {
                elements(tuple.types.iter(), value, |t, v| self.to_serde(t, v))
            }
            other => panic!("no conversion for {other:?}"),
        }
    }

    /// A bindgen value (as serde writes it) of type `ty` as WIT JSON; the
    /// WIT `error` as `{"kind", "message"}`.
    fn to_wit(&self, ty: &Type, value: &Value) -> Value {
        let Type::Id(id) = ty else {
            return value.clone();
        };
        let def = &self.resolve.types[*id];
        match &def.kind {
            TypeDefKind::Type(inner) => self.to_wit(inner, value),
            TypeDefKind::Option(_) if value.is_null() => Value::Null,
            TypeDefKind::Option(inner) => self.to_wit(inner, value),
            TypeDefKind::Record(record) => Value::Object(
                record
                    .fields
                    .iter()
                    .map(|f| {
                        (
                            f.name.clone(),
                            self.to_wit(&f.ty, &value[f.name.to_snake_case()]),
                        )
                    })
                    .collect(),
            ),
            TypeDefKind::Enum(e) => {
                let case = value.as_str().expect("an enum case");
                let name = e
                    .cases
                    .iter()
                    .find(|c| c.name.to_upper_camel_case() == case)
                    .expect("a case");
                json!(name.name)
            }
            TypeDefKind::Variant(variant) => {
                let (case, payload) = match value {
                    Value::String(case) => (case.as_str(), &Value::Null),
                    Value::Object(one) => {
                        let (case, payload) = one.iter().next().expect("a variant case");
                        (case.as_str(), payload)
                    }
                    other => panic!("not a variant: {other}"),
                };
                let case = variant
                    .cases
                    .iter()
                    .find(|c| c.name.to_upper_camel_case() == case)
                    .expect("a case");
                match (&case.ty, def.name.as_deref()) {
                    (Some(ty), Some("error")) => {
                        json!({"kind": case.name, "message": self.to_wit(ty, payload)})
                    }
                    (Some(ty), _) => json!({case.name.clone(): self.to_wit(ty, payload)}),
                    (None, _) => json!(case.name),
                }
            }
            TypeDefKind::Result(result) => match value {
                Value::Object(one) if one.contains_key("Ok") => {
                    json!({"ok": result.ok.map(|ty| self.to_wit(&ty, &one["Ok"]))})
                }
                Value::Object(one) => {
                    json!({"err": result.err.map(|ty| self.to_wit(&ty, &one["Err"]))})
                }
                other => panic!("not a result: {other}"),
            },
            TypeDefKind::List(Type::U8) => {
                use base64::Engine;
                let bytes: Vec<u8> = serde_json::from_value(value.clone()).expect("bytes");
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            TypeDefKind::List(item) => {
                elements(std::iter::repeat(item), value, |t, v| self.to_wit(t, v))
            }
            TypeDefKind::Tuple(tuple) => {
                elements(tuple.types.iter(), value, |t, v| self.to_wit(t, v))
            }
            other => panic!("no conversion for {other:?}"),
        }
    }

    /// A value of the named WIT type (`cri`, `pod-sandbox`) as its bindgen type.
    fn typed<T: DeserializeOwned>(&self, interface: &str, name: &str, value: &Value) -> T {
        let serde = self.to_serde(&self.named(interface, name), value);
        serde_json::from_value(serde).unwrap_or_else(|e| panic!("{interface}.{name}: {e}"))
    }
}

/// One call's arguments and how to answer it.
struct Args<'a> {
    wit: &'a Wit,
    function: &'a Function,
    args: &'a Value,
}

impl Args<'_> {
    /// The argument at `index`, as the bindgen type the `Host` method takes.
    fn at<T: DeserializeOwned>(&self, index: usize) -> T {
        let param = &self.function.params[index];
        let serde = self.wit.to_serde(&param.ty, &self.args[&param.name]);
        serde_json::from_value(serde)
            .unwrap_or_else(|e| panic!("{}({}): {e}", self.function.name, param.name))
    }

    /// The WIT function's answer as WIT JSON (`{"ok"}` or `{"err"}`); a trap
    /// fails the test.
    fn answer<T: Serialize>(&self, answer: wasmtime::Result<T>) -> Value {
        let value = serde_json::to_value(answer.expect("no trap")).expect("serializable");
        match &self.function.result {
            Some(ty) => self.wit.to_wit(ty, &value),
            None => json!({"ok": null}),
        }
    }
}

/// Each capability's adapter for one case, on fakes holding the fixture.
struct Node {
    files: PluginFiles,
    http: PluginHttp,
    state: PluginState,
    log: PluginLog,
    metrics: PluginMetrics,
    systemd: PluginSystemd,
    cri: PluginCri,
    kube: PluginKube,
    cloud: PluginCloud,
    logs: PluginLogs,
    conditions: PluginConditions,
}

impl Node {
    fn for_case(wit: &Wit, case: &Case) -> Node {
        let call = call(conformance::PLUGIN, false);
        let (files_backend, files) = PluginFiles::fake();
        let (http_backend, http) = PluginHttp::fake();
        let (systemd_backend, systemd) = PluginSystemd::fake();
        let (cri_backend, cri) = PluginCri::fake();
        let (kube_backend, kube) = PluginKube::fake();
        let (cloud_backend, cloud) = PluginCloud::fake();
        let (logs_backend, logs) = PluginLogs::fake();
        let (conditions_backend, _) = PluginConditions::fake();
        for request in fixture::setup_requests() {
            let args = &request["args"];
            let text = |key: &str| args[key].as_str().expect("text").to_string();
            match (request["fake"].as_str(), request["fn"].as_str()) {
                (Some("files"), Some("put")) => {
                    use base64::Engine;
                    let contents = base64::engine::general_purpose::STANDARD
                        .decode(text("contents"))
                        .expect("base64");
                    files.put(&text("path"), &contents);
                }
                (Some("http"), Some("status")) => http.respond(
                    &text("url"),
                    args["status"].as_u64().expect("a status") as u16,
                ),
                (Some("systemd"), Some("set-unit")) => {
                    systemd.set_unit(&text("unit"), &text("active-state"))
                }
                (Some("cri"), Some("set-version")) => {
                    cri.set_version(&text("name"), &text("version"))
                }
                (Some("cri"), Some("put-sandbox")) => {
                    cri.add_pod(wit.typed("cri", "pod-sandbox", &args["sandbox"]))
                }
                (Some("cri"), Some("add-container")) => {
                    cri.add_container(wit.typed("cri", "container", &args["container"]))
                }
                (Some("cri"), Some("add-image")) => cri.add_image(&text("reference")),
                (Some("cloud"), Some("put-instance")) => {
                    cloud.add_instance(wit.typed("cloud", "instance", &args["instance"]))
                }
                (Some("cloud"), Some("put-group")) => {
                    let group: cloud::SecurityGroup =
                        wit.typed("cloud", "security-group", &args["group"]);
                    cloud.add_group(&group.id, &group.name, group.rules)
                }
                (Some("logs"), Some(source)) => {
                    let source = if source == "kernel" {
                        logs::Source::Kernel
                    } else {
                        logs::Source::Journal
                    };
                    let priority = args["priority"].as_u64().expect("a priority") as u8;
                    logs.write(
                        source,
                        priority,
                        args["unit"].as_str(),
                        args["identifier"].as_str(),
                        &text("message"),
                    )
                }
                (Some("conditions"), Some("hold")) => conditions_backend.hold(
                    conformance::PLUGIN,
                    &text("condition"),
                    args["active"].as_bool().expect("active"),
                    &text("reason"),
                    &text("message"),
                ),
                (Some("kube"), Some("set-node-name")) => {
                    assert_eq!(text("node"), "node-1", "the host's fake node is node-1")
                }
                (Some("kube"), Some("set-own-lease")) => kube.set_own_lease(OwnLease {
                    namespace: text("namespace"),
                    name: text("name"),
                }),
                (Some("kube"), Some("put")) => {
                    let object = &args["object"];
                    let kind = object["kind"].as_str().expect("a kind").to_lowercase();
                    kube.put(&format!("{kind}s"), object.clone())
                }
                _ => panic!("no host fixture for {request}"),
            }
        }
        Node {
            files: PluginFiles::for_call(&files_backend, &case.files, &Default::default(), &call),
            http: PluginHttp::for_call(&http_backend, &case.http, &Default::default(), &call),
            state: PluginState::for_call(
                &PluginState::fake().0,
                &AlwaysGranted,
                &Default::default(),
                &call,
            ),
            log: PluginLog::for_call(
                &PluginLog::fake().0,
                &AlwaysGranted,
                &Default::default(),
                &call,
            ),
            metrics: PluginMetrics::for_call(
                &PluginMetrics::fake().0,
                &AlwaysGranted,
                &Default::default(),
                &call,
            ),
            systemd: PluginSystemd::for_call(
                &systemd_backend,
                &case.systemd,
                &Default::default(),
                &call,
            ),
            cri: PluginCri::for_call(&cri_backend, &case.cri, &Default::default(), &call),
            kube: PluginKube::for_call(&kube_backend, &case.kube, &Default::default(), &call),
            cloud: PluginCloud::for_call(&cloud_backend, &case.cloud, &Default::default(), &call),
            logs: PluginLogs::for_call(&logs_backend, &case.logs, &Default::default(), &call),
            conditions: PluginConditions::for_call(
                &conditions_backend,
                &case.conditions,
                &Default::default(),
                &call,
            ),
        }
    }

    /// WIT function `cap`.`function` with `args` (WIT JSON), answered as WIT
    /// JSON, through the interface's `Host` trait.
    async fn call(&mut self, wit: &Wit, cap: &str, function: &str, args: &Value) -> Value {
        let a = Args {
            wit,
            function: wit.function(cap, function),
            args,
        };
        match (cap, function) {
            ("log", "log") => a.answer(log::Host::log(&mut self.log, a.at(0), a.at(1)).await),
            ("state", "get") => a.answer(state::Host::get(&mut self.state, a.at(0)).await),
            ("state", "set") => a.answer(state::Host::set(&mut self.state, a.at(0), a.at(1)).await),
            ("state", "delete") => a.answer(state::Host::delete(&mut self.state, a.at(0)).await),
            ("state", "list-keys") => {
                a.answer(state::Host::list_keys(&mut self.state, a.at(0)).await)
            }
            ("files", "read") => a.answer(files::Host::read(&mut self.files, a.at(0)).await),
            ("files", "write") => {
                a.answer(files::Host::write(&mut self.files, a.at(0), a.at(1), a.at(2)).await)
            }
            ("files", "remove") => a.answer(files::Host::remove(&mut self.files, a.at(0)).await),
            ("files", "list-dir") => {
                a.answer(files::Host::list_dir(&mut self.files, a.at(0)).await)
            }
            ("files", "stat") => a.answer(files::Host::stat(&mut self.files, a.at(0)).await),
            ("http", "send") => a.answer(http::Host::send(&mut self.http, a.at(0)).await),
            ("http", "send-all") => {
                // A list of results, not a result: every request answers.
                json!({"ok": a.answer(http::Host::send_all(&mut self.http, a.at(0)).await)})
            }
            ("metrics", "counter-add") => a.answer(
                metrics::Host::counter_add(&mut self.metrics, a.at(0), a.at(1), a.at(2)).await,
            ),
            ("metrics", "gauge-set") => a.answer(
                metrics::Host::gauge_set(&mut self.metrics, a.at(0), a.at(1), a.at(2)).await,
            ),
            ("systemd", "status") => {
                a.answer(systemd::Host::status(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "list-units") => {
                a.answer(systemd::Host::list_units(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "start") => {
                a.answer(systemd::Host::start(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "stop") => a.answer(systemd::Host::stop(&mut self.systemd, a.at(0)).await),
            ("systemd", "restart") => {
                a.answer(systemd::Host::restart(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "reload-or-restart") => {
                a.answer(systemd::Host::reload_or_restart(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "try-restart") => {
                a.answer(systemd::Host::try_restart(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "reset-failed") => {
                a.answer(systemd::Host::reset_failed(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "enable") => {
                a.answer(systemd::Host::enable(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "disable") => {
                a.answer(systemd::Host::disable(&mut self.systemd, a.at(0)).await)
            }
            ("systemd", "daemon-reload") => {
                a.answer(systemd::Host::daemon_reload(&mut self.systemd).await)
            }
            ("cri", "version") => a.answer(cri::Host::version(&mut self.cri).await),
            ("cri", "list-pod-sandboxes") => {
                a.answer(cri::Host::list_pod_sandboxes(&mut self.cri, a.at(0)).await)
            }
            ("cri", "pod-sandbox-status") => {
                a.answer(cri::Host::pod_sandbox_status(&mut self.cri, a.at(0)).await)
            }
            ("cri", "stop-pod-sandbox") => {
                a.answer(cri::Host::stop_pod_sandbox(&mut self.cri, a.at(0)).await)
            }
            ("cri", "remove-pod-sandbox") => {
                a.answer(cri::Host::remove_pod_sandbox(&mut self.cri, a.at(0)).await)
            }
            ("cri", "list-containers") => {
                a.answer(cri::Host::list_containers(&mut self.cri, a.at(0)).await)
            }
            ("cri", "list-images") => a.answer(cri::Host::list_images(&mut self.cri).await),
            ("cri", "image-status") => {
                a.answer(cri::Host::image_status(&mut self.cri, a.at(0)).await)
            }
            ("cri", "pull-image") => {
                a.answer(cri::Host::pull_image(&mut self.cri, a.at(0), a.at(1)).await)
            }
            ("kube", "get") => a.answer(kube::Host::get(&mut self.kube, a.at(0)).await),
            ("kube", "list") => {
                a.answer(kube::Host::list(&mut self.kube, a.at(0), a.at(1), a.at(2), a.at(3)).await)
            }
            ("kube", "create") => a.answer(
                kube::Host::create(&mut self.kube, a.at(0), a.at(1), a.at(2), a.at(3)).await,
            ),
            ("kube", "patch") => {
                a.answer(kube::Host::patch(&mut self.kube, a.at(0), a.at(1), a.at(2)).await)
            }
            ("kube", "delete") => a.answer(kube::Host::delete(&mut self.kube, a.at(0)).await),
            ("kube", "emit-event") => a.answer(
                kube::Host::emit_event(&mut self.kube, a.at(0), a.at(1), a.at(2), a.at(3)).await,
            ),
            ("kube", "cordon") => a.answer(kube::Host::cordon(&mut self.kube, a.at(0)).await),
            ("kube", "evict") => {
                a.answer(kube::Host::evict(&mut self.kube, a.at(0), a.at(1)).await)
            }
            ("kube", "drain") => a.answer(kube::Host::drain(&mut self.kube, a.at(0)).await),
            ("conditions", "set") => {
                a.answer(wit_conditions::Host::set(&mut self.conditions, a.at(0)).await)
            }
            ("conditions", "clear") => a.answer(
                wit_conditions::Host::clear(&mut self.conditions, a.at(0), a.at(1), a.at(2)).await,
            ),
            ("conditions", "list") => {
                a.answer(wit_conditions::Host::list(&mut self.conditions).await)
            }
            ("logs", "matches") => a.answer(wit_logs::Host::matches(&mut self.logs).await),
            ("logs", "read") => a.answer(
                wit_logs::Host::read(&mut self.logs, a.at(0), a.at(1), a.at(2), a.at(3)).await,
            ),
            ("cloud", "list-instances") => {
                a.answer(cloud::Host::list_instances(&mut self.cloud, a.at(0)).await)
            }
            ("cloud", "get-instance") => {
                a.answer(cloud::Host::get_instance(&mut self.cloud, a.at(0)).await)
            }
            ("cloud", "delete-instance") => {
                a.answer(cloud::Host::delete_instance(&mut self.cloud, a.at(0)).await)
            }
            ("cloud", "list-security-groups") => {
                a.answer(cloud::Host::list_security_groups(&mut self.cloud, a.at(0)).await)
            }
            ("cloud", "find-security-group") => {
                a.answer(cloud::Host::find_security_group(&mut self.cloud, a.at(0)).await)
            }
            ("cloud", "ensure-rule") => {
                a.answer(cloud::Host::ensure_rule(&mut self.cloud, a.at(0), a.at(1)).await)
            }
            ("cloud", "add-to-group") => {
                a.answer(cloud::Host::add_to_group(&mut self.cloud, a.at(0), a.at(1)).await)
            }
            _ => panic!("no WIT function {cap}.{function}"),
        }
    }
}

#[tokio::test]
async fn the_host_answers_every_case_as_the_table_says() {
    let wit = Wit::load();
    let mut wrong = Vec::new();
    let cases = conformance::cases();
    for case in &cases {
        let mut node = Node::for_case(&wit, case);
        for seed in fixture::seed_calls() {
            let (cap, function) = (seed["cap"].as_str().unwrap(), seed["fn"].as_str().unwrap());
            let answer = node.call(&wit, cap, function, &seed["args"]).await;
            assert!(answer.get("ok").is_some(), "{seed}: {answer}");
        }
        let (cap, function, args) = case.op.call();
        let answer = node.call(&wit, cap, function, &args).await;
        let got = conformance::outcome(cap, function, &answer);
        if got != case.expect {
            let shown: String = args.to_string().chars().take(160).collect();
            wrong.push(format!(
                "{cap}.{function} {shown}\n  expected {:?}\n  got      {got:?}",
                case.expect
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

/// The conversions keep every shape a case uses: a round trip of a rule.
#[test]
fn wit_json_round_trips_through_the_bindgen_types() {
    let wit = Wit::load();
    let rule = json!({
        "direction": "ingress", "ether-type": "ipv6", "protocol": {"number": 6},
        "ports": {"min": 1, "max": 2}, "remote": {"group": "sg-1"}, "description": null,
    });
    let typed: cloud::Rule = wit.typed("cloud", "rule", &rule);
    assert_eq!(typed.protocol, cloud::Protocol::Number(6));
    let back = wit.to_wit(
        &wit.named("cloud", "rule"),
        &serde_json::to_value(&typed).unwrap(),
    );
    assert_eq!(back, rule);
}
