//! In-memory fakes of every capability, for unit tests of plugin logic in plain
//! `cargo test`. They follow the host's contract: atomic-write semantics (report
//! whether content changed), `not-found` errors, and the host's own grant rules
//! and messages: like the host, they deny every file and URL not granted.
//!
//! ```
//! use tend_sdk::testing::FakeHost;
//! use tend_sdk::{Host, Response};
//! let host = FakeHost::named("mirror-gate");
//! host.http.grant("http://cache:5000/*");
//! host.http.respond("GET", "http://cache:5000/v2/", Ok(Response { status: 200, headers: vec![], body: vec![] }));
//! assert_eq!(host.http().send(&tend_sdk::Request::get("http://cache:5000/v2/")).unwrap().status, 200);
//! let denied = host.files().read("/etc/hosts").unwrap_err();
//! assert_eq!(denied.message(), "no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.mirror-gate.grants] files");
//! ```

use crate::log::FakeLog;
use crate::{Host, Level};

/// Every function of these WIT interfaces, by its WIT name: what the fakes'
/// `fail_call` takes, and what other languages' fakes (sdk/fakes) dispatch on.
pub use crate::cloud::CALLS as CLOUD_CALLS;
pub use crate::cri::CALLS as CRI_CALLS;
pub use crate::kube::CALLS as KUBE_CALLS;
pub use tend_rules::systemd::CALLS as SYSTEMD_CALLS;

/// What [`FakeHost::named`] needs of each capability's fake: one for the
/// plugin `plugin`, with nothing granted (the name appears in denial messages).
pub(crate) trait Fake {
    fn for_plugin(plugin: &str) -> Self;
}

/// [`FakeHost`] with one public field per listed capability, its fake, and
/// the `Host` accessors handing them out; the fakes re-exported here.
macro_rules! fake_host {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        $( pub use crate::$name::{$fake $(, $test)*}; )*

        /// A [`Host`] whose capabilities are the public fakes, for one plugin: its name
        /// appears in denial messages, as `[plugins.NAME.grants]`.
        pub struct FakeHost {
            $(
                #[doc = concat!(
                    "What [`Host::", stringify!($name), "`] hands out: grant, script and inspect it here."
                )]
                pub $name: $fake,
            )*
            plugin: String,
            log: FakeLog,
        }

        impl FakeHost {
            /// A host for the plugin `plugin`, with no grants.
            pub fn named(plugin: &str) -> Self {
                FakeHost {
                    $( $name: Fake::for_plugin(plugin), )*
                    plugin: plugin.to_string(),
                    log: FakeLog::default(),
                }
            }
        }

        impl Host for FakeHost {
            fn log(&self, level: Level, message: &str) {
                self.log.log(level, message);
            }
            $(
                fn $name(&self) -> &dyn crate::$trait {
                    &self.$name
                }
            )*
        }
    };
}
capability_list!(fake_host);

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl FakeHost {
    /// A host for a plugin named "test", with no grants.
    pub fn new() -> Self {
        FakeHost::named("test")
    }

    /// The plugin name the grants belong to.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Every line logged so far.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.log.lines()
    }
}

