//! `tend:plugin/kube` answered by the adapter.

use super::adapter::PluginKube;
use crate::capabilities::Capability;
use crate::wit::kube;
use crate::wit::types;

type WitResult<T> = Result<T, types::Error>;

impl kube::Host for PluginKube {
    async fn get(&mut self, key: kube::ObjectKey) -> WitResult<String> {
        let result = PluginKube::get(self, &key).await;
        self.call.counted(Self::NAME, "get", result)
    }
    async fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        params: kube::ListParams,
    ) -> WitResult<kube::ObjectList> {
        let result =
            PluginKube::list(self, &api_version, &kind, namespace.as_deref(), &params).await;
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
        key: kube::ObjectKey,
        patch_type: kube::PatchType,
        patch: String,
    ) -> WitResult<String> {
        let result = PluginKube::patch(self, &key, patch_type, &patch).await;
        self.call.counted(Self::NAME, "patch", result)
    }
    async fn delete(&mut self, key: kube::ObjectKey) -> WitResult<()> {
        let result = PluginKube::delete(self, &key).await;
        self.call.counted(Self::NAME, "delete", result)
    }
    async fn emit_event(
        &mut self,
        key: kube::ObjectKey,
        event_type: kube::EventType,
        reason: String,
        message: String,
    ) -> WitResult<()> {
        let result = PluginKube::emit_event(self, &key, event_type, &reason, &message).await;
        self.call.counted(Self::NAME, "emit-event", result)
    }
}
