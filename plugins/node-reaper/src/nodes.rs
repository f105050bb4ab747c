//! What the reaper needs of a Node: its name, the instance its
//! `spec.providerID` names, its InternalIPs, whether it is Ready, and
//! whether it asks to be replaced (cordoned or not).

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
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

impl NodeInfo {
    /// The Node as the host sends it, JSON text: read into the few fields
    /// the reaper needs (serde skips the rest of a Node, its images and
    /// managed fields, without building it), else, for a shape that reading
    /// does not take (a field of another type, a key twice), parsed whole
    /// and read by [`NodeInfo::from_object`], whose answer it always gives.
    /// Text that is not JSON is an error: the listing failed. (Skipped
    /// fields are only checked to be JSON: a number out of `f64`'s range, a
    /// lone surrogate escape or nesting deeper than 128 there passes, where
    /// the whole parse refused the listing. The host sends what serde_json
    /// wrote, which has none of them.)
    pub fn from_text(text: &str) -> serde_json::Result<Option<NodeInfo>> {
        match serde_json::from_str::<Object<NodeText>>(text) {
            Ok(Object(node)) => Ok(node.info()),
            Err(_) => Ok(NodeInfo::from_object(&serde_json::from_str(text)?)),
        }
    }
}

/// The fields of a Node [`NodeInfo`] reads; strings borrowed from the text
/// unless an escape needs decoding.
#[derive(Deserialize)]
struct NodeText<'a> {
    #[serde(borrow, default)]
    metadata: Option<Object<MetadataText<'a>>>,
    #[serde(borrow, default)]
    spec: Option<Object<SpecText<'a>>>,
    #[serde(borrow, default)]
    status: Option<Object<StatusText<'a>>>,
}

/// `T` read from a JSON object only: serde_json also hands a struct an
/// array (its fields by position), which indexing a parsed object never
/// reads (`["aws:///z/i-0abc", true]` is no `spec`).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct MetadataText<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    annotations: Option<ReplaceRequested>,
}

#[derive(Deserialize)]
struct SpecText<'a> {
    #[serde(borrow, default, rename = "providerID")]
    provider_id: Option<Cow<'a, str>>,
    #[serde(default)]
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
struct StatusText<'a> {
    #[serde(borrow, default)]
    addresses: Option<Vec<Object<AddressText<'a>>>>,
    #[serde(borrow, default)]
    conditions: Option<Vec<Object<ConditionText<'a>>>>,
}

#[derive(Deserialize)]
struct AddressText<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    address: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ConditionText<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
}

/// Whether the annotations hold [`REPLACE_ANNOTATION`] = "true" (the last
/// of a key written twice, as a parsed object keeps it); the other
/// annotations are skipped.
struct ReplaceRequested(bool);

impl<'de> Deserialize<'de> for ReplaceRequested {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Annotations;
        impl<'de> Visitor<'de> for Annotations {
            type Value = ReplaceRequested;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut requested = false;
                while let Some(key) = map.next_key::<Cow<str>>()? {
                    if key == REPLACE_ANNOTATION {
                        requested = map.next_value::<Value>()? == "true";
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ReplaceRequested(requested))
            }
        }
        deserializer.deserialize_map(Annotations)
    }
}