/// How the fakes decide one shared grant case (`tend_rules::conformance`):
/// the host runs the same cases through its adapters and compares.
pub fn decide(case: &tend_rules::conformance::Case) -> tend_rules::conformance::Expect {
    use tend_rules::Refusal;
    use tend_rules::conformance::{Expect, Op, PLUGIN, SystemdCall};
    let host = FakeHost::named(PLUGIN);
    for grant in &case.files {
        host.files
            .grant(grant.path.to_str().expect("UTF-8 grant"), grant.write);
    }
    for pattern in &case.http {
        host.http.grant(&pattern.text);
    }
    host.systemd.extend_grant(&case.systemd);
    host.cri.extend_grant(&case.cri);
    if let Op::Kube(op) = &case.op {
        return decide_kube(&host, case, op);
    }
    let files = host.files();
    let result = match &case.op {
        Op::Read(path) => files.read(path).map(drop),
        Op::Write(path) => files.write(path, b"x", None).map(drop),
        Op::WriteMode(path, mode) => files.write(path, b"x", Some(*mode)).map(drop),
        Op::Remove(path) => files.remove(path).map(drop),
        Op::List(path) => files.list(path).map(drop),
        Op::Stat(path) => files.metadata(path).map(drop),
        Op::Send { method, url } => {
            let mut request = crate::Request::get(url);
            request.method.clone_from(method);
            host.http().send(&request).map(drop)
        }
        Op::Kube(_) => unreachable!("decided above"),
        Op::Systemd(call) => {
            let systemd = host.systemd();
            match call {
                SystemdCall::Status(unit) => systemd.status(unit).map(drop),
                SystemdCall::ListUnits(patterns) => {
                    let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
                    systemd.list_units(&patterns).map(drop)
                }
                SystemdCall::Restart(unit) => systemd.restart(unit).map(drop),
                SystemdCall::Enable(units) => {
                    let units: Vec<&str> = units.iter().map(String::as_str).collect();
                    systemd.enable(&units)
                }
                SystemdCall::DaemonReload => systemd.daemon_reload(),
            }
        }
        Op::CriRemove(id) => host.cri().remove_pod_sandbox(id),
        Op::CriList(labels) => {
            let filter = crate::cri::SandboxFilter {
                labels: labels.clone(),
                ..Default::default()
            };
            host.cri().list_pod_sandboxes(&filter).map(drop)
        }
        Op::Cloud(call) => {
            use tend_rules::conformance::CloudCall;
            host.cloud.extend_grant(&case.cloud);
            let cloud = host.cloud();
            match call {
                CloudCall::ListInstances { tag, value } => cloud
                    .list_instances(&crate::OwnerTag::new(tag, value))
                    .map(drop),
                CloudCall::GetInstance(id) => cloud.get_instance(id).map(drop),
                CloudCall::DeleteInstance(id) => cloud.delete_instance(id),
                CloudCall::FindSecurityGroup(name) => cloud.find_security_group(name).map(drop),
                CloudCall::EnsureRule { group, cidr } => {
                    let rule = crate::Rule {
                        direction: crate::Direction::Ingress,
                        ether_type: crate::EtherType::Ipv4,
                        protocol: crate::Protocol::Tcp,
                        ports: None,
                        remote: crate::Remote::Cidr(cidr.clone()),
                        description: None,
                    };
                    cloud.ensure_rule(group, &rule).map(drop)
                }
                CloudCall::EnsureGroupRule {
                    group,
                    protocol,
                    ports,
                    remote,
                } => {
                    let rule = crate::Rule {
                        direction: crate::Direction::Ingress,
                        ether_type: crate::EtherType::Ipv4,
                        protocol: match protocol.as_str() {
                            "any" => crate::Protocol::Any,
                            _ => crate::Protocol::Tcp,
                        },
                        ports: ports.map(|(min, max)| crate::PortRange { min, max }),
                        remote: crate::Remote::Group(remote.clone()),
                        description: None,
                    };
                    cloud.ensure_rule(group, &rule).map(drop)
                }
            }
        }
        Op::StateSet { key, len } => host.state().set(key, &vec![0; *len]),
        Op::Metric {
            counter: true,
            name,
        } => host.metrics().counter_add(name, &[], 1.0),
        Op::Metric {
            counter: false,
            name,
        } => host.metrics().gauge_set(name, &[], 1.0),
    };
    match result {
        Err(crate::Error::Denied(m)) => Expect::Refused(Refusal::Denied(m)),
        Err(crate::Error::Invalid(m)) => Expect::Refused(Refusal::Invalid(m)),
        Ok(()) | Err(_) => Expect::Allowed,
    }
}

