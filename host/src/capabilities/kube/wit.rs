//! `tend:plugin/kube` answered by the adapter.

use super::adapter::PluginKube;
use crate::capabilities::Capability;
use crate::wit::kube;
use crate::wit::types;

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl kube::Host for PluginKube {
    async fn get(&mut self, key: kube::ObjectKey) -> WitResult<String> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "get", (key,), |(key,)| async move {
                this.get(&key).await
            })
            .await
    }
    async fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        params: kube::ListParams,
    ) -> WitResult<kube::ObjectList> {
        let this = &*self;
        let args = (api_version, kind, namespace, params);
        this.call
            .answer(Self::NAME, "list", args, |args| async move {
                let (api_version, kind, namespace, params) = args;
                let list = this
                    .list(&api_version, &kind, namespace.as_deref(), &params)
                    .await?;
                Ok(kube::ObjectList {
                    // The WIT's list<string> owns its strings: one copy, no serializing.
                    items: list.items.iter().map(|text| text.to_string()).collect(),
                    continue_token: list.continue_token,
                    resource_version: list.resource_version,
                })
            })
            .await
    }
    async fn create(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        object: String,
    ) -> WitResult<String> {
        let this = &*self;
        let args = (api_version, kind, namespace, object);
        this.call
            .answer(Self::NAME, "create", args, |args| async move {
                let (api_version, kind, namespace, object) = args;
                this.create(&api_version, &kind, namespace.as_deref(), &object)
                    .await
            })
            .await
    }
    async fn patch(
        &mut self,
        key: kube::ObjectKey,
        patch_type: kube::PatchType,
        patch: String,
    ) -> WitResult<String> {
        let this = &*self;
        let args = (key, patch_type, patch);
        this.call
            .answer(Self::NAME, "patch", args, |(key, patch_type, patch)| async move {
                this.patch(&key, patch_type, &patch).await
            })
            .await
    }
    async fn delete(&mut self, key: kube::ObjectKey) -> WitResult<()> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "delete", (key,), |(key,)| async move {
                this.delete(&key).await
            })
            .await
    }
    async fn emit_event(
        &mut self,
        key: kube::ObjectKey,
        event_type: kube::EventType,
        reason: String,
        message: String,
    ) -> WitResult<()> {
        let this = &*self;
        let args = (key, event_type, reason, message);
        this.call
            .answer(Self::NAME, "emit-event", args, |args| async move {
                let (key, event_type, reason, message) = args;
                this.emit_event(&key, event_type, &reason, &message).await
            })
            .await
    }
}
