//! The one error of every capability, shared by the host and the SDK so the
//! eight cases, their names and their display are written once. The WIT
//! `error` variant (`wit/types.wit`) is the same eight cases; the host and the
//! SDK each convert to and from their generated binding in one place.

use crate::Refusal;

/// The WIT `error` variant, case for case; each carries a message meant for
/// operators that says what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Not granted; the message names the grant to add.
    Denied(String),
    /// The file, key, unit or resource does not exist.
    NotFound(String),
    /// The target changed under us or is in a conflicting state.
    Conflict(String),
    /// The backend (a peer, a service, the network) could not be reached.
    Unavailable(String),
    /// The call, or the whole reconcile, ran past its deadline.
    Timeout(String),
    /// The request itself is malformed (bad path, bad URL, bad config).
    Invalid(String),
    /// A host-wide budget for destructive operations is used up for now.
    BudgetExhausted(String),
    Other(String),
}

impl Error {
    /// The case name as in the WIT (`not-found`, ...): what plugins, metrics
    /// labels and the journal call it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Denied(_) => "denied",
            Error::NotFound(_) => "not-found",
            Error::Conflict(_) => "conflict",
            Error::Unavailable(_) => "unavailable",
            Error::Timeout(_) => "timeout",
            Error::Invalid(_) => "invalid",
            Error::BudgetExhausted(_) => "budget-exhausted",
            Error::Other(_) => "other",
        }
    }

    /// The operator-facing message, without the kind.
    pub fn message(&self) -> &str {
        match self {
            Error::Denied(m)
            | Error::NotFound(m)
            | Error::Conflict(m)
            | Error::Unavailable(m)
            | Error::Timeout(m)
            | Error::Invalid(m)
            | Error::BudgetExhausted(m)
            | Error::Other(m) => m,
        }
    }

    /// The named reason a refusal (`budget-exhausted`) begins with
    /// (`[window] ...`): every refusal of the host's gate and fleet has one.
    /// Other errors name none.
    pub fn reason(&self) -> Option<crate::reason::Reason> {
        match self {
            Error::BudgetExhausted(message) => crate::reason::Reason::of(message),
            _ => None,
        }
    }

    /// The same case with its message changed by `f` (the host bounds the
    /// text of errors a plugin returns without naming each case).
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Error {
        match self {
            Error::Denied(m) => Error::Denied(f(m)),
            Error::NotFound(m) => Error::NotFound(f(m)),
            Error::Conflict(m) => Error::Conflict(f(m)),
            Error::Unavailable(m) => Error::Unavailable(f(m)),
            Error::Timeout(m) => Error::Timeout(f(m)),
            Error::Invalid(m) => Error::Invalid(f(m)),
            Error::BudgetExhausted(m) => Error::BudgetExhausted(f(m)),
            Error::Other(m) => Error::Other(f(m)),
        }
    }
}

/// `kind: message` (`denied: add "x" to ...`), as operators read it.
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Error {}

/// A rule's refusal is the capability error of the same case: the one place
/// host and SDK turn one into the other.
impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Denied(m) => Error::Denied(m),
            Refusal::Invalid(m) => Error::Invalid(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_kind_and_message() {
        assert_eq!(Error::Denied("add x".into()).to_string(), "denied: add x");
        assert_eq!(
            Error::BudgetExhausted("wait".into()).to_string(),
            "budget-exhausted: wait"
        );
    }

    #[test]
    fn a_refusal_keeps_its_case_and_message() {
        let refusal = Refusal::Invalid("relative path".into());
        let error = Error::from(refusal.clone());
        assert_eq!(
            (error.kind(), error.message()),
            (refusal.kind(), refusal.message())
        );
    }

    #[test]
    fn map_message_keeps_the_case() {
        let error = Error::Timeout("slow".into()).map_message(|m| m.to_uppercase());
        assert_eq!(error, Error::Timeout("SLOW".into()));
    }
}
