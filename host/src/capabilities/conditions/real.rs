//! The own Node through the API server, with the kube capability's client
//! and its client-side rate bounds (`[host.kube] qps`, `burst`): status by
//! strategic merge on the `status` subresource (RBAC: `patch` on
//! `nodes/status`), taints by a merge patch carrying the `resourceVersion`
//! read, so a concurrent change (the kubelet, kubectl) is never overwritten
//! (RBAC: `get` and `patch` on `nodes`).

use super::backend::{NodeStatus, merged_taints};
use crate::capabilities::error::CapError;
use crate::capabilities::kube::{KubeBackend, RealKube, map_error};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tend_rules::conditions::TaintEffect;

/// The field manager of Tend's own writes to the Node.
const MANAGER: &str = "tend";
/// Attempts at a taint write that keeps losing the race to another writer.
const TAINT_ATTEMPTS: usize = 3;

fn managed() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_string()),
        ..PatchParams::default()
    }
}

pub struct RealNode {
    pub kube: RealKube,
}

impl RealNode {
    async fn nodes(&self) -> Result<Api<Node>, CapError> {
        Ok(Api::all(self.kube.client().await?))
    }

    fn name(&self) -> &str {
        self.kube.node_name()
    }
}

#[async_trait::async_trait]
impl NodeStatus for RealNode {
    async fn patch_status(&self, patch: Value) -> Result<(), CapError> {
        let nodes = self.nodes().await?;
        self.kube.request().await?;
        nodes
            .patch_status(self.name(), &managed(), &Patch::Strategic(patch))
            .await
            .map_err(|e| map_error("patch nodes/status", e))?;
        Ok(())
    }

    async fn set_taints(&self, wanted: &BTreeMap<String, TaintEffect>) -> Result<(), CapError> {
        let nodes = self.nodes().await?;
        let mut last = None;
        for _ in 0..TAINT_ATTEMPTS {
            self.kube.request().await?;
            let node = nodes
                .get(self.name())
                .await
                .map_err(|e| map_error("get nodes", e))?;
            let existing: Vec<Value> = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .collect();
            let Some(taints) = merged_taints(&existing, wanted) else {
                return Ok(());
            };
            let patch = json!({
                "metadata": { "resourceVersion": node.metadata.resource_version },
                "spec": { "taints": taints },
            });
            self.kube.request().await?;
            match nodes
                .patch(self.name(), &managed(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) => {
                    let error = map_error("patch nodes", e);
                    if error.kind() != "conflict" {
                        return Err(error);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.expect("a conflict was kept"))
    }

    fn requests(&self) -> u64 {
        self.kube.requests()
    }
}
