//! The fleet's state in the Kubernetes API: each class's ledger in the
//! annotation of a Lease `tend-fleet-<class>`, each tend's node Lease
//! `tend-node-<node>`, all in `[host.fleet] namespace`, and the Nodes as the
//! kubelets report them. Every answer is bounded: pages of Nodes up to a
//! limit, a ledger's size.

use super::ledger::{Ledger, NodeFacts, POOL_LABELS};
use super::revision::{MAX_REPORT_BYTES, Publish, Published, REPORT_ANNOTATION};
use super::rollout::{
    COMMAND_ANNOTATION, MAX_COMMAND_BYTES, MAX_ROLLOUT_BYTES, ROLLOUT_ANNOTATION, ROLLOUT_LEASE,
};
use super::store::{FleetStore, RolloutLease, Versioned};
use super::{LEASE_PREFIX, LEDGER_ANNOTATION, ledger_lease};
use crate::capabilities::CapError;
use crate::capabilities::kube::{connect, map_error, user_agent};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The label every node Lease carries, to list them.
pub const NODE_LEASE_LABEL: &str = "tend.dev/node-lease";
/// A fresh value with every renewal of a node Lease.
const RENEWAL_ANNOTATION: &str = "tend.dev/renewal";
/// A ledger larger than this is not Tend's: refused (fail closed).
const MAX_LEDGER_BYTES: usize = 64 * 1024;
const PAGE: u32 = 500;
/// At most this many Nodes are read (20 pages).
const MAX_NODES: usize = 10_000;
/// kured's lock, on its DaemonSet.
const KURED_LOCK: &str = "weave.works/kured-node-lock";

/// The node Lease of `node`: its name when it fits a Lease name, else a hash.
pub fn node_lease(node: &str) -> String {
    let name = format!("{LEASE_PREFIX}node-{node}");
    let valid =
        tend_rules::ident::check("node Lease", &name, &tend_rules::ident::KUBE_NAME).is_ok();
    match valid {
        true => name,
        false => format!(
            "{LEASE_PREFIX}node-{}",
            crate::capabilities::gate::target_hash(node)
        ),
    }
}

pub struct KubeFleet {
    namespace: String,
    kured: Option<(String, String)>,
    medik8s: bool,
    liveness_seconds: i32,
    identity: String,
    kubeconfig: Option<PathBuf>,
    client: tokio::sync::OnceCell<kube::Client>,
}

impl KubeFleet {
    pub fn new(
        settings: &super::FleetSettings,
        identity: String,
        kubeconfig: Option<PathBuf>,
    ) -> KubeFleet {
        KubeFleet {
            namespace: settings.namespace.clone(),
            kured: settings.kured.clone(),
            medik8s: settings.medik8s,
            liveness_seconds: settings.liveness.as_secs().min(i32::MAX as u64) as i32,
            identity,
            kubeconfig,
            client: tokio::sync::OnceCell::new(),
        }
    }

    async fn client(&self) -> Result<kube::Client, CapError> {
        let agent = user_agent(&self.identity);
        self.client
            .get_or_try_init(|| connect(self.kubeconfig.as_deref(), &agent, true))
            .await
            .cloned()
    }

    async fn leases(&self) -> Result<Api<Lease>, CapError> {
        Ok(Api::namespaced(self.client().await?, &self.namespace))
    }

