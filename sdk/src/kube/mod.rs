//! `tend:plugin/kube`: the Kubernetes API, objects as [`serde_json::Value`],
//! for any API group, version and kind, within the plugin's `kube` rules
//! (RBAC-like: group, resource, verb, namespace, name; `$NODE` is the host's
//! node name).

use crate::bindings::tend::plugin::kube as wit_kube;
use crate::{NotProvided, Result};
use serde_json::Value;

mod fake;
mod patch;
mod rules;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm;

pub use fake::{FakeKube, RecordedEvent, RecordedPatch};

/// The calls [`FakeKube::fail_call`] can make fail: the WIT function names.
pub const CALLS: [&str; 9] = tend_rules::wit::kube::FUNCTIONS;
pub use patch::merge_patch;
pub use rules::IntoKubeRules;

/// The annotation (value `"true"`) by which a node asks the cluster scope to
/// replace its instance: node-remediator's `replace` step sets it on its own
/// Node, node-reaper acts on it (`replace-requests = true`).
pub const REPLACE_ANNOTATION: &str = "tend.dev/replace-requested";

/// The WIT records themselves: the host takes these very types. (A list's
/// items cross the WIT as JSON text; [`ObjectList`] holds them parsed.)
pub use crate::bindings::tend::plugin::kube::{
    DrainOptions, DrainReport, EventType, ListParams, ObjectKey, PatchType,
};

/// One object: `ObjectKey::cluster("v1", "Node", "node-1")`,
/// `ObjectKey::namespaced("apps/v1", "Deployment", "default", "web")`.
impl ObjectKey {
    /// A cluster-scoped object (a Node, a Namespace).
    pub fn cluster(api_version: &str, kind: &str, name: &str) -> Self {
        ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: None,
            name: name.to_string(),
        }
    }

    /// An object in `namespace` (a Pod, a ConfigMap).
    pub fn namespaced(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// The key of `object` (its apiVersion, kind, metadata.namespace and
    /// metadata.name), or None when one of them is missing.
    pub fn of(object: &Value) -> Option<Self> {
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        Some(ObjectKey {
            api_version: text(&object["apiVersion"])?,
            kind: text(&object["kind"])?,
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"])?,
        })
    }
}

impl ListParams {
    /// Objects whose labels match `selector` ("app=web,tier!=db").
    pub fn labels(selector: &str) -> Self {
        ListParams {
            label_selector: Some(selector.to_string()),
            ..ListParams::default()
        }
    }

    /// Objects whose fields match `selector` ("spec.nodeName=node-1").
    pub fn fields(selector: &str) -> Self {
        ListParams {
            field_selector: Some(selector.to_string()),
            ..ListParams::default()
        }
    }
}

impl DrainOptions {
    /// Give up after `deadline` (whole milliseconds), leaving the Node
    /// cordoned; see [`DrainOptions::uncordon_on_give_up`].
    pub fn within(deadline: std::time::Duration) -> Self {
        DrainOptions {
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            uncordon_on_give_up: false,
        }
    }

    /// When the drain gives up, make the Node schedulable again.
    pub fn uncordon_on_give_up(mut self) -> Self {
        self.uncordon_on_give_up = true;
        self
    }
}

impl DrainReport {
    /// Every pod that had to leave is gone: nothing remains.
    pub fn completed(&self) -> bool {
        self.remaining.is_empty()
    }
}

/// One page of a list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectList {
    pub items: Vec<Value>,
    /// Set when more pages follow: pass it in [`ListParams::continue_token`].
    pub continue_token: Option<String>,
    pub resource_version: String,
}

/// The error of a `call` the host answered with text that is not JSON.
fn invalid_json(call: &str, e: serde_json::Error) -> crate::Error {
    crate::Error::Other(format!(
        "kube {call}: the host answered with invalid JSON: {e}"
    ))
}

/// One page of a list with each item as the JSON text the host sent,
/// unparsed ([`Kube::list_texts`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextList {
    pub items: Vec<String>,
    /// Set when more pages follow: pass it in [`ListParams::continue_token`].
    pub continue_token: Option<String>,
    pub resource_version: String,
}

impl TextList {
    /// Every item read by `read` (serde into a type of the plugin's own): an
    /// item it cannot read fails the whole page, as invalid JSON from the host.
    pub fn read<T>(&self, read: impl Fn(&str) -> serde_json::Result<T>) -> Result<Vec<T>> {
        let items = self.items.iter().map(|item| read(item));
        items
            .map(|r| r.map_err(|e| invalid_json("list", e)))
            .collect()
    }

