//! The one error of every capability, and its one conversion to and from the
//! WIT `error` variant. The type itself lives in the rules crate
//! ([`tend_rules::Error`]) so the SDK's fakes return the very same one.

use crate::wit::types;

/// The WIT `error` variant, case for case, shared with the SDK.
pub use tend_rules::Error as CapError;

impl From<CapError> for types::Error {
    fn from(e: CapError) -> Self {
        match e {
            CapError::Denied(m) => types::Error::Denied(m),
            CapError::NotFound(m) => types::Error::NotFound(m),
            CapError::Conflict(m) => types::Error::Conflict(m),
            CapError::Unavailable(m) => types::Error::Unavailable(m),
            CapError::Timeout(m) => types::Error::Timeout(m),
            CapError::Invalid(m) => types::Error::Invalid(m),
            CapError::BudgetExhausted(m) => types::Error::BudgetExhausted(m),
            CapError::Other(m) => types::Error::Other(m),
        }
    }
}

impl From<types::Error> for CapError {
    fn from(e: types::Error) -> Self {
        match e {
            types::Error::Denied(m) => CapError::Denied(m),
            types::Error::NotFound(m) => CapError::NotFound(m),
            types::Error::Conflict(m) => CapError::Conflict(m),
            types::Error::Unavailable(m) => CapError::Unavailable(m),
            types::Error::Timeout(m) => CapError::Timeout(m),
            types::Error::Invalid(m) => CapError::Invalid(m),
            types::Error::BudgetExhausted(m) => CapError::BudgetExhausted(m),
            types::Error::Other(m) => CapError::Other(m),
        }
    }
}
