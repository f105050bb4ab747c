//! `cordon`, `evict` and `drain`: the remediation steps on this host's own
//! Node, each act through the gate (budgets, the fleet's ticket, the
//! journal, the dry run). The pure parts (grants, which pods a drain
//! leaves, the PodDisruptionBudget a refusal names) are
//! `tend_rules::drain`, shared with the SDK's fakes.
//!
//! A drain never deletes a pod: an eviction a PodDisruptionBudget refuses
//! is asked again (as the server's dry run, which spends no budget and
//! journals nothing, until the server would allow it) until the drain's
//! deadline; then the drain stops, says which budget or pod held it, and
//! (if asked) uncordons the Node it cordoned itself and gives back the
//! fleet's ticket it took itself. It ends in time to undo itself before the
//! reconcile's own deadline cuts it off: every request of a round is bounded
//! by the drain's deadline.

use super::adapter::PluginKube;
use super::backend::{ListParams, PatchBody, PatchType, ResourceInfo, Run};
use super::grants::{Access, PatchShape, Verb, bind_to_uid, list_scope};
use crate::capabilities::error::CapError;
use crate::text::{cut, inert};
use crate::wit::kube::{DrainOptions, DrainReport};
use serde_json::Value;
use std::collections::BTreeMap;
use tend_rules::drain::{
    Disposition, blocked_reason, check_cordon, check_evict, check_evict_pod, cordon_patch,
    cordoned, disposition, pod_on_node,
};
use tend_rules::reason::Reason;
use tokio::time::{Duration, Instant};

/// Room kept before the reconcile's deadline to undo a drain that gives up.
const UNDO_MARGIN: Duration = Duration::from_secs(5);
/// A drain shorter than this cannot evict and wait for anything: refused.
const SHORTEST: Duration = Duration::from_secs(2);
/// How often a drain looks at the pods still leaving.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How often a refused eviction is asked again (kubectl drain's 5 s).
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// The pods one list of a Node may hold (the kubelet's default is 110):
/// a drain lists them from the API server itself, fresh, in one page.
const MOST_PODS: u32 = 1000;
/// How much of each reason a drain's report repeats.
const MAX_REASON: usize = 400;
/// The fleet operation a drain's cordon is admitted as.
const CORDON: &str = "kube.cordon";

/// Where one pod a drain must move stands.
struct Pending {
    namespace: String,
    name: String,
    uid: String,
    /// The pod as this round's fresh list showed it.
    object: Value,
    /// Why it is still there: "terminating", a budget's refusal, an error.
    why: String,
    /// When its eviction may be asked again (None: it is leaving).
    retry_at: Option<Instant>,
}

/// Why a drain stopped before every pod was gone.
enum Stop {
    /// Someone else uncordoned the Node: nothing more is evicted, nothing undone.
    Uncordoned,
    /// Its deadline passed, or something refused it: undo if asked.
    GaveUp(String),
}

/// One part of a report: "<namespace>/<name>" with its reason, the
/// server's names made inert and bounded.
fn line(pod: &str, why: &str) -> String {
    cut(inert(&format!("{pod}: {why}")).into_owned(), MAX_REASON)
}

impl PluginKube {
    /// Cordon, evict and drain act on this host's own Node: a cluster-scope
    /// plugin has none (and takes no fleet ticket).
    fn own_node_only(&self, what: &str) -> Result<(), CapError> {
        match self.call.gate.cluster() {
            true => Err(CapError::Denied(format!(
                "kube {what} acts on this host's own Node, and plugin {} runs in the cluster scope, which has none: run it as a node plugin",
                self.call.plugin
            ))),
            false => Ok(()),
        }
    }

    /// Cordon or uncordon this host's Node (the WIT's `cordon`).
    pub async fn cordon(&self, unschedulable: bool) -> Result<(), CapError> {
        self.own_node_only("cordon")?;
        self.set_unschedulable(unschedulable).await.map(drop)
    }

