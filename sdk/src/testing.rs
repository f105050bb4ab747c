//! In-memory fakes of every capability, for unit tests of plugin logic in plain
//! `cargo test`. They follow the host's contract: atomic-write semantics (report
//! whether content changed), `not-found` errors, and the host's own grant rules
//! and messages: like the host, they deny every file and URL not granted.
//!
//! ```
//! use tend_sdk::testing::FakeHost;
//! use tend_sdk::{Host, Response};
//! let host = FakeHost::named("mirror-gate");
//! host.http.grant("http://cache:5000/*");
//! host.http.respond("GET", "http://cache:5000/v2/", Ok(Response { status: 200, headers: vec![], body: vec![] }));
//! assert_eq!(host.http().send(&tend_sdk::Request::get("http://cache:5000/v2/")).unwrap().status, 200);
//! let denied = host.files().read("/etc/hosts").unwrap_err();
//! assert_eq!(denied.message(), "no files grant covers /etc/hosts: add { path = \"/etc\" } to [plugins.mirror-gate.grants] files");
//! ```

use crate::fake::Fake;
use crate::log::FakeLog;
use crate::{Host, Level};

/// [`FakeHost`] with one public field per listed capability, its fake, and
/// the `Host` accessors handing them out; the fakes re-exported here.
macro_rules! fake_host {
    ($(
        $(#[$doc:meta])*
        $name:ident: $trait:ident, $wasm:ident, $fake:ident, [$($ty:ident),*], [$($test:ident),*];
    )*) => {
        $( pub use crate::$name::{$fake $(, $test)*}; )*

        /// A [`Host`] whose capabilities are the public fakes, for one plugin: its name
        /// appears in denial messages, as `[plugins.NAME.grants]`.
        pub struct FakeHost {
            $(
                #[doc = concat!(
                    "What [`Host::", stringify!($name), "`] hands out: grant, script and inspect it here."
                )]
                pub $name: $fake,
            )*
            plugin: String,
            log: FakeLog,
        }

        impl FakeHost {
            /// A host for the plugin `plugin`, with no grants.
            pub fn named(plugin: &str) -> Self {
                FakeHost {
                    $( $name: Fake::for_plugin(plugin), )*
                    plugin: plugin.to_string(),
                    log: FakeLog::default(),
                }
            }
        }

        impl Host for FakeHost {
            fn log(&self, level: Level, message: &str) {
                self.log.log(level, message);
            }
            $(
                fn $name(&self) -> &dyn crate::$trait {
                    &self.$name
                }
            )*
        }
    };
}
capability_list!(fake_host);

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl FakeHost {
    /// A host for a plugin named "test", with no grants.
    pub fn new() -> Self {
        FakeHost::named("test")
    }

    /// The plugin name the grants belong to.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Every line the plugin logged so far (`log`; `logs` is the node's
    /// logs capability).
    pub fn log_lines(&self) -> Vec<(Level, String)> {
        self.log.lines()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    #[test]
    fn a_new_host_denies_files_and_http_naming_the_plugin() {
        let host = FakeHost::new();
        assert_eq!(host.plugin(), "test");
        let err = host.files().write("/etc/a", b"", None).unwrap_err();
        assert!(
            err.message().ends_with("to [plugins.test.grants] files"),
            "{err}"
        );
        let host = FakeHost::named("mirror-gate");
        let err = host
            .http()
            .send(&Request::get("http://127.0.0.1:5000/v2/"))
            .unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert!(
            err.message()
                .ends_with("to [plugins.mirror-gate.grants] http"),
            "{err}"
        );
        host.log(Level::Info, "hello");
        assert_eq!(host.log_lines(), [(Level::Info, "hello".to_string())]);
    }
}
