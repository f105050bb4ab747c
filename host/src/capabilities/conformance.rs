//! The host's adapters and the SDK's fakes decide every shared grant case the
//! same way, with the same message: a plugin's unit tests see what the real
//! host would answer.

use super::capability::AlwaysGranted;
use super::cloud::{
    Direction, EtherType, OwnerTag, PluginCloud, PortRange, Protocol, Remote, Rule,
};
use super::cri::{PluginCri, SandboxFilter};
use super::files::PluginFiles;
use super::http::{HttpRequest, PluginHttp};
use super::kube::{EventType, ListParams, ObjectKey, OwnLease, PatchType, PluginKube};
use super::metrics::{Kind, PluginMetrics};
use super::state::PluginState;
use super::systemd::{JobKind, Operation as SystemdOperation, PluginSystemd};
use super::testing::call;
use super::{CapError, Capability};
use tend_rules::Refusal;
use tend_rules::conformance::{
    self, Case, CloudCall, Expect, KUBE_OWN_LEASE, KubeCall, KubeOp, Op, SystemdCall,
};
use tend_rules::kube::PatchShape;

fn decision(result: Result<(), (Option<&'static str>, String)>) -> Expect {
    match result {
        Err((Some("denied"), m)) => Expect::Refused(Refusal::Denied(m)),
        Err((Some("invalid"), m)) => Expect::Refused(Refusal::Invalid(m)),
        _ => Expect::Allowed,
    }
}

fn host_side(error: CapError) -> (Option<&'static str>, String) {
    let kind = error.kind();
    let message = match error {
        CapError::Denied(m) | CapError::Invalid(m) => m,
        other => other.to_string(),
    };
    (Some(kind), message)
}

/// A kube case on the host's adapter over its fake backend, holding the
/// table's objects.
async fn kube_on_the_host(case: &Case, op: &KubeOp) -> Expect {
    let call = call(conformance::PLUGIN, false);
    let (backend, fake) = PluginKube::fake();
    for object in conformance::kube_objects() {
        let plural = format!(
            "{}s",
            object["kind"].as_str().expect("a kind").to_lowercase()
        );
        fake.put(&plural, object);
    }
    fake.set_own_lease(OwnLease {
        namespace: KUBE_OWN_LEASE.0.into(),
        name: KUBE_OWN_LEASE.1.into(),
    });
    let kube = PluginKube::for_call(&backend, &case.kube, &call);
    let key = ObjectKey {
        api_version: op.api_version.clone(),
        kind: op.kind.clone(),
        namespace: op.namespace.clone(),
        name: op.name.clone(),
    };
    let result = match &op.call {
        KubeCall::Get => kube.get(&key).await.map(drop),
        KubeCall::List { labels, fields } => {
            let query = ListParams {
                label_selector: labels.clone(),
                field_selector: fields.clone(),
                ..ListParams::default()
            };
            match kube
                .list(&op.api_version, &op.kind, op.namespace.as_deref(), &query)
                .await
            {
                Ok(listed) => {
                    let mut names: Vec<String> = listed
                        .items
                        .iter()
                        .map(|text| serde_json::from_str::<serde_json::Value>(text).expect("JSON")["metadata"]["name"].as_str().expect("a name").to_string())
                        .collect();
                    names.sort();
                    return Expect::Listed(names);
                }
                Err(e) => Err(e),
            }
        }
        KubeCall::Create(body) => kube
            .create(&op.api_version, &op.kind, op.namespace.as_deref(), body)
            .await
            .map(drop),
        KubeCall::Patch(shape, body) => {
            let kind = match shape {
                PatchShape::Merge => PatchType::Merge,
                PatchShape::Json => PatchType::Json,
                PatchShape::Apply => PatchType::Apply,
            };
            kube.patch(&key, kind, body).await.map(drop)
        }
        KubeCall::Delete => kube.delete(&key).await,
        KubeCall::Event { reason, message } => {
            kube.emit_event(&key, EventType::Normal, reason, message)
                .await
        }
    };
    decision(result.map_err(host_side))
}

async fn on_the_host(case: &Case) -> Expect {
    if let Op::Kube(op) = &case.op {
        return kube_on_the_host(case, op).await;
    }
    let call = call(conformance::PLUGIN, false);
    let (backend, _) = PluginFiles::fake();
    let files = PluginFiles::for_call(&backend, &case.files, &call);
    let (backend, _) = PluginHttp::fake();
    let http = PluginHttp::for_call(&backend, &case.http, &call);
    let result = match &case.op {
        Op::Read(path) => files.read(path.clone()).await.map(drop),
        Op::Write(path) => files
            .write(path.clone(), b"x".to_vec(), None)
            .await
            .map(drop),
        Op::WriteMode(path, mode) => files
            .write(path.clone(), b"x".to_vec(), Some(*mode))
            .await
            .map(drop),
        Op::Remove(path) => files.remove(path.clone()).await.map(drop),
        Op::List(path) => files.list(path.clone()).await.map(drop),
        Op::Stat(path) => files.metadata(path.clone()).await.map(drop),
        Op::Send { method, url } => {
            let request = HttpRequest {
                method: method.clone(),
                url: url.clone(),
                headers: vec![],
                body: None,
                timeout_ms: None,
            };
            http.send(request).await.map(drop)
        }
        Op::Kube(_) => unreachable!("decided above"),
        Op::Systemd(systemd) => {
            let (backend, _) = PluginSystemd::fake();
            let adapter = PluginSystemd::for_call(&backend, &case.systemd, &call);
            match systemd {
                SystemdCall::Status(unit) => adapter.status(unit).await.map(drop),
                SystemdCall::ListUnits(patterns) => adapter.list_units(patterns).await.map(drop),
                SystemdCall::Restart(unit) => adapter
                    .job(SystemdOperation::Restart, JobKind::Restart, unit)
                    .await
                    .map(drop),
                SystemdCall::Enable(units) => {
                    adapter
                        .unit_files(SystemdOperation::Enable, units.clone())
                        .await
                }
                SystemdCall::DaemonReload => adapter.daemon_reload().await,
            }
        }
        Op::CriRemove(id) => {
            let (backend, _) = PluginCri::fake();
            PluginCri::for_call(&backend, &case.cri, &call)
                .remove_pod_sandbox(id)
                .await
        }
        Op::CriList(labels) => {
            let (backend, _) = PluginCri::fake();
            let filter = SandboxFilter {
                labels: labels.clone(),
                ..SandboxFilter::default()
            };
            PluginCri::for_call(&backend, &case.cri, &call)
                .list_pod_sandboxes(&filter)
                .await
                .map(drop)
        }
        Op::Cloud(cloud) => {
            let (backend, _) = PluginCloud::fake();
            let adapter = PluginCloud::for_call(&backend, &case.cloud, &call);
            match cloud {
                CloudCall::ListInstances { tag, value } => adapter
                    .list_instances(&OwnerTag {
                        key: tag.clone(),
                        value: value.clone(),
                    })
                    .await
                    .map(drop),
                CloudCall::GetInstance(id) => adapter.get_instance(id).await.map(drop),
                CloudCall::DeleteInstance(id) => adapter.delete_instance(id).await,
                CloudCall::FindSecurityGroup(name) => {
                    adapter.find_security_group(name).await.map(drop)
                }
                CloudCall::EnsureRule { group, cidr } => {
                    let rule = Rule {
                        direction: Direction::Ingress,
                        ether_type: EtherType::Ipv4,
                        protocol: Protocol::Tcp,
                        ports: None,
                        remote: Remote::Cidr(cidr.clone()),
                        description: None,
                    };
                    adapter.ensure_rule(group, &rule).await.map(drop)
                }
                CloudCall::EnsureGroupRule {
                    group,
                    protocol,
                    ports,
                    remote,
                } => {
                    let rule = Rule {
                        direction: Direction::Ingress,
                        ether_type: EtherType::Ipv4,
                        protocol: match protocol.as_str() {
                            "any" => Protocol::Any,
                            _ => Protocol::Tcp,
                        },
                        ports: ports.map(|(min, max)| PortRange { min, max }),
                        remote: Remote::Group(remote.clone()),
                        description: None,
                    };
                    adapter.ensure_rule(group, &rule).await.map(drop)
                }
            }
        }
        Op::StateSet { key, len } => {
            let (backend, _) = PluginState::fake();
            PluginState::for_call(&backend, &AlwaysGranted, &call)
                .set(key, vec![0; *len])
                .await
        }
        Op::Metric { counter, name } => {
            let (backend, _) = PluginMetrics::fake();
            let kind = if *counter { Kind::Counter } else { Kind::Gauge };
            PluginMetrics::for_call(&backend, &AlwaysGranted, &call).record(kind, name, &[], 1.0)
        }
    };
    decision(result.map_err(host_side))
}

#[tokio::test]
async fn host_and_sdk_fake_agree_on_every_grant_case() {
    let cases = conformance::cases();
    assert!(cases.len() >= 100, "the table covers the rules");
    for case in &cases {
        let host = on_the_host(case).await;
        let sdk = tend_sdk::testing::decide(case);
        assert_eq!(host, sdk, "host and SDK disagree on {:?}", case.op);
        assert_eq!(host, case.expect, "{:?}", case.op);
    }
}