    /// Every item parsed: an item that is not JSON fails the whole page.
    pub fn parse(self) -> Result<ObjectList> {
        Ok(ObjectList {
            items: self.read(|item| serde_json::from_str(item))?,
            continue_token: self.continue_token,
            resource_version: self.resource_version,
        })
    }
}

impl ObjectList {
    /// The items' `metadata.name`s, in list order.
    pub fn names(&self) -> Vec<&str> {
        self.items
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect()
    }
}

// The WIT patch type as the rules read its body: `patch_shape`, written once
// in the rules crate for both bindings.
tend_rules::patch_shape_of!(wit_kube);

impl PatchType {
    /// "merge", "json" or "apply".
    pub fn name(self) -> &'static str {
        patch_shape(self).name()
    }
}

/// The Kubernetes API, within the plugin's grant: each call needs a rule
/// covering its group, resource (the kind resolved by discovery), verb,
/// namespace and name. Lists need `list` and are cut to the names the rules
/// allow. Mutations pass the host's mutation gate (dry run, budgets, journal).
pub trait Kube {
    /// One object.
    fn get(&self, key: &ObjectKey) -> Result<Value>;
    /// Objects of one kind, in `namespace` or (None) in all namespaces.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList> {
        self.list_texts(api_version, kind, namespace, params)?
            .parse()
    }
    /// The same list with each object as JSON text, for a plugin that reads
    /// a few fields of many objects into types of its own (serde's derive
    /// skips the rest without building it): node-reaper over 10,000 Nodes.
    fn list_texts(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<TextList>;
    /// Create `object` (it needs `metadata.name`); returns it as stored.
    fn create(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &Value,
    ) -> Result<Value>;
    /// Patch an object; returns it as stored.
    fn patch(&self, key: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value>;
    fn delete(&self, key: &ObjectKey) -> Result<()>;
    /// Record an Event about an object the plugin may `get`; a repeat of the
    /// same reason and message about the same object raises its count.
    /// `reason` is a CamelCase word ("LabelApplied").
    fn emit_event(
        &self,
        regarding: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()>;
    /// Cordon (true) or uncordon (false) this host's Node: its
    /// `spec.unschedulable`, nothing else. Needs `patch` on `nodes` named
    /// `$NODE` (with `fields`, `spec.unschedulable`).
    fn cordon(&self, unschedulable: bool) -> Result<()>;
    /// Evict one pod through the Eviction API, which honours its
    /// PodDisruptionBudget: while the budget allows no disruption the answer
    /// is [`crate::Error::BudgetExhausted`] (`"blocked by PodDisruptionBudget
    /// NAMESPACE/NAME: ..."`) and nothing happened; ask again later, never delete
    /// the pod instead. Needs `create` on `pods/eviction` in its namespace.
    fn evict(&self, namespace: &str, name: &str) -> Result<()>;
    /// Drain this host's Node: cordon it, evict every pod bound to it but
    /// DaemonSet and mirror pods (an uncordon by someone else ends the
    /// drain), wait for each to be gone; past the deadline, stop and report
    /// what remains and why. Needs the grants of [`Kube::cordon`] and
    /// [`Kube::evict`], and `list` and `get` on `pods` (a rule with
    /// `field-selector = "spec.nodeName=$NODE"` is enough).
    fn drain(&self, options: &DrainOptions) -> Result<DrainReport>;
}

impl Kube for NotProvided {
    fn get(&self, _: &ObjectKey) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn list_texts(&self, _: &str, _: &str, _: Option<&str>, _: &ListParams) -> Result<TextList> {
        Err(NotProvided::denied("kube"))
    }
    fn create(&self, _: &str, _: &str, _: Option<&str>, _: &Value) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn patch(&self, _: &ObjectKey, _: PatchType, _: &Value) -> Result<Value> {
        Err(NotProvided::denied("kube"))
    }
    fn delete(&self, _: &ObjectKey) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
    fn emit_event(&self, _: &ObjectKey, _: EventType, _: &str, _: &str) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
    fn cordon(&self, _: bool) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
    fn evict(&self, _: &str, _: &str) -> Result<()> {
        Err(NotProvided::denied("kube"))
    }
    fn drain(&self, _: &DrainOptions) -> Result<DrainReport> {
        Err(NotProvided::denied("kube"))
    }
}
