//! What a plugin's `conditions` grant allows: the pure rules live in
//! `tend-rules` (shared with the SDK's fake).

pub use tend_rules::conditions::{
    ConditionsGrant, Granted, MAX_MESSAGE, check_condition, check_list, check_note, check_ttl,
};
