//! The rules of `state` (always granted): key and value sizes. Pure.

use crate::capabilities::error::CapError;

pub const MAX_KEY: usize = 512;
pub const MAX_VALUE: usize = 1 << 20;

pub fn check_key(key: &str) -> Result<(), CapError> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(CapError::Invalid(format!(
            "state keys must be 1 to {MAX_KEY} bytes long, not {}",
            key.len()
        )));
    }
    Ok(())
}

pub fn check_value(key: &str, value: &[u8]) -> Result<(), CapError> {
    if value.len() > MAX_VALUE {
        return Err(CapError::Invalid(format!(
            "state value for {key:?} is {} bytes; at most {MAX_VALUE} are allowed",
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
        assert!(check_key(&"k".repeat(MAX_KEY + 1)).is_err());
        assert!(check_value("k", &vec![0; MAX_VALUE]).is_ok());
        assert!(matches!(
            check_value("k", &vec![0; MAX_VALUE + 1]),
            Err(CapError::Invalid(_))
        ));
    }
}