    /// `spec.unschedulable` by a merge patch, the Node read fresh just
    /// before; a Node already so changes nothing and journals nothing (the
    /// answer says whether it changed). An uncordon is its own operation
    /// ("uncordon"), which no budget names: undoing a disruption is never
    /// refused by a budget.
    async fn set_unschedulable(&self, unschedulable: bool) -> Result<bool, CapError> {
        let node = self.backend.node_name().to_string();
        check_cordon(&self.rules, &self.call.plugin, &node, unschedulable)?;
        let info = self.node_info().await?;
        let patch = cordon_patch(unschedulable);
        let key = super::backend::ObjectKey {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: node.clone(),
        };
        let current = self
            .read_checked(&info, &key, Verb::Patch, Some((PatchShape::Merge, &patch)))
            .await?;
        if cordoned(&current) == unschedulable {
            return Ok(false);
        }
        let operation = if unschedulable { "cordon" } else { "uncordon" };
        let target = format!("nodes/{node}");
        // Bound to the Node as read: not a Node recreated under the name.
        let mut patch = patch;
        if let Some(uid) = current["metadata"]["uid"].as_str() {
            bind_to_uid(PatchShape::Merge, &mut patch, uid)?;
        }
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
        .await?;
        Ok(true)
    }

    fn node_info(&self) -> impl Future<Output = Result<ResourceInfo, CapError>> + '_ {
        self.backend.resource("", "nodes")
    }

    /// Is this host's Node cordoned now (read from the API server)?
    async fn still_cordoned(&self) -> Result<bool, CapError> {
        let info = self.node_info().await?;
        let node = self
            .backend
            .get(&info, None, self.backend.node_name())
            .await?;
        Ok(cordoned(&node))
    }

    /// Evict one pod of this host's Node through the Eviction API, through
    /// the gate. The pod is read fresh just before: it must be bound to this
    /// Node, inside the grant's selectors (else it is answered as absent,
    /// [`pod_on_node`]), and the eviction
    /// carries its UID (a pod recreated under the name is not evicted).
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<(), CapError> {
        self.own_node_only("evict")?;
        let node = self.backend.node_name();
        check_evict(&self.rules, &self.call.plugin, node, namespace, name)?;
        let pods = self.backend.resource("", "pods").await?;
        let found = match self.backend.get(&pods, Some(namespace), name).await {
            Ok(pod) => Some(pod),
            Err(CapError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let pod = pod_on_node(
            &self.rules,
            &self.call.plugin,
            node,
            (namespace, name),
            found.as_ref(),
        )?;
        self.evict_pod(namespace, name, pod).await
    }

    /// Evict `pod` (read fresh by the caller: a get, or the drain's list of
    /// this round) through the gate, its grant checked on it.
    async fn evict_pod(&self, namespace: &str, name: &str, pod: &Value) -> Result<(), CapError> {
        let node = self.backend.node_name();
        check_evict_pod(&self.rules, &self.call.plugin, node, namespace, name, pod)?;
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let target = format!("pods/{namespace}/{name}");
        let planned = async {
            (
                self.backend.evict(Run::DryRun, namespace, name, uid).await,
                None,
            )
        };
        self.mutate("evict", target, String::new(), planned, |permit| {
            self.backend
                .evict(Run::Perform(permit), namespace, name, uid)
        })
        .await
    }

    /// The pods bound to this host's Node, listed from the API server
    /// itself (fresh, not a cache), under a grant that sees every one of
    /// them: a drain that could not see a pod would call the Node drained.
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
        if !scope.sees_all_on_node(node) {
            return Err(CapError::Denied(format!(
                "kube drain must see every pod on the Node, and plugin {}'s rule that lists pods narrows them (names, a label selector, or a field selector beyond spec.nodeName): give it {{ resource = \"pods\", verbs = [\"get\", \"list\"], field-selector = \"spec.nodeName=$NODE\" }}",
                self.call.plugin
            )));
        }
        let query = ListParams {
            label_selector: None,
            field_selector: scope.field_selector.clone(),
            // A page size sends the list to the API server, not the cache.
            limit: Some(MOST_PODS),
            continue_token: None,
        };
        let list = self.backend.list(pods, None, &query).await?;
        if list.continue_token.is_some() {
            return Err(CapError::Other(format!(
                "kube drain: more than {MOST_PODS} pods are bound to this Node"
            )));
        }
        Ok(list
            .items
            .iter()
            .filter(|o| scope.admits(&o.view()))
            .filter_map(|o| serde_json::from_str::<Value>(&o.json).ok())
            .filter(|pod| pod["spec"]["nodeName"].as_str() == Some(node))
            .collect())
    }

    /// Every pod the drain will evict is granted, selectors included.
    fn check_evictions(&self, listed: &[Value]) -> Result<(), CapError> {
        let node = self.backend.node_name();
        for pod in listed
            .iter()
            .filter(|p| disposition(p) == Disposition::Evict)
        {
            let meta = &pod["metadata"];
            let namespace = meta["namespace"].as_str().unwrap_or_default();
            let name = meta["name"].as_str().unwrap_or_default();
            check_evict_pod(&self.rules, &self.call.plugin, node, namespace, name, pod)?;
        }
        Ok(())
    }

    /// Drain this host's Node (see the WIT): cordon, evict all but DaemonSet
    /// and mirror pods, wait for them to be gone, until the deadline.
    pub async fn drain(&self, options: DrainOptions) -> Result<DrainReport, CapError> {
        self.own_node_only("drain")?;
        let node = self.backend.node_name().to_string();
        let within = Duration::from_millis(options.deadline_ms)
            .min(self.call.remaining().saturating_sub(UNDO_MARGIN));
        if within < SHORTEST {
            return Err(CapError::Timeout(format!(
                "kube drain: {} of the reconcile are left, and a drain needs at least {} besides {} to undo itself: raise [plugins.{}.limits] timeout or the deadline",
                humantime::format_duration(Duration::from_secs(self.call.remaining().as_secs())),
                humantime::format_duration(SHORTEST),
                humantime::format_duration(UNDO_MARGIN),
                self.call.plugin
            )));
        }
        let give_up_at = Instant::now() + within;
        // Every grant the drain needs, before it changes anything.
        check_cordon(&self.rules, &self.call.plugin, &node, true)?;
        if options.uncordon_on_give_up {
            check_cordon(&self.rules, &self.call.plugin, &node, false)?;
        }
        let pods = self.backend.resource("", "pods").await?;
        self.check_evictions(&self.node_pods(&pods).await?)?;
        let held_before = self.call.gate.holds_fleet_ticket(CORDON).await;
        let cordoned_here = self.set_unschedulable(true).await?;
        let mut report = DrainReport {
            evicted: Vec::new(),
            skipped: Vec::new(),
            remaining: Vec::new(),
            uncordoned: false,
        };
        let mut pending = BTreeMap::new();
        // From here on, every way out passes the undo below.
        let stopped = self
            .drain_rounds(&pods, give_up_at, within, &mut pending, &mut report)
            .await;
        let Some(stop) = stopped else {
            return Ok(report);
        };
        let why = match &stop {
            Stop::Uncordoned => {
                "the Node was uncordoned by someone else during the drain; nothing more was evicted"
                    .to_string()
            }
            Stop::GaveUp(why) => why.clone(),
        };
        report.remaining = pending
            .iter()
            .map(|(pod, p)| match &stop {
                // What the drain relied on changed: that is why these stay.
                Stop::Uncordoned => line(
                    pod,
                    &Reason::StaleState.tag(&format!(
                        "the Node was uncordoned by someone else (before: {})",
                        p.why
                    )),
                ),
                Stop::GaveUp(_) => line(pod, &p.why),
            })
            .collect();
        const SHOWN: usize = 10;
        tracing::warn!(
            plugin = %self.call.plugin,
            "drain of {node} stopped: {}; {} pods remain: {}{}",
            inert(&why),
            report.remaining.len(),
            report.remaining.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; "),
            if report.remaining.len() > SHOWN { "; ..." } else { "" }
        );
        // Undo only what this drain did: its own cordon, its own ticket.
        if options.uncordon_on_give_up && cordoned_here && matches!(stop, Stop::GaveUp(_)) {
            match self.set_unschedulable(false).await {
                Ok(_) => {
                    report.uncordoned = true;
                    if !held_before {
                        // Schedulable again: the next node may take its turn.
                        self.call
                            .gate
                            .give_back_fleet_ticket(
                                CORDON,
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

    /// The drain's rounds after its cordon: None once every pod that had to
    /// leave is gone (the cordon still in place), else why it stopped.
    async fn drain_rounds(
        &self,
        pods: &ResourceInfo,
        give_up_at: Instant,
        within: Duration,
        pending: &mut BTreeMap<String, Pending>,
        report: &mut DrainReport,
    ) -> Option<Stop> {
        loop {
            let listed = match tokio::time::timeout_at(give_up_at, self.node_pods(pods)).await {
                Ok(Ok(listed)) => listed,
                Ok(Err(e @ (CapError::Denied(_) | CapError::Invalid(_)))) => {
                    return Some(Stop::GaveUp(e.to_string()));
                }
                Ok(Err(e)) if Instant::now() + LOOK_EVERY < give_up_at && !self.call.dry_run => {
                    tracing::warn!(plugin = %self.call.plugin, "drain: cannot list this node's pods: {}", cut(inert(&e.to_string()).into_owned(), MAX_REASON));
                    tokio::time::sleep(LOOK_EVERY).await;
                    continue;
                }
                Ok(Err(e)) => {
                    return Some(Stop::GaveUp(format!("cannot list this node's pods: {e}")));
                }
                Err(_) => return Some(Stop::GaveUp(deadline_passed(within))),
            };
            self.take_stock(&listed, pending, report);
            // The cordon, read fresh before every round that evicts and
            // before calling the Node drained: an uncordon by someone else
            // ends the drain.
            let evicting = pending
                .values()
                .any(|p| p.retry_at.is_some_and(|at| at <= Instant::now()));
            if (evicting || pending.is_empty()) && !self.call.dry_run {
                match tokio::time::timeout_at(give_up_at, self.still_cordoned()).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => return Some(Stop::Uncordoned),
                    Ok(Err(e)) => {
                        tracing::warn!(plugin = %self.call.plugin, "drain: cannot read this Node: {}", cut(inert(&e.to_string()).into_owned(), MAX_REASON));
                        if pending.is_empty() && Instant::now() + LOOK_EVERY >= give_up_at {
                            return Some(Stop::GaveUp(format!(
                                "cannot read this Node to see it is still cordoned: {e}"
                            )));
                        }
                        for p in pending.values_mut().filter(|p| p.retry_at.is_some()) {
                            p.retry_at = Some(Instant::now() + RETRY_EVERY);
                        }
                        tokio::time::sleep(
                            LOOK_EVERY.min(give_up_at.saturating_duration_since(Instant::now())),
                        )
                        .await;
                        continue;
                    }
                    Err(_) => return Some(Stop::GaveUp(deadline_passed(within))),
                }
            }
            if pending.is_empty() {
                return None;
            }
            if let Some(stop) = self.evict_round(give_up_at, within, pending).await {
                return Some(stop);
            }
            // A plan evicts nothing: one round says what would be done.
            if self.call.dry_run {
                let (would, held): (Vec<_>, Vec<_>) = std::mem::take(pending)
                    .into_iter()
                    .partition(|(_, p)| p.why == "terminating");
                report.evicted.extend(would.into_iter().map(|(pod, _)| pod));
                report
                    .remaining
                    .extend(held.into_iter().map(|(pod, p)| line(&pod, &p.why)));
                return None;
            }
            let now = Instant::now();
            if now >= give_up_at {
                return Some(Stop::GaveUp(deadline_passed(within)));
            }
            let next_retry = pending
                .values()
                .filter_map(|p| p.retry_at)
                .min()
                .unwrap_or(now + LOOK_EVERY);
            let wake = next_retry.min(now + LOOK_EVERY).min(give_up_at);
            tokio::time::sleep_until(wake.max(now + Duration::from_millis(50))).await;
        }
    }

    /// Account for what one list shows: pods gone, skipped, leaving, to evict.
    fn take_stock(
        &self,
        listed: &[Value],
        pending: &mut BTreeMap<String, Pending>,
        report: &mut DrainReport,
    ) {
        let here: BTreeMap<String, &Value> = listed
            .iter()
            .map(|p| (tend_rules::drain::named(p), p))
            .collect();
        pending.retain(|pod, _| {
            let gone = !here.contains_key(pod);
            if gone {
                report
                    .evicted
                    .push(cut(inert(pod).into_owned(), MAX_REASON));
            }
            !gone
        });
        for (pod, object) in &here {
            let meta = &object["metadata"];
            let entry = || Pending {
                namespace: meta["namespace"].as_str().unwrap_or_default().into(),
                name: meta["name"].as_str().unwrap_or_default().into(),
                uid: meta["uid"].as_str().unwrap_or_default().into(),
                object: (*object).clone(),
                why: "not evicted yet".into(),
                retry_at: Some(Instant::now()),
            };
            match disposition(object) {
                Disposition::Skip(why) => {
                    let skipped = line(pod, why);
                    if !report.skipped.contains(&skipped) {
                        report.skipped.push(skipped);
                    }
                }
                Disposition::Leaving => {
                    let p = pending.entry(pod.clone()).or_insert_with(entry);
                    p.why = "terminating".into();
                    p.retry_at = None;
                }
                Disposition::Evict => {
                    let uid = meta["uid"].as_str().unwrap_or_default();
                    match pending.get_mut(pod) {
                        Some(p) if p.uid == uid => p.object = (*object).clone(),
                        // New, or another pod under the name: evict it afresh.
                        _ => {
                            pending.insert(pod.clone(), entry());
                        }
                    }
                }
            }
        }
    }

    /// Ask every eviction that is due: first as the server's dry run (no
    /// budget spent, nothing journaled while a PodDisruptionBudget refuses),
    /// then through the gate. A refusal by the gate itself (a host budget,
    /// the fleet's ticket, the reconcile's bounds) ends the drain.
    async fn evict_round(
        &self,
        give_up_at: Instant,
        within: Duration,
        pending: &mut BTreeMap<String, Pending>,
    ) -> Option<Stop> {
        let due: Vec<String> = pending
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|at| at <= Instant::now()))
            .map(|(pod, _)| pod.clone())
            .collect();
        for pod in due {
            let p = pending.get_mut(&pod).expect("listed above");
            let asked = async {
                if !self.call.dry_run {
                    self.backend
                        .evict(Run::DryRun, &p.namespace, &p.name, &p.uid)
                        .await?;
                }
                self.evict_pod(&p.namespace, &p.name, &p.object).await
            };
            let answer = match tokio::time::timeout_at(give_up_at, asked).await {
                Ok(answer) => answer,
                Err(_) => return Some(Stop::GaveUp(deadline_passed(within))),
            };
            let retry = Some(Instant::now() + RETRY_EVERY);
            match answer {
                Ok(()) => {
                    p.why = "terminating".into();
                    p.retry_at = None;
                }
                Err(CapError::NotFound(_)) => {
                    p.why = "gone".into();
                    p.retry_at = None;
                }
                Err(CapError::BudgetExhausted(message)) => match blocked_reason(&message) {
                    Some(reason) => {
                        p.why = reason.to_string();
                        p.retry_at = retry;
                    }
                    None if self.call.dry_run => {
                        p.why = cut(inert(&message).into_owned(), MAX_REASON);
                        p.retry_at = retry;
                    }
                    None => {
                        return Some(Stop::GaveUp(format!("an eviction was refused: {message}")));
                    }
                },
                Err(e @ (CapError::Denied(_) | CapError::Invalid(_))) => {
                    return Some(Stop::GaveUp(format!("an eviction was refused: {e}")));
                }
                Err(e) => {
                    p.why = cut(inert(&e.to_string()).into_owned(), MAX_REASON);
                    p.retry_at = retry;
                }
            }
        }
        None
    }
}

fn deadline_passed(within: Duration) -> String {
    format!(
        "its deadline of {} passed",
        humantime::format_duration(Duration::from_secs(within.as_secs()))
    )
}

#[cfg(test)]
mod tests;
