//! `cordon`, `evict` and `drain`: the remediation steps on this host's own
//! Node, each act through the gate (budgets, the fleet's ticket, the
//! journal, the dry run). The pure parts (grants, which pods a drain
//! leaves, the PodDisruptionBudget a refusal names) are
//! `tend_rules::drain`, shared with the SDK's fakes.
//!
//! A drain never deletes a pod: an eviction a PodDisruptionBudget refuses
//! is asked again (a server-side dry run first, so a blocked pod costs no
//! journal entry per retry) until the drain's deadline; then the drain
//! stops, says which budget or pod held it, and (if asked) uncordons the
//! Node and gives the fleet's ticket back. It ends in time to undo itself
//! before the reconcile's own deadline cuts it off.

use super::adapter::PluginKube;
use super::backend::{ListParams, PatchBody, PatchType, ResourceInfo, Run};
use super::grants::{Access, Verb, list_scope};
use crate::capabilities::error::CapError;
use crate::text::inert;
use crate::wit::kube::{DrainOptions, DrainReport};
use serde_json::Value;
use std::collections::BTreeMap;
use tend_rules::drain::{Disposition, check_cordon, check_evict, cordon_patch, cordoned, named};
use tokio::time::{Duration, Instant};

/// Room kept before the reconcile's deadline to undo a drain that gives up.
const UNDO_MARGIN: Duration = Duration::from_secs(5);
/// How often a drain looks at the pods still leaving.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How often a refused eviction is asked again (kubectl drain's 5 s).
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// The operations a drain's fleet ticket can have been taken for.
const DRAIN_OPERATIONS: [&str; 2] = ["kube.cordon", "kube.evict"];

/// Where one pod a drain must move stands.
struct Pending {
    namespace: String,
    name: String,
    /// Why it is still there: "terminating", a budget's refusal, an error.
    why: String,
    /// When its eviction may be asked again (None: it is leaving).
    retry_at: Option<Instant>,
    /// Refused through the gate once: later tries ask a dry run first.
    refused_once: bool,
}

