//! Why a mutation was not made, by name. Every refusal the host gives (a
//! `budget-exhausted` error) begins with its reason in brackets, as do the
//! built-in plugins' outcomes when they hold back:
//!
//! `[window] fleet budget reboots: outside its maintenance windows; ...`
//!
//! so `tend plan`, an outcome, a log line or a plugin's own code can tell a
//! closed maintenance window from a PodDisruptionBudget without reading the
//! prose. One parser ([`Reason::of`]) and one writer ([`Reason::tag`]) serve
//! the host, the SDKs and their fakes.

use crate::ident::{KUBE_NAME, KUBE_NAMESPACE, check};

/// A named reason to hold back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// A host budget, or the fleet's share of nodes disrupted at once or its rate.
    Budget,
    /// Outside the class's maintenance windows.
    Window,
    /// The fleet is not healthy enough: the last node disrupted has not
    /// settled, or an alert fires.
    Health,
    /// The reconcile's own bounds (mutations, journal bytes).
    Limit,
    /// A PodDisruptionBudget, "namespace/name" ("namespace/*" when the API
    /// server did not say which).
    Pdb(String),
    /// A breaker is open (a plugin's own: node-reaper's churn guard, ...).
    Breaker,
    /// What the step relies on changed since it was read (the Node was
    /// uncordoned by someone else, the object is another one now).
    StaleState,
    /// The step before has not been verified yet.
    Unverified,
}

/// The longest tag [`Reason::of`] reads: "pdb:" and a namespace and name.
const MAX_TAG: usize = 4 + 63 + 1 + 253;
/// How many reasons one message names at most.
pub const MAX_REASONS: usize = 8;

impl Reason {
    /// Its name, as `tend plan` prints it: `budget`, `pdb:default/web`, ...
    pub fn name(&self) -> String {
        match self {
            Reason::Budget => "budget".into(),
            Reason::Window => "window".into(),
            Reason::Health => "health".into(),
            Reason::Limit => "limit".into(),
            Reason::Pdb(budget) => format!("pdb:{budget}"),
            Reason::Breaker => "breaker".into(),
            Reason::StaleState => "stale-state".into(),
            Reason::Unverified => "unverified".into(),
        }
    }

    /// `message` with this reason in front: "[window] outside ...".
    pub fn tag(&self, message: &str) -> String {
        format!("[{}] {message}", self.name())
    }

    /// `message` with `reasons` in front: "[pdb:a/x] [pdb:a/y] blocked ..."
    /// (at most [`MAX_REASONS`]: as many as a reader reads).
    pub fn tag_all(reasons: &[Reason], message: &str) -> String {
        let mut tagged = String::new();
        for reason in reasons.iter().take(MAX_REASONS) {
            tagged.push_str(&format!("[{}] ", reason.name()));
        }
        tagged + message
    }

    /// The reason a message begins with, if it begins with one (after the
    /// error's kind, if it is there: "budget-exhausted: [budget] ...").
    /// A PodDisruptionBudget's name is checked as Kubernetes names are.
    pub fn of(message: &str) -> Option<Reason> {
        Reason::all(message).into_iter().next()
    }

    /// Every reason a message begins with (at most [`MAX_REASONS`]).
    pub fn all(message: &str) -> Vec<Reason> {
        let mut rest = message
            .strip_prefix("budget-exhausted: ")
            .unwrap_or(message);
        let mut reasons = Vec::new();
        while reasons.len() < MAX_REASONS
            && let Some((reason, after)) = Reason::first(rest)
        {
            reasons.push(reason);
            rest = after.strip_prefix(' ').unwrap_or(after);
        }
        reasons
    }

    fn first(message: &str) -> Option<(Reason, &str)> {
        let tag = message.strip_prefix('[')?;
        let end = tag.find(']').filter(|end| *end <= MAX_TAG)?;
        Some((Reason::named(&tag[..end])?, &tag[end + 1..]))
    }

    /// The reason of a name ([`Reason::name`]).
    pub fn named(name: &str) -> Option<Reason> {
        Some(match name {
            "budget" => Reason::Budget,
            "window" => Reason::Window,
            "health" => Reason::Health,
            "limit" => Reason::Limit,
            "breaker" => Reason::Breaker,
            "stale-state" => Reason::StaleState,
            "unverified" => Reason::Unverified,
            other => {
                let (namespace, budget) = other.strip_prefix("pdb:")?.split_once('/')?;
                check("", namespace, &KUBE_NAMESPACE).ok()?;
                if budget != "*" {
                    check("", budget, &KUBE_NAME).ok()?;
                }
                Reason::Pdb(format!("{namespace}/{budget}"))
            }
        })
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_tag() {
        let all = [
            Reason::Budget,
            Reason::Window,
            Reason::Health,
            Reason::Limit,
            Reason::Pdb("default/web-pdb".into()),
            Reason::Pdb("kube-system/*".into()),
            Reason::Breaker,
            Reason::StaleState,
            Reason::Unverified,
        ];
        for reason in all {
            let message = reason.tag("why it is so");
            assert_eq!(Reason::of(&message), Some(reason.clone()), "{message}");
            let error = format!("budget-exhausted: {message}");
            assert_eq!(Reason::of(&error), Some(reason), "{error}");
        }
    }

    #[test]
    fn several_reasons_read_back_in_order_and_boundedly() {
        let reasons = [
            Reason::Pdb("default/a".into()),
            Reason::Pdb("default/b".into()),
            Reason::Window,
        ];
        let message = Reason::tag_all(&reasons, "held");
        assert_eq!(message, "[pdb:default/a] [pdb:default/b] [window] held");
        assert_eq!(Reason::all(&message), reasons);
        assert_eq!(Reason::all("[budget] [nope] [window] x"), [Reason::Budget]);
        let many = Reason::tag_all(&vec![Reason::Budget; 20], "x");
        assert_eq!(many, format!("{}x", "[budget] ".repeat(MAX_REASONS)));
        let written = format!("{}x", "[budget] ".repeat(20));
        assert_eq!(Reason::all(&written).len(), MAX_REASONS);
    }

    #[test]
    fn a_message_without_a_tag_or_with_an_unknown_one_has_no_reason() {
        for message in [
            "outside the window",
            "[nope] not a reason",
            "[budget without its end",
            " [budget] not at the start",
            "denied: [budget] another kind of error",
            "",
            "[",
        ] {
            assert_eq!(Reason::of(message), None, "{message:?}");
        }
    }

    #[test]
    fn a_pdb_tag_names_a_valid_namespace_and_name_only() {
        for message in [
            "[pdb:default] no name",
            "[pdb:Default/web] upper case",
            "[pdb:default/web pdb] a space",
            "[pdb:default/../x] a path",
            "[pdb:/web] no namespace",
            "[pdb:default/] an empty name",
        ] {
            assert_eq!(Reason::of(message), None, "{message:?}");
        }
        let long = format!("[pdb:default/{}] too long", "a".repeat(254));
        assert_eq!(Reason::of(&long), None);
    }
}
