//! The wasm glue: the host's `kube` import; objects cross it as JSON text.

use super::{
    DrainOptions, DrainReport, EventType, Kube, ListParams, ObjectKey, PatchType, TextList,
    invalid_json,
};
use crate::bindings::tend::plugin::kube as wit;
use crate::types::from_wit_error;
use crate::{Error, Result};
use serde_json::Value;

pub(crate) struct WasmKube;

fn parse(call: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| invalid_json(call, e))
}

fn text(call: &str, value: &Value) -> Result<String> {
    serde_json::to_string(value).map_err(|e| Error::Invalid(format!("kube {call}: not JSON: {e}")))
}

impl Kube for WasmKube {
    fn get(&self, k: &ObjectKey) -> Result<Value> {
        let object = wit::get(k).map_err(from_wit_error)?;
        parse("get", &object)
    }
    fn list_texts(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<TextList> {
        let list = wit::list(api_version, kind, namespace, params).map_err(from_wit_error)?;
        Ok(TextList {
            items: list.items,
            continue_token: list.continue_token,
            resource_version: list.resource_version,
        })
    }
    fn create(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        object: &Value,
    ) -> Result<Value> {
        let object = text("create", object)?;
        let created = wit::create(api_version, kind, namespace, &object).map_err(from_wit_error)?;
        parse("create", &created)
    }
    fn patch(&self, k: &ObjectKey, patch_type: PatchType, patch: &Value) -> Result<Value> {
        let patch = text("patch", patch)?;
        let patched = wit::patch(k, patch_type, &patch).map_err(from_wit_error)?;
        parse("patch", &patched)
    }
    fn delete(&self, k: &ObjectKey) -> Result<()> {
        wit::delete(k).map_err(from_wit_error)
    }
    fn emit_event(
        &self,
        regarding: &ObjectKey,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        wit::emit_event(regarding, event_type, reason, message).map_err(from_wit_error)
    }
    fn cordon(&self, unschedulable: bool) -> Result<()> {
        wit::cordon(unschedulable).map_err(from_wit_error)
    }
    fn evict(&self, namespace: &str, name: &str) -> Result<()> {
        wit::evict(namespace, name).map_err(from_wit_error)
    }
    fn drain(&self, options: &DrainOptions) -> Result<DrainReport> {
        wit::drain(*options).map_err(from_wit_error)
    }
}