impl PluginKube {
    fn node_info(&self) -> impl Future<Output = Result<ResourceInfo, CapError>> + '_ {
        self.backend.resource("", "nodes")
    }

    /// Cordon or uncordon this host's Node: `spec.unschedulable` by a merge
    /// patch, read fresh just before; a Node already so changes nothing and
    /// journals nothing. An uncordon is its own operation ("uncordon"),
    /// which no budget names: undoing a disruption is never refused.
    pub async fn cordon(&self, unschedulable: bool) -> Result<(), CapError> {
        let node = self.backend.node_name().to_string();
        check_cordon(&self.rules, &self.call.plugin, &node, unschedulable)?;
        let info = self.node_info().await?;
        let current = self.backend.get(&info, None, &node).await?;
        let patch = cordon_patch(unschedulable);
        let key = super::backend::ObjectKey {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: node.clone(),
        };
        self.object_allowed(
            &info,
            &key,
            Verb::Patch,
            Some(&current),
            Some((tend_rules::kube::PatchShape::Merge, &patch)),
        )
        .await?;
        if cordoned(&current) == unschedulable {
            return Ok(());
        }
        let operation = if unschedulable { "cordon" } else { "uncordon" };
        let target = format!("nodes/{node}");
        let body = PatchBody {
            kind: PatchType::Merge,
            body: patch,
            manager: format!("tend-{}", self.call.plugin),
        };
        let planned = async {
            let would = self
                .backend
                .patch(Run::DryRun, &info, None, &node, body.clone())
                .await;
            let diff = would
                .as_ref()
                .ok()
                .map(|w| super::adapter::object_diff(&target, Some(&current), w));
            (would.map(drop), diff)
        };
        let detail = format!("spec.unschedulable: {unschedulable}");
        self.mutate(operation, target.clone(), detail, planned, |permit| async {
            self.backend
                .patch(Run::Perform(permit), &info, None, &node, body.clone())
                .await
                .map(drop)
        })
        .await
    }

    /// Evict one pod through the Eviction API, through the gate; its grant
    /// (`create` on `pods/eviction`) is checked on the pod itself when the
    /// rule has selectors (`field-selector = "spec.nodeName=$NODE"`: only
    /// this node's pods).
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<(), CapError> {
        let node = self.backend.node_name();
        check_evict(&self.rules, &self.call.plugin, node, namespace, name)?;
        let access = Access {
            group: "",
            resource: "pods/eviction",
            verb: Verb::Create,
            namespace: Some(namespace),
            name: Some(name),
        };
        if tend_rules::kube::needs_object(&self.rules, node, &access) {
            let pods = self.backend.resource("", "pods").await?;
            let pod = self.backend.get(&pods, Some(namespace), name).await?;
            tend_rules::kube::check_object(
                &self.rules,
                &self.call.plugin,
                node,
                &access,
                Some(&pod),
                None,
            )?;
        }
        let target = format!("pods/{namespace}/{name}");
        let planned = async { (self.backend.evict(Run::DryRun, namespace, name).await, None) };
        self.mutate("evict", target, String::new(), planned, |permit| {
            self.backend.evict(Run::Perform(permit), namespace, name)
        })
        .await
    }

    /// The pods bound to this host's Node, read fresh under the grant that
    /// allows listing them (its selectors ANDed in).
    async fn node_pods(&self, pods: &ResourceInfo) -> Result<Vec<Value>, CapError> {
        let node = self.backend.node_name();
        let access = Access {
            group: "",
            resource: "pods",
            verb: Verb::List,
            namespace: None,
            name: None,
        };
        let on_node = format!("spec.nodeName={node}");
        let scope = list_scope(
            &self.rules,
            &self.call.plugin,
            node,
            &access,
            None,
            Some(&on_node),
        )?;
        let query = ListParams {
            label_selector: scope.label_selector.clone(),
            field_selector: scope.field_selector.clone(),
            ..ListParams::default()
        };
        let list = self.backend.list(pods, None, &query).await?;
        // The whole pod (a cached item's view is a summary without its
        // owners, annotations and deletion time).
        Ok(list
            .items
            .iter()
            .filter(|o| scope.admits(&o.view()))
            .filter_map(|o| serde_json::from_str::<Value>(&o.json).ok())
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .collect())
    }

    /// Drain this host's Node (see the WIT): cordon, evict all but DaemonSet
    /// and mirror pods, wait for them to be gone, until the deadline.
    pub async fn drain(&self, options: DrainOptions) -> Result<DrainReport, CapError> {
        let node = self.backend.node_name().to_string();
        let started = Instant::now();
        let within = Duration::from_millis(options.deadline_ms)
            .min(self.call.remaining().saturating_sub(UNDO_MARGIN));
        let give_up_at = started + within;
        // Every grant the drain needs, before it changes anything.
        check_cordon(&self.rules, &self.call.plugin, &node, true)?;
        if options.uncordon_on_give_up {
            check_cordon(&self.rules, &self.call.plugin, &node, false)?;
        }
        let pods = self.backend.resource("", "pods").await?;
        let first = self.node_pods(&pods).await?;
        for pod in &first {
            if tend_rules::drain::disposition(pod) == Disposition::Evict {
                let meta = &pod["metadata"];
                check_evict(
                    &self.rules,
                    &self.call.plugin,
                    &node,
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default(),
                )?;
            }
        }
        self.cordon(true).await?;
        let mut report = DrainReport {
            evicted: Vec::new(),
            skipped: Vec::new(),
            remaining: Vec::new(),
            uncordoned: false,
        };
        let mut pending: BTreeMap<String, Pending> = BTreeMap::new();
        let mut listed = Some(first);
        let stopped = loop {
            let pods_now = match listed.take() {
                Some(pods_now) => pods_now,
                None => match self.node_pods(&pods).await {
                    Ok(pods_now) => pods_now,
                    Err(e) if Instant::now() < give_up_at && !self.call.dry_run => {
                        tracing::warn!(plugin = %self.call.plugin, "drain of {node}: cannot list its pods: {e}");
                        tokio::time::sleep(LOOK_EVERY).await;
                        continue;
                    }
                    Err(e) => break Some(format!("cannot list its pods: {e}")),
                },
            };
            let here: BTreeMap<String, &Value> = pods_now.iter().map(|p| (named(p), p)).collect();
            // Evicted and gone (or gone by themselves).
            pending.retain(|pod, _| {
                let gone = !here.contains_key(pod);
                if gone {
                    report.evicted.push(pod.clone());
                }
                !gone
            });
            let mut evict_now = Vec::new();
            for (pod, object) in &here {
                match tend_rules::drain::disposition(object) {
                    Disposition::Skip(why) => {
                        let line = format!("{pod}: {why}");
                        if !report.skipped.contains(&line) {
                            report.skipped.push(line);
                        }
                    }
                    Disposition::Leaving => {
                        let entry = pending.entry(pod.clone()).or_insert_with(|| Pending {
                            namespace: object["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or_default()
                                .into(),
                            name: object["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .into(),
                            why: String::new(),
                            retry_at: None,
                            refused_once: false,
                        });
                        entry.why = "terminating".into();
                        entry.retry_at = None;
                    }
                    Disposition::Evict => {
                        let entry = pending.entry(pod.clone()).or_insert_with(|| Pending {
                            namespace: object["metadata"]["namespace"]
                                .as_str()
                                .unwrap_or_default()
                                .into(),
                            name: object["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .into(),
                            why: "not evicted yet".into(),
                            retry_at: Some(Instant::now()),
                            refused_once: false,
                        });
                        if entry.retry_at.is_some_and(|at| at <= Instant::now()) {
                            evict_now.push(pod.clone());
                        }
                    }
                }
            }
            if pending.is_empty() {
                break None;
            }
            if !evict_now.is_empty() && !self.call.dry_run {
                // The cordon, read fresh before the disruptive step: an
                // uncordon by someone else ends the drain.
                let info = self.node_info().await?;
                match self.backend.get(&info, None, &node).await {
                    Ok(current) if !cordoned(&current) => {
                        break Some("the Node was uncordoned by someone else during the drain; nothing more was evicted".into());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(plugin = %self.call.plugin, "drain of {node}: cannot read the Node: {e}");
                        evict_now.clear();
                    }
                }
            }
            for pod in evict_now {
                let entry = pending.get_mut(&pod).expect("listed above");
                let answer = match entry.refused_once && !self.call.dry_run {
                    // Still blocked? Asked without the gate: nothing is done.
                    true => match self
                        .backend
                        .evict(Run::DryRun, &entry.namespace, &entry.name)
                        .await
                    {
                        Ok(()) => self.evict(&entry.namespace, &entry.name).await,
                        refused => refused,
                    },
                    false => self.evict(&entry.namespace, &entry.name).await,
                };
                match answer {
                    Ok(()) => {
                        entry.why = "terminating".into();
                        entry.retry_at = None;
                    }
                    Err(CapError::NotFound(_)) => {
                        entry.why = "gone".into();
                        entry.retry_at = None;
                    }
                    Err(e @ (CapError::Denied(_) | CapError::Invalid(_))) => return Err(e),
                    Err(e) => {
                        let message = inert(e.message());
                        entry.why = match tend_rules::drain::blocked_reason(&message) {
                            Some(reason) => reason.to_string(),
                            None => crate::text::cut(message.into_owned(), 400),
                        };
                        entry.retry_at = Some(Instant::now() + RETRY_EVERY);
                        entry.refused_once = true;
                    }
                }
            }
            // A plan evicts nothing: one pass says what would be done.
            if self.call.dry_run {
                let (would, held): (Vec<_>, Vec<_>) = std::mem::take(&mut pending)
                    .into_iter()
                    .partition(|(_, p)| p.why == "terminating");
                report.evicted.extend(would.into_iter().map(|(pod, _)| pod));
                report
                    .remaining
                    .extend(held.into_iter().map(|(pod, p)| format!("{pod}: {}", p.why)));
                return Ok(report);
            }
            let now = Instant::now();
            if now >= give_up_at {
                break Some(format!(
                    "its deadline of {} passed",
                    humantime::format_duration(Duration::from_secs(within.as_secs()))
                ));
            }
            let next_retry = pending
                .values()
                .filter_map(|p| p.retry_at)
                .min()
                .unwrap_or(now + LOOK_EVERY);
            let wake = next_retry.min(now + LOOK_EVERY).min(give_up_at);
            tokio::time::sleep_until(wake.max(now + Duration::from_millis(50))).await;
        };
        let Some(why) = stopped else {
            return Ok(report);
        };
        report.remaining = pending
            .iter()
            .map(|(pod, p)| format!("{pod}: {}", p.why))
            .collect();
        tracing::warn!(
            plugin = %self.call.plugin,
            "drain of {node} gave up: {why}; {} pods remain: {}",
            report.remaining.len(),
            report.remaining.join("; ")
        );
        if options.uncordon_on_give_up && !why.starts_with("the Node was uncordoned") {
            match self.cordon(false).await {
                Ok(()) => {
                    report.uncordoned = true;
                    // Schedulable again: the next node may take its turn.
                    for operation in DRAIN_OPERATIONS {
                        self.call
                            .gate
                            .give_back_fleet_ticket(
                                operation,
                                "the drain gave up and uncordoned the Node",
                            )
                            .await;
                    }
                }
                Err(e) => {
                    tracing::error!(plugin = %self.call.plugin, "drain of {node} gave up but cannot uncordon it: {e}")
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests;
