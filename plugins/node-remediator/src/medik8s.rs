//! node-remediator as a Medik8s remediator, for clusters that already run
//! NodeHealthCheck (NHC): NHC watches Node health, and for an unhealthy node
//! creates a remediation object from the template its `remediationTemplate`
//! (or one of its `escalatingRemediations`) names. With the
//! `TendRemediationTemplate` of `examples/deploy/components/medik8s`, that is
//! a `TendRemediation` (`remediation.tend.dev/v1alpha1`) in the template's
//! namespace, named after the node (or, from NHC versions that allow several
//! templates of a kind, carrying the annotation
//! `remediation.medik8s.io/node-name`). Its existence is one more problem for
//! the ladder (shown as `NodeHealthCheck`); NHC deletes it once the node is
//! healthy, which clears the problem. The ladder tells NHC where it stands in
//! the object's status conditions, as NHC's remediators do: `Processing`
//! while it works, and `Succeeded` = False once every step was tried, so
//! NHC's escalating remediations go on to the next remediator at once. When
//! NHC gives up on it (`remediation.medik8s.io/nhc-timed-out`), the ladder
//! stands down: no further step, nothing verified, until NHC deletes it.

use serde_json::{Value, json};
use tend_sdk::{Host, ListParams, ObjectKey, PatchType, Result};

pub const API_VERSION: &str = "remediation.tend.dev/v1alpha1";
pub const KIND: &str = "TendRemediation";
/// The problem a remediation request shows as, beside the NodeConditions.
pub const PROBLEM: &str = "NodeHealthCheck";
/// Names the node when the object's name cannot (several templates of a kind).
const NODE_NAME_ANNOTATION: &str = "remediation.medik8s.io/node-name";
/// NHC's word that it moved on to its next remediator.
const TIMED_OUT_ANNOTATION: &str = "remediation.medik8s.io/nhc-timed-out";

/// NHC's request to remediate this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub key: ObjectKey,
    /// NHC timed this remediation out: stand down.
    pub timed_out: bool,
    /// Its status conditions as read.
    conditions: Value,
}

/// Where the ladder stands, as NHC reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A step under way or waiting for its outcome.
    Processing,
    /// Every step tried, none verified: NHC may escalate.
    Exhausted,
}

/// The request for `node` among the `TendRemediation`s in `namespace`, if
/// any (one being deleted is none): an unpaged list served from the watch
/// cache the grant's `watch` starts, so a healthy node asks nothing.
pub fn request(host: &dyn Host, namespace: &str, node: &str) -> Result<Option<Request>> {
    let listed = host
        .kube()
        .list(API_VERSION, KIND, Some(namespace), &ListParams::default())?;
    Ok(listed.items.iter().find_map(|object| of(object, node)))
}

/// `object` as a request for `node`, if it is one.
fn of(object: &Value, node: &str) -> Option<Request> {
    let meta = &object["metadata"];
    let named = meta["annotations"][NODE_NAME_ANNOTATION]
        .as_str()
        .or(meta["name"].as_str())?;
    if named != node || !meta["deletionTimestamp"].is_null() {
        return None;
    }
    Some(Request {
        key: ObjectKey {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            namespace: meta["namespace"].as_str().map(str::to_string),
            name: meta["name"].as_str()?.to_string(),
        },
        timed_out: !meta["annotations"][TIMED_OUT_ANNOTATION].is_null(),
        conditions: object["status"]["conditions"].clone(),
    })
}

/// Write `progress` into the request's status, when it says something new
/// (a healthy ladder writes nothing twice). `now` is RFC 3339.
pub fn report(host: &dyn Host, request: &Request, progress: Progress, now: &str) -> Result<()> {
    let wanted = conditions(progress, now);
    if same(&request.conditions, &wanted) {
        return Ok(());
    }
    let patch = json!({"status": {"conditions": wanted}});
    host.kube()
        .patch(&request.key, PatchType::Merge, &patch)
        .map(drop)
}

/// The status conditions of `progress`, as Medik8s' remediators write them.
pub fn conditions(progress: Progress, now: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": now})
    };
    match progress {
        Progress::Processing => json!([
            condition(
                "Processing",
                "True",
                "RemediationStarted",
                "node-remediator is taking its steps"
            ),
            condition(
                "Succeeded",
                "Unknown",
                "RemediationStarted",
                "not verified yet"
            ),
        ]),
        Progress::Exhausted => json!([
            condition(
                "Processing",
                "False",
                "RemediationExhausted",
                "every step was tried"
            ),
            condition(
                "Succeeded",
                "False",
                "RemediationExhausted",
                "every step was tried and none verified: escalate",
            ),
        ]),
    }
}

/// The same conditions by type, status and reason (times aside).
fn same(read: &Value, wanted: &Value) -> bool {
    let key = |c: &Value| (c["type"].clone(), c["status"].clone(), c["reason"].clone());
    let keys = |v: &Value| -> Option<Vec<_>> { Some(v.as_array()?.iter().map(key).collect()) };
    keys(read).is_some() && keys(read) == keys(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": KIND,
               "metadata": {"name": name, "namespace": "tend-system", "annotations": annotations}})
    }

    #[test]
    fn a_request_names_its_node_by_name_or_by_annotation() {
        assert!(of(&object("n1", json!({})), "n1").is_some());
        assert!(of(&object("n2", json!({})), "n1").is_none());
        let generated = object("tend-x7k2p", json!({NODE_NAME_ANNOTATION: "n1"}));
        assert_eq!(of(&generated, "n1").unwrap().key.name, "tend-x7k2p");
        // The annotation, when there, is what names the node.
        let other = object("n1", json!({NODE_NAME_ANNOTATION: "n2"}));
        assert!(of(&other, "n1").is_none());
        let mut leaving = object("n1", json!({}));
        leaving["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z");
        assert!(of(&leaving, "n1").is_none());
        let timed_out = object("n1", json!({TIMED_OUT_ANNOTATION: "2026-11-29T00:00:00Z"}));
        assert!(of(&timed_out, "n1").unwrap().timed_out);
    }

    #[test]
    fn the_status_is_written_only_when_it_changes() {
        let processing = conditions(Progress::Processing, "2026-11-29T00:00:00Z");
        let later = conditions(Progress::Processing, "2026-11-29T01:00:00Z");
        assert!(same(&processing, &later));
        assert!(!same(&processing, &conditions(Progress::Exhausted, "x")));
        assert!(!same(&Value::Null, &processing), "no status yet");
        let exhausted = conditions(Progress::Exhausted, "x");
        let succeeded = exhausted
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Succeeded")
            .unwrap();
        assert_eq!(succeeded["status"], "False", "what makes NHC escalate");
    }
}
