//! The one error of every capability, and its one conversion to the WIT
//! `error` variant.

use crate::wit::types;

/// The WIT `error` variant, case for case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    #[error("denied: {0}")]
    Denied(String),
    #[error("not-found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("timeout: {0}")]
    Timeout(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("budget-exhausted: {0}")]
    BudgetExhausted(String),
    #[error("other: {0}")]
    Other(String),
}

impl CapError {
    /// The case name as in the WIT (`not-found`, ...): a metrics label.
    pub fn kind(&self) -> &'static str {
        match self {
            CapError::Denied(_) => "denied",
            CapError::NotFound(_) => "not-found",
            CapError::Conflict(_) => "conflict",
            CapError::Unavailable(_) => "unavailable",
            CapError::Timeout(_) => "timeout",
            CapError::Invalid(_) => "invalid",
            CapError::BudgetExhausted(_) => "budget-exhausted",
            CapError::Other(_) => "other",
        }
    }
}

impl From<tend_grants::Refusal> for CapError {
    fn from(refusal: tend_grants::Refusal) -> Self {
        match refusal {
            tend_grants::Refusal::Denied(m) => CapError::Denied(m),
            tend_grants::Refusal::Invalid(m) => CapError::Invalid(m),
        }
    }
}

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

/// "ok" or the error: the result column of the journal and the reports.
pub fn outcome<T>(result: &Result<T, CapError>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(e) => e.to_string(),
    }
}
