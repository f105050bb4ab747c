//! What a plugin's kube rules allow: the pure rules live in `tend-rules`
//! (shared with the SDK's fake); here they meet the host's error type, and
//! the Event naming the recorder aggregates by.

use super::backend::EventNote;
use crate::capabilities::error::CapError;
pub use tend_rules::kube::{
    Access, KubeRule, OwnLease, PatchShape, Verb, bind_to_uid, check, check_fleet_lease,
    check_found, check_key, check_object, check_own_lease, list_scope, needs_object,
};

/// May `plugin` on `node` make `access`?
pub fn allow(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
) -> Result<(), CapError> {
    Ok(check(rules, plugin, node, access)?)
}

/// The name of the Event about object `name` (`uid`) saying `note`: the same
/// reason and message about the same object is the same Event, whose count
/// grows, as the kubelet's recorder aggregates.
pub fn event_name(name: &str, uid: &str, note: &EventNote) -> String {
    let digest = xxhash_rust::xxh3::xxh3_64(
        format!(
            "{uid}\0{}\0{}\0{}",
            note.reporter, note.reason, note.message
        )
        .as_bytes(),
    );
    // Object names are at most 253 characters; keep room for the suffix.
    let stem: String = name.chars().take(230).collect();
    format!("{stem}.{digest:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::kube::EventType;

    fn note(message: &str) -> EventNote {
        EventNote {
            event_type: EventType::Normal,
            reason: "Labeled".into(),
            message: message.into(),
            reporter: "tend-p".into(),
        }
    }

    #[test]
    fn the_same_note_about_the_same_object_is_one_event() {
        assert_eq!(
            event_name("node-1", "u1", &note("a")),
            event_name("node-1", "u1", &note("a"))
        );
        assert_ne!(
            event_name("node-1", "u1", &note("a")),
            event_name("node-1", "u1", &note("b"))
        );
        assert_ne!(
            event_name("node-1", "u1", &note("a")),
            event_name("node-1", "u2", &note("a"))
        );
        assert!(event_name(&"x".repeat(300), "u", &note("a")).len() <= 253);
    }

    #[test]
    fn refusals_become_capability_errors() {
        let access = Access {
            group: "",
            resource: "nodes",
            verb: Verb::Get,
            namespace: None,
            name: Some("n"),
        };
        assert_eq!(allow(&[], "p", "n", &access).unwrap_err().kind(), "denied");
    }
}