    /// Write the Lease `name` with `annotation` as its only one, if it is
    /// still at `version` (create it when None): `conflict` when someone
    /// wrote it since, or created it first.
    async fn put_lease(
        &self,
        name: &str,
        annotation: &str,
        text: String,
        version: Option<&str>,
    ) -> Result<(), CapError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace.clone()),
                resource_version: version.map(str::to_string),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "tend".to_string(),
                    )]
                    .into(),
                ),
                annotations: Some([(annotation.to_string(), text)].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec::default()),
        };
        let api = self.leases().await?;
        let written = match version {
            None => api.create(&PostParams::default(), &lease).await,
            Some(_) => api.replace(name, &PostParams::default(), &lease).await,
        };
        written
            .map(drop)
            .map_err(|e| match map_error("write lease", e) {
                CapError::Conflict(m) => CapError::Conflict(m),
                other if other.message().contains("AlreadyExists") => {
                    CapError::Conflict(other.message().into())
                }
                other => other,
            })
    }

    /// The rollout Lease's text as it changes (None: no Lease, or none
    /// readable), from a watch of that one Lease: a node learns of an abort
    /// at once and asks the API server nothing in between. The watch starts
    /// again by itself after an error, backing off; an error is an item.
    pub async fn rollout_changes(
        &self,
    ) -> Result<
        impl futures_util::Stream<Item = Result<Option<String>, String>> + Send + use<>,
        CapError,
    > {
        use futures_util::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let api = self.leases().await?;
        let config = watcher::Config::default().fields(&format!("metadata.name={ROLLOUT_LEASE}"));
        let text = |lease: &Lease| {
            let annotations = lease.metadata.annotations.as_ref();
            let text = annotations.and_then(|a| a.get(ROLLOUT_ANNOTATION))?;
            (text.len() <= MAX_ROLLOUT_BYTES).then(|| text.clone())
        };
        // What the listing found is told once it is whole.
        let mut listing: Option<Option<String>> = None;
        let changes = watcher(api, config)
            .default_backoff()
            .filter_map(move |event| {
                let change = match event {
                    Ok(watcher::Event::Init) => {
                        listing = Some(None);
                        None
                    }
                    Ok(watcher::Event::InitApply(lease)) => {
                        listing = Some(text(&lease));
                        None
                    }
                    Ok(watcher::Event::InitDone) => listing.take().map(Ok),
                    Ok(watcher::Event::Apply(lease)) => Some(Ok(text(&lease))),
                    Ok(watcher::Event::Delete(_)) => Some(Ok(None)),
                    Err(e) => Some(Err(e.to_string())),
                };
                std::future::ready(change)
            });
        Ok(changes)
    }

    /// Every node's own Lease, page by page, with its holder: only a node's
    /// own Lease proves it alive or reports for it (a Lease of another name
    /// carrying the label, anyone's, does neither). At most [`MAX_NODES`]
    /// Leases are listed, a node's own or not: past them, an error.
    async fn each_node_lease(&self, mut take: impl FnMut(String, Lease)) -> Result<(), CapError> {
        let mut params = ListParams::default().labels(NODE_LEASE_LABEL).limit(PAGE);
        let api = self.leases().await?;
        let mut listed = 0;
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| map_error("list leases", e))?;
            listed += page.items.len();
            if listed > MAX_NODES {
                return Err(CapError::Invalid(format!(
                    "over {MAX_NODES} Leases labelled {NODE_LEASE_LABEL} in the namespace"
                )));
            }
            for lease in page.items {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                if lease.metadata.name.as_deref() == Some(node_lease(&holder).as_str()) {
                    take(holder, lease);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }
}

fn facts(node: Node) -> NodeFacts {
    let labels = node.metadata.labels.unwrap_or_default();
    let status = node.status.unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    NodeFacts {
        name: node.metadata.name.unwrap_or_default(),
        uid: node.metadata.uid.unwrap_or_default(),
        pool: POOL_LABELS
            .iter()
            .find_map(|label| labels.get(*label).cloned())
            .unwrap_or_default(),
        zone: labels
            .get("topology.kubernetes.io/zone")
            .cloned()
            .unwrap_or_default(),
        ready: conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        cordoned: node.spec.and_then(|s| s.unschedulable).unwrap_or(false),
        conditions: conditions
            .into_iter()
            .filter(|c| c.status == "True" && c.type_ != "Ready")
            .map(|c| c.type_)
            .collect(),
    }
}

