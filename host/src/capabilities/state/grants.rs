//! The rules of `state` (always granted): key and value sizes, from the
//! rules crate, so the SDK's fake bounds them alike.

pub use tend_grants::state::{MAX_KEY, MAX_VALUE, check_key, check_value};
