//! The [`Host`] a reconcile is handed; its accessors return [`NotProvided`]
//! by default. Each capability (its trait, wasm glue and fake) lives in its
//! own module; its accessor here comes from the list in `lib.rs`.

use crate::{Level, NotProvided};

/// [`Host`]: `log`, then one accessor per listed capability, defaulting to
/// [`NotProvided`].
macro_rules! host_trait {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        /// What a reconcile can reach. Whether a call succeeds depends on the
        /// operator's grants: an ungranted call returns `denied`, with a message naming
        /// the grant to add.
        ///
        /// Every accessor has a default, so a capability added to the SDK later does
        /// not break an existing implementation of this trait: a capability the
        /// implementation does not override is [`NotProvided`], whose every call
        /// returns [`crate::Error::Denied`] ("... is not provided by this host ..."), and the
        /// default [`Host::log`] drops the line. The wasm host and
        /// [`crate::testing::FakeHost`] override every accessor.
        pub trait Host {
            /// Log a line; the default drops it.
            fn log(&self, level: Level, message: &str) {
                let _ = (level, message);
            }
            $(
                $(#[$doc])*
                fn $name(&self) -> &dyn crate::$trait {
                    &NotProvided
                }
            )*
        }
    };
}
capability_list!(host_trait);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, Request};

    /// A host written before any capability existed still compiles.
    struct Bare;
    impl Host for Bare {}

    #[test]
    fn accessors_not_overridden_deny_every_call() {
        let host: &dyn Host = &Bare;
        host.log(Level::Info, "dropped");
        let err = host.files().read("/etc/hosts").unwrap_err();
        assert_eq!(
            err,
            Error::Denied(
                "files is not provided by this host: its Host implementation does not override Host::files".into()
            )
        );
        assert_eq!(host.state().get("k").unwrap_err().kind(), "denied");
        assert_eq!(host.state().list_keys("").unwrap_err().kind(), "denied");
        let err = host.http().send(&Request::get("http://x/")).unwrap_err();
        assert!(
            matches!(&err, Error::Denied(m) if m.starts_with("http is not provided by this host")),
            "{err}"
        );
        assert_eq!(
            host.metrics().gauge_set("up", &[], 1.0).unwrap_err().kind(),
            "denied"
        );
    }
}