/// The nodes kured's lock names (one lock, or kured's multi-lock); None
/// when the lock is there but unreadable (the caller fails closed).
fn kured_holders(annotation: &str) -> Option<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Lock {
        #[serde(rename = "nodeID", default)]
        node_id: String,
    }
    #[derive(serde::Deserialize)]
    struct Multi {
        #[serde(default)]
        locks: Vec<Lock>,
    }
    if annotation.is_empty() {
        return Some(vec![]);
    }
    if let Ok(multi) = serde_json::from_str::<Multi>(annotation)
        && !multi.locks.is_empty()
    {
        return Some(multi.locks.into_iter().map(|l| l.node_id).collect());
    }
    serde_json::from_str::<Lock>(annotation)
        .ok()
        .map(|l| [l.node_id].into_iter().filter(|n| !n.is_empty()).collect())
}

/// Now, as a Lease's MicroTime; an error, not a panic, for a clock out of range.
fn micro_now() -> Result<MicroTime, CapError> {
    Timestamp::try_from(std::time::SystemTime::now())
        .and_then(|now| Timestamp::from_microsecond(now.as_microsecond()))
        .map(MicroTime)
        .map_err(|e| CapError::Invalid(format!("this host's clock is out of range: {e}")))
}

#[async_trait::async_trait]
impl FleetStore for KubeFleet {
    async fn ledger(&self, class: &str) -> Result<Versioned, CapError> {
        let name = ledger_lease(class);
        let Some(lease) = self
            .leases()
            .await?
            .get_opt(&name)
            .await
            .map_err(|e| map_error("get lease", e))?
        else {
            return Ok(Versioned::default());
        };
        let text = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEDGER_ANNOTATION))
            .map(String::as_str)
            .unwrap_or("{}");
        if text.len() > MAX_LEDGER_BYTES {
            return Err(CapError::Invalid(format!(
                "lease {name}: its {LEDGER_ANNOTATION} is over {MAX_LEDGER_BYTES} bytes"
            )));
        }
        let ledger: Ledger = serde_json::from_str(text).map_err(|e| {
            CapError::Invalid(format!(
                "lease {name}: its {LEDGER_ANNOTATION} is not a ledger: {e}"
            ))
        })?;
        Ok(Versioned {
            ledger,
            version: lease.metadata.resource_version,
        })
    }

    async fn write(
        &self,
        class: &str,
        ledger: &Ledger,
        version: Option<&str>,
    ) -> Result<(), CapError> {
        let text = serde_json::to_string(ledger).expect("a ledger serializes");
        self.put_lease(&ledger_lease(class), LEDGER_ANNOTATION, text, version)
            .await
    }

    async fn rollout(&self) -> Result<RolloutLease, CapError> {
        let Some(lease) = self
            .leases()
            .await?
            .get_opt(ROLLOUT_LEASE)
            .await
            .map_err(|e| map_error("get lease", e))?
        else {
            return Ok(RolloutLease::default());
        };
        let mut annotations = lease.metadata.annotations.unwrap_or_default();
        // Bounded: a text too long is kept empty, which no parse accepts.
        let mut take = |key: &str, max: usize| {
            annotations.remove(key).map(|text| {
                if text.len() > max {
                    String::new()
                } else {
                    text
                }
            })
        };
        Ok(RolloutLease {
            rollout: take(ROLLOUT_ANNOTATION, MAX_ROLLOUT_BYTES),
            command: take(COMMAND_ANNOTATION, MAX_COMMAND_BYTES),
            version: lease.metadata.resource_version,
        })
    }

    async fn write_rollout(&self, rollout: &str, version: Option<&str>) -> Result<(), CapError> {
        self.put_lease(
            ROLLOUT_LEASE,
            ROLLOUT_ANNOTATION,
            rollout.to_string(),
            version,
        )
        .await
    }

    async fn order(&self, order: &str) -> Result<(), CapError> {
        let patch =
            serde_json::json!({ "metadata": { "annotations": { COMMAND_ANNOTATION: order } } });
        self.leases()
            .await?
            .patch(
                ROLLOUT_LEASE,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(drop)
            .map_err(|e| map_error("patch lease", e))
    }

    async fn nodes(&self) -> Result<Vec<NodeFacts>, CapError> {
        let api: Api<Node> = Api::all(self.client().await?);
        let mut nodes = Vec::new();
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| map_error("list nodes", e))?;
            nodes.extend(page.items.into_iter().map(facts));
            if nodes.len() > MAX_NODES {
                return Err(CapError::Invalid(format!(
                    "the cluster has over {MAX_NODES} Nodes: more than a fleet budget reads"
                )));
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(nodes),
            }
        }
    }

    async fn node(&self, name: &str) -> Result<NodeFacts, CapError> {
        let api: Api<Node> = Api::all(self.client().await?);
        api.get(name)
            .await
            .map(facts)
            .map_err(|e| map_error("get node", e))
    }

    async fn node_leases(&self) -> Result<BTreeMap<String, String>, CapError> {
        let mut leases = BTreeMap::new();
        self.each_node_lease(|holder, lease| {
            if let Some(version) = lease.metadata.resource_version {
                leases.insert(holder, version);
            }
        })
        .await?;
        Ok(leases)
    }

    async fn reports(&self) -> Result<Vec<Published>, CapError> {
        let now = micro_now()?.0;
        let mut reports = Vec::new();
        self.each_node_lease(|node, lease| {
            // Renewed within its duration by this reader's clock: what a
            // display can say of a Lease it reads once (a rollout judges
            // liveness on its own monotonic clock, as `observed` does).
            let fresh = lease.spec.as_ref().is_some_and(|spec| {
                let renewed = spec.renew_time.as_ref().map(|t| t.0);
                let duration = spec.lease_duration_seconds.unwrap_or(0).max(0);
                renewed.is_some_and(|at| {
                    at.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                        duration.into(),
                    ))
                    .is_ok_and(|until| until >= now)
                })
            });
            let report = lease
                .metadata
                .annotations
                .and_then(|mut a| a.remove(REPORT_ANNOTATION))
                // Kept no longer than a report can be: up to 10,000 of
                // anyone's annotations are read, and one too long is
                // unreadable anyway.
                .map(|r| match r.len() > MAX_REPORT_BYTES {
                    true => String::new(),
                    false => r,
                });
            reports.push(Published {
                node,
                report,
                fresh,
            });
        })
        .await?;
        Ok(reports)
    }

    async fn renew(&self, node: &str, publish: Publish<'_>) -> Result<(), CapError> {
        let name = node_lease(node);
        let api = self.leases().await?;
        let now = micro_now()?;
        // A nonce: a renewal always changes the Lease (a new resourceVersion),
        // even from a host whose clock stands still.
        let mut renewal = serde_json::json!({
            "spec": { "holderIdentity": node, "renewTime": now, "leaseDurationSeconds": self.liveness_seconds }
        });
        let nonce = format!("{:016x}", fastrand::u64(..));
        let mut annotations = BTreeMap::from([(RENEWAL_ANNOTATION.to_string(), nonce)]);
        if let Publish::Set(report) = publish {
            annotations.insert(REPORT_ANNOTATION.to_string(), report.to_string());
        }
        renewal["metadata"]["annotations"] = serde_json::json!(annotations);
        // A merge patch's null removes the last process's report.
        if publish == Publish::Remove {
            renewal["metadata"]["annotations"][REPORT_ANNOTATION] = serde_json::Value::Null;
        }
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&renewal))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(self.namespace.clone()),
                        labels: Some(
                            [
                                (NODE_LEASE_LABEL.to_string(), "true".to_string()),
                                (
                                    "app.kubernetes.io/managed-by".to_string(),
                                    "tend".to_string(),
                                ),
                            ]
                            .into(),
                        ),
                        annotations: Some(annotations),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(node.to_string()),
                        renew_time: Some(now),
                        lease_duration_seconds: Some(self.liveness_seconds),
                        ..LeaseSpec::default()
                    }),
                };
                api.create(&PostParams::default(), &lease)
                    .await
                    .map(drop)
                    .map_err(|e| map_error("create lease", e))
            }
            Err(e) => Err(map_error("renew lease", e)),
        }
    }

    async fn others(&self) -> Result<BTreeMap<String, String>, CapError> {
        let client = self.client().await?;
        let mut others = BTreeMap::new();
        if let Some((namespace, name)) = &self.kured {
            let api: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
            let daemonset = api
                .get_opt(name)
                .await
                .map_err(|e| map_error("get kured's daemonset", e))?;
            let lock = daemonset
                .and_then(|d| d.metadata.annotations)
                .and_then(|mut a| a.remove(KURED_LOCK))
                .unwrap_or_default();
            let Some(nodes) = kured_holders(&lock) else {
                return Err(CapError::Invalid(format!(
                    "kured's lock annotation {KURED_LOCK} on {namespace}/{name} is not a lock kured writes"
                )));
            };
            for node in nodes {
                others.insert(node, "kured".to_string());
            }
        }
        if self.medik8s {
            let kinds = [
                (
                    "self-node-remediation.medik8s.io",
                    "v1alpha1",
                    "SelfNodeRemediation",
                    "selfnoderemediations",
                    false,
                ),
                (
                    "nodemaintenance.medik8s.io",
                    "v1beta1",
                    "NodeMaintenance",
                    "nodemaintenances",
                    true,
                ),
            ];
            for (group, version, kind, plural, by_spec) in kinds {
                let resource = ApiResource {
                    group: group.into(),
                    version: version.into(),
                    api_version: format!("{group}/{version}"),
                    kind: kind.into(),
                    plural: plural.into(),
                };
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                let list = match api.list(&ListParams::default().limit(PAGE)).await {
                    Ok(list) => list,
                    // Medik8s (or this part of it) is not installed.
                    Err(kube::Error::Api(status)) if status.code == 404 => continue,
                    Err(e) => return Err(map_error(&format!("list {plural}.{group}"), e)),
                };
                if list.metadata.continue_.is_some_and(|c| !c.is_empty()) {
                    return Err(CapError::Invalid(format!(
                        "over {PAGE} {plural}.{group}: more than a fleet budget reads"
                    )));
                }
                for object in list.items {
                    let node = match by_spec {
                        true => object.data["spec"]["nodeName"].as_str().map(str::to_string),
                        false => object.metadata.name.clone(),
                    };
                    if let Some(node) = node {
                        others.insert(node, format!("Medik8s {kind}"));
                    }
                }
            }
        }
        Ok(others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kured_single_and_multi_locks_name_their_nodes() {
        assert_eq!(
            kured_holders(
                r#"{"nodeID":"node-3","metadata":{"unschedulable":false},"created":"2026-01-01T00:00:00Z","TTL":0}"#
            ),
            Some(vec!["node-3".to_string()])
        );
        assert_eq!(
            kured_holders(r#"{"maxOwners":2,"locks":[{"nodeID":"a"},{"nodeID":"b"}]}"#),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(kured_holders(""), Some(vec![]));
        assert_eq!(kured_holders(r#"{"nodeID":""}"#), Some(vec![]));
        // A lock that is there but unreadable fails closed.
        assert_eq!(kured_holders("not json"), None);
    }

    #[test]
    fn a_node_lease_name_fits_whatever_the_node_name() {
        assert_eq!(node_lease("n1"), "tend-node-n1");
        let long = "a".repeat(250);
        assert!(node_lease(&long).len() <= 253);
        assert_ne!(node_lease(&long), node_lease(&"b".repeat(250)));
        // A name that would address another path is hashed, never used.
        assert!(!node_lease("a/../b?x=1").contains('/'));
    }
}
