//! `tend:plugin/kube` answered by the adapter.

use super::adapter::{ObjectKey, PluginKube};
use super::backend::{ListQuery, PatchKind};
use crate::capabilities::Capability;
use crate::wit::tend::plugin::kube;
use crate::wit::types;

type WitResult<T> = Result<T, types::Error>;

fn key(k: kube::ObjectKey) -> ObjectKey {
    ObjectKey {
        api_version: k.api_version,
        kind: k.kind,
        namespace: k.namespace,
        name: k.name,
    }
}

impl kube::Host for PluginKube {
    async fn get(&mut self, k: kube::ObjectKey) -> WitResult<String> {
        let result = PluginKube::get(self, &key(k)).await;
        self.call.counted(Self::NAME, "get", result)
    }
    async fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        params: kube::ListParams,
    ) -> WitResult<kube::ObjectList> {
        let query = ListQuery {
            label_selector: params.label_selector,
            field_selector: params.field_selector,
            limit: params.limit,
            continue_token: params.continue_token,
        };
        let result =
            PluginKube::list(self, &api_version, &kind, namespace.as_deref(), &query).await;
        let list = self.call.counted(Self::NAME, "list", result)?;
        Ok(kube::ObjectList {
            // The WIT's list<string> owns its strings: one copy, no serializing.
            items: list.items.iter().map(|text| text.to_string()).collect(),
            continue_token: list.continue_token,
            resource_version: list.resource_version,
        })
    }
    async fn create(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        object: String,
    ) -> WitResult<String> {
        let result =
            PluginKube::create(self, &api_version, &kind, namespace.as_deref(), &object).await;
        self.call.counted(Self::NAME, "create", result)
    }
    async fn patch(
        &mut self,
        k: kube::ObjectKey,
        patch_type: kube::PatchType,
        patch: String,
    ) -> WitResult<String> {
        let kind = match patch_type {
            kube::PatchType::Merge => PatchKind::Merge,
            kube::PatchType::Json => PatchKind::Json,
            kube::PatchType::Apply => PatchKind::Apply,
        };
        let result = PluginKube::patch(self, &key(k), kind, &patch).await;
        self.call.counted(Self::NAME, "patch", result)
    }
    async fn delete(&mut self, k: kube::ObjectKey) -> WitResult<()> {
        let result = PluginKube::delete(self, &key(k)).await;
        self.call.counted(Self::NAME, "delete", result)
    }
    async fn emit_event(
        &mut self,
        k: kube::ObjectKey,
        event_type: kube::EventType,
        reason: String,
        message: String,
    ) -> WitResult<()> {
        let warning = event_type == kube::EventType::Warning;
        let result = PluginKube::emit_event(self, &key(k), warning, &reason, &message).await;
        self.call.counted(Self::NAME, "emit-event", result)
    }
}
