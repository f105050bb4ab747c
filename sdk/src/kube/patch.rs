//! Patches applied to an object as the API server applies them.

use super::PatchType;
use serde_json::{Map, Value};

/// `patch` applied to `object` as the API server would: a merge patch (RFC
/// 7386), a JSON patch (RFC 6902, all or nothing) or a server-side apply,
/// which without field managers is a merge. The error says why a JSON patch
/// does not apply.
pub(super) fn apply_patch(
    object: &mut Value,
    patch_type: PatchType,
    patch: &Value,
) -> Result<(), String> {
    match patch_type {
        PatchType::Merge | PatchType::Apply => merge_patch(object, patch),
        PatchType::Json => {
            let operations: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| {
                    format!("not a JSON patch ({e}); send a list of RFC 6902 operations")
                })?;
            json_patch::patch(object, &operations).map_err(|e| {
                format!("the JSON patch does not apply ({e}); patch paths that exist, or `add` their parents first")
            })?;
        }
    }
    Ok(())
}

/// RFC 7386: apply the JSON merge patch `patch` to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in fields {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}