/// A kube case of the shared table, on the fake holding its objects.
fn decide_kube(
    host: &FakeHost,
    case: &tend_rules::conformance::Case,
    op: &tend_rules::conformance::KubeOp,
) -> tend_rules::conformance::Expect {
    use tend_rules::Refusal;
    use tend_rules::conformance::{Expect, KUBE_OWN_LEASE, KubeCall, kube_objects};
    use tend_rules::kube::PatchShape;
    for object in kube_objects() {
        host.kube.put(object);
    }
    host.kube.grant(case.kube.clone());
    host.kube.set_own_lease(KUBE_OWN_LEASE.0, KUBE_OWN_LEASE.1);
    let kube = host.kube();
    let key = crate::ObjectKey {
        api_version: op.api_version.clone(),
        kind: op.kind.clone(),
        namespace: op.namespace.clone(),
        name: op.name.clone(),
    };
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON body");
    let result = match &op.call {
        KubeCall::Get => kube.get(&key).map(drop),
        KubeCall::List { labels, fields } => {
            let params = crate::ListParams {
                label_selector: labels.clone(),
                field_selector: fields.clone(),
                ..Default::default()
            };
            match kube.list(&op.api_version, &op.kind, op.namespace.as_deref(), &params) {
                Ok(list) => {
                    let mut names: Vec<String> =
                        list.names().into_iter().map(str::to_string).collect();
                    names.sort();
                    return Expect::Listed(names);
                }
                Err(e) => Err(e),
            }
        }
        KubeCall::Create(body) => kube
            .create(
                &op.api_version,
                &op.kind,
                op.namespace.as_deref(),
                &json(body),
            )
            .map(drop),
        KubeCall::Patch(shape, body) => {
            let patch_type = match shape {
                PatchShape::Merge => crate::PatchType::Merge,
                PatchShape::Json => crate::PatchType::Json,
                PatchShape::Apply => crate::PatchType::Apply,
            };
            kube.patch(&key, patch_type, &json(body)).map(drop)
        }
        KubeCall::Delete => kube.delete(&key),
        KubeCall::Event { reason, message } => {
            kube.emit_event(&key, crate::EventType::Normal, reason, message)
        }
    };
    match result {
        Err(crate::Error::Denied(m)) => Expect::Refused(Refusal::Denied(m)),
        Err(crate::Error::Invalid(m)) => Expect::Refused(Refusal::Invalid(m)),
        Ok(()) | Err(_) => Expect::Allowed,
    }
}

/// Scripted failures of a fake: every call, or one call by its WIT name,
/// fails with a given error until cleared. Shared by the fakes that offer
/// `fail_with` and `fail_call`.
pub(crate) struct ScriptedFailures {
    /// The fake's name and its calls, for the message of an unknown call.
    fake: &'static str,
    calls: &'static [&'static str],
    all: std::cell::RefCell<Option<crate::Error>>,
    by_call: std::cell::RefCell<std::collections::BTreeMap<String, crate::Error>>,
}

impl ScriptedFailures {
    pub(crate) fn new(fake: &'static str, calls: &'static [&'static str]) -> Self {
        ScriptedFailures {
            fake,
            calls,
            all: Default::default(),
            by_call: Default::default(),
        }
    }

    pub(crate) fn fail_with(&self, error: Option<crate::Error>) {
        *self.all.borrow_mut() = error;
    }

    pub(crate) fn fail_call(&self, call: &str, error: Option<crate::Error>) {
        assert!(
            self.calls.contains(&call),
            "{}::fail_call: no call {call:?}, expected one of {:?}",
            self.fake,
            self.calls
        );
        let mut failures = self.by_call.borrow_mut();
        match error {
            Some(error) => failures.insert(call.to_string(), error),
            None => failures.remove(call),
        };
    }

    /// The scripted failure of `call`, if any.
    pub(crate) fn check(&self, call: &str) -> crate::Result<()> {
        match self.all.borrow().clone() {
            Some(error) => Err(error),
            None => self.by_call.borrow().get(call).cloned().map_or(Ok(()), Err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    #[test]
    fn a_new_host_denies_files_and_http_naming_the_plugin() {
        let host = FakeHost::new();
        assert_eq!(host.plugin(), "test");
        let err = host.files().write("/etc/a", b"", None).unwrap_err();
        assert!(
            err.message().ends_with("to [plugins.test.grants] files"),
            "{err}"
        );
        let host = FakeHost::named("mirror-gate");
        let err = host
            .http()
            .send(&Request::get("http://127.0.0.1:5000/v2/"))
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert!(
            err.message()
                .ends_with("to [plugins.mirror-gate.grants] http"),
            "{err}"
        );
        host.log(Level::Info, "hello");
        assert_eq!(host.logs(), [(Level::Info, "hello".to_string())]);
    }

    /// The fakes decide every shared case as the host does.
    #[test]
    fn fakes_agree_with_the_conformance_cases() {
        for case in tend_rules::conformance::cases() {
            assert_eq!(decide(&case), case.expect, "{:?}", case.op);
        }
    }
}
