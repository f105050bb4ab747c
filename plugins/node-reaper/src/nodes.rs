//! What the reaper needs of a Node: its name, the instance its
//! `spec.providerID` names, its InternalIPs, whether it is Ready, and
//! whether it asks to be replaced (cordoned or not).

use serde_json::Value;
use tend_sdk::REPLACE_ANNOTATION;

/// One Node, as the decision reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub name: String,
    /// The instance ID of its `spec.providerID`, when it has one.
    pub instance_id: Option<String>,
    pub internal_ips: Vec<String>,
    /// Its Ready condition is "True".
    pub ready: bool,
    /// It carries [`REPLACE_ANNOTATION`] = "true" (node-remediator's last step).
    pub replace_requested: bool,
    /// `spec.unschedulable`: cordoned (and, by node-remediator, drained).
    pub cordoned: bool,
}

impl NodeInfo {
    /// The Node object as the API server returns it; None without a name.
    pub fn from_object(node: &Value) -> Option<NodeInfo> {
        let name = node["metadata"]["name"].as_str()?.to_string();
        let instance_id = node["spec"]["providerID"]
            .as_str()
            .and_then(instance_id_of)
            .map(str::to_string);
        let empty = Vec::new();
        let addresses = node["status"]["addresses"].as_array().unwrap_or(&empty);
        let internal_ips = addresses
            .iter()
            .filter(|a| a["type"] == "InternalIP")
            .filter_map(|a| a["address"].as_str().map(str::to_string))
            .collect();
        let conditions = node["status"]["conditions"].as_array().unwrap_or(&empty);
        let ready = conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        Some(NodeInfo {
            name,
            instance_id,
            internal_ips,
            ready,
            replace_requested: node["metadata"]["annotations"][REPLACE_ANNOTATION] == "true",
            cordoned: node["spec"]["unschedulable"] == true,
        })
    }
}

/// The instance ID in a provider ID, in every form the cloud providers
/// write: "aws:///us-east-1a/i-0abc", "aws:///i-0abc", "openstack:///<uuid>",
/// "openstack:///<region>/<uuid>": the last path segment after the scheme.
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    let (_, path) = provider_id.split_once("://")?;
    path.rsplit('/').next().filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_provider_id_form_names_its_instance() {
        let uuid = "8f7c2a1e-3b4d-4e5f-9a0b-1c2d3e4f5a6b";
        for (provider_id, id) in [
            (
                "aws:///us-east-1a/i-0123456789abcdef0",
                "i-0123456789abcdef0",
            ),
            ("aws:///i-0123456789abcdef0", "i-0123456789abcdef0"),
            (&format!("openstack:///{uuid}"), uuid),
            (&format!("openstack:///RegionOne/{uuid}"), uuid),
        ] {
            assert_eq!(instance_id_of(provider_id), Some(id), "{provider_id}");
        }
        for bad in ["", "i-0123456789abcdef0", "aws:///", "aws:///zone/"] {
            assert_eq!(instance_id_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_node_object_gives_its_name_instance_ips_and_readiness() {
        let node = json!({
            "metadata": {"name": "ip-10-0-1-7.ec2.internal"},
            "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.1.7"},
                    {"type": "Hostname", "address": "ip-10-0-1-7"}
                ],
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True"}
                ]
            }
        });
        assert_eq!(
            NodeInfo::from_object(&node),
            Some(NodeInfo {
                name: "ip-10-0-1-7.ec2.internal".into(),
                instance_id: Some("i-0123456789abcdef0".into()),
                internal_ips: vec!["10.0.1.7".into()],
                ready: true,
                replace_requested: false,
                cordoned: false,
            })
        );
        let asking = json!({"metadata": {"name": "n", "annotations": {REPLACE_ANNOTATION: "true"}},
            "spec": {"unschedulable": true}});
        let asking = NodeInfo::from_object(&asking).unwrap();
        assert!(asking.replace_requested && asking.cordoned);
        let not_quite = json!({"metadata": {"name": "n", "annotations": {REPLACE_ANNOTATION: "yes"}},
            "spec": {"unschedulable": "true"}});
        let not_quite = NodeInfo::from_object(&not_quite).unwrap();
        assert!(!not_quite.replace_requested && !not_quite.cordoned);
        let bare = NodeInfo::from_object(&json!({"metadata": {"name": "n"}})).unwrap();
        assert!(!bare.ready && bare.instance_id.is_none());
        assert_eq!(NodeInfo::from_object(&json!({})), None);
    }
}