impl NodeText<'_> {
    fn info(self) -> Option<NodeInfo> {
        let Object(metadata) = self.metadata?;
        let spec = self.spec.as_ref().map(|Object(spec)| spec);
        let status = self.status.as_ref().map(|Object(status)| status);
        let addresses = status.and_then(|s| s.addresses.as_deref());
        let internal_ips = (addresses.unwrap_or_default().iter())
            .map(|Object(a)| a)
            .filter(|a| a.kind.as_deref() == Some("InternalIP"))
            .filter_map(|a| a.address.as_deref().map(str::to_string))
            .collect();
        let conditions = status.and_then(|s| s.conditions.as_deref());
        let ready = (conditions.unwrap_or_default().iter()).any(|Object(c)| {
            c.kind.as_deref() == Some("Ready") && c.status.as_deref() == Some("True")
        });
        Some(NodeInfo {
            name: metadata.name?.into_owned(),
            instance_id: spec
                .and_then(|s| s.provider_id.as_deref())
                .and_then(instance_id_of)
                .map(str::to_string),
            internal_ips,
            ready,
            replace_requested: metadata.annotations.is_some_and(|a| a.0),
            cordoned: spec.and_then(|s| s.unschedulable) == Some(true),
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

    /// The typed reading of a Node's text answers as `from_object` does, for
    /// well-formed Nodes and for every odd shape (which it hands over).
    #[test]
    fn a_node_text_reads_as_the_parsed_object_does() {
        let texts = [
            r#"{"metadata":{"name":"ip-10-0-1-7","uid":"u","annotations":{"a":"b","tend.dev/replace-requested":"true"},"managedFields":[{"x":[1,2,{"y":null}]}]},
               "spec":{"providerID":"aws:///us-east-1a/i-0abc","unschedulable":true,"taints":[]},
               "status":{"addresses":[{"type":"InternalIP","address":"10.0.1.7"},{"type":"Hostname","address":"h"},{"type":"InternalIP","address":"10.0.1.8"}],
                         "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}],"images":[{"names":["a"],"sizeBytes":1}]}}"#,
            r#"{"metadata":{"name":"n\u0041\n","annotations":{"tend.dev/replace-requested":"true","tend.dev/replace-requested":"no"}}}"#,
            r#"{"metadata":{"name":"n","annotations":{"tend.dev/replace-\u0072equested":"true"}}}"#,
            r#"{"metadata":{"name":"n","annotations":{"tend.dev/replace-requested":true}}}"#,
            r#"{"metadata":{"name":"n","annotations":["tend.dev/replace-requested"]}}"#,
            r#"{"metadata":{"name":"n"},"spec":{"unschedulable":"true","providerID":7}}"#,
            r#"{"metadata":{"name":"n"},"spec":{"unschedulable":null,"providerID":null}}"#,
            r#"{"metadata":{"name":"n"},"status":{"addresses":{"type":"InternalIP"},"conditions":[null,{"type":"Ready","status":true},{"type":"Ready","status":"True"}]}}"#,
            r#"{"metadata":{"name":"n"},"status":{"addresses":[{"type":"InternalIP","address":5},{"type":"InternalIP","address":"10.0.0.1"}]}}"#,
            r#"{"metadata":{"name":"n"},"metadata":{"name":"m"}}"#,
            r#"{"metadata":{"name":7}}"#,
            r#"{"metadata":null,"spec":{}}"#,
            r#"{"metadata":"n"}"#,
            r#"["metadata"]"#,
            r#"[{"name":"n"}]"#,
            r#"{"metadata":["n"],"spec":["aws:///z/i-0abc",true]}"#,
            r#"{"metadata":{"name":"n","annotations":{"tend.dev/replace-requested":"true"}},"spec":["aws:///z/i-0abc",true]}"#,
            r#"{"metadata":{"name":"n"},"status":{"addresses":[["InternalIP","10.0.0.9"]],"conditions":[["Ready","True"]]}}"#,
            r#"{}"#,
            "null",
        ];
        for text in texts {
            let parsed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                NodeInfo::from_text(text).unwrap(),
                NodeInfo::from_object(&parsed),
                "{text}"
            );
        }
        let asking = NodeInfo::from_text(texts[0]).unwrap().unwrap();
        assert!(asking.replace_requested && asking.cordoned && asking.ready);
        assert_eq!(asking.internal_ips, ["10.0.1.7", "10.0.1.8"]);
        assert_eq!(NodeInfo::from_text(texts[1]).unwrap().unwrap().name, "nA\n");
        for not_json in ["", "{", r#"{"metadata":{"name":"n"}} x"#, "{'a':1}"] {
            assert!(NodeInfo::from_text(not_json).is_err(), "{not_json:?}");
        }
    }
}
