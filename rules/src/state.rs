//! The rules of `state` (always granted): key and value sizes, so one
//! plugin's store stays small enough to read back whole.

use crate::Refusal;

pub const MAX_KEY: usize = 512;
pub const MAX_VALUE: usize = 1 << 20;

/// A key is 1 to [`MAX_KEY`] bytes.
pub fn check_key(key: &str) -> Result<(), Refusal> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(Refusal::Invalid(format!(
            "state keys must be 1 to {MAX_KEY} bytes long, not {}; use a shorter key (a hash of a long one)",
            key.len()
        )));
    }
    Ok(())
}

/// A `list-keys` prefix is at most [`MAX_KEY`] bytes (empty lists every
/// key): a longer one matches no key, and plugin text is bounded everywhere.
pub fn check_prefix(prefix: &str) -> Result<(), Refusal> {
    if prefix.len() > MAX_KEY {
        return Err(Refusal::Invalid(format!(
            "state key prefixes are at most {MAX_KEY} bytes long, not {}; a longer prefix matches no key",
            prefix.len()
        )));
    }
    Ok(())
}

/// A value is at most [`MAX_VALUE`] bytes.
pub fn check_value(key: &str, value: &[u8]) -> Result<(), Refusal> {
    if value.len() > MAX_VALUE {
        return Err(Refusal::Invalid(format!(
            "state value for {:?} is {} bytes; at most {MAX_VALUE} are allowed: store less, or split it over several keys",
            crate::shown(key),
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_bounded() {
        assert!(check_key("").is_err());
        assert!(check_key(&"k".repeat(MAX_KEY)).is_ok());
        assert_eq!(
            check_key(&"k".repeat(MAX_KEY + 1)).unwrap_err(),
            Refusal::Invalid(
                "state keys must be 1 to 512 bytes long, not 513; use a shorter key (a hash of a long one)".into()
            )
        );
        assert!(check_value("k", &vec![0; MAX_VALUE]).is_ok());
        assert_eq!(
            check_value("k", &vec![0; MAX_VALUE + 1])
                .unwrap_err()
                .kind(),
            "invalid"
        );
    }
}
