//! The registration list: one line per capability. Everything that has one
//! field or one entry per capability (grants, `[host]` settings, backends,
//! fakes, per-call adapters, linker registration, budgetable operations, the
//! capabilities' trigger sources and `/metrics` families) is generated from
//! it, here and in the config.

use super::call::Call;
use super::capability::{BackendEnv, Capability};
use super::watch::{TriggerSink, Watch};
use crate::wit;
use std::sync::Arc;
use wasmtime::component::{HasSelf, Linker};

/// The store data of a call: where the linker finds the adapters.
pub trait HasCapabilities: Send + 'static {
    fn capabilities(&mut self) -> &mut Capabilities;
}

/// A capability's trigger source as the scheduler holds it: told every
/// plugin's [`Grants`], it picks its own capability's grant.
pub trait CapabilityWatch: Send {
    /// Watch for `plugins` (every enabled plugin, with its grants).
    fn update(&mut self, plugins: &[(&str, &Grants)], sink: Arc<dyn TriggerSink>);
    /// What a plugin holding `grants` waits on from this source, in words.
    fn waits_on(&self, grants: &Grants) -> Vec<String>;
}

/// A source with the accessor of its capability's grant in [`Grants`].
pub(super) struct GrantWatch<Grant: 'static> {
    pub source: Box<dyn Watch<Grant>>,
    pub pick: fn(&Grants) -> &Grant,
}

impl<Grant: Clone + 'static> CapabilityWatch for GrantWatch<Grant> {
    fn update(&mut self, plugins: &[(&str, &Grants)], sink: Arc<dyn TriggerSink>) {
        let watchers = plugins
            .iter()
            .map(|(plugin, grants)| (plugin.to_string(), (self.pick)(grants).clone()))
            .collect();
        self.source.update(watchers, sink);
    }

    fn waits_on(&self, grants: &Grants) -> Vec<String> {
        self.source.waits_on((self.pick)(grants))
    }
}

/// Calls `$callback! { name: adapter, ... }` with every capability.
macro_rules! capability_list {
    ($callback:ident) => {
        $callback! {
            log: $crate::capabilities::log::PluginLog,
            state: $crate::capabilities::state::PluginState,
            files: $crate::capabilities::files::PluginFiles,
            http: $crate::capabilities::http::PluginHttp,
            systemd: $crate::capabilities::systemd::PluginSystemd,
            cri: $crate::capabilities::cri::PluginCri,
            metrics: $crate::capabilities::metrics::PluginMetrics,
            kube: $crate::capabilities::kube::PluginKube,
            cloud: $crate::capabilities::cloud::PluginCloud,
            logs: $crate::capabilities::logs::PluginLogs,
            conditions: $crate::capabilities::conditions::PluginConditions,
        }
    };
}
pub(crate) use capability_list;

macro_rules! generate {
    ($($name:ident: $cap:ty,)*) => {
        /// `[plugins.<name>.grants]`: one key per capability, nothing granted by default.
        #[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Grants {
            $( #[serde(default)] pub $name: <$cap as Capability>::Grant, )*
        }

        impl Grants {
            /// Each capability a grant gates (nothing of it granted by
            /// default: all but log, state and metrics), with whether these
            /// grants give any of it that only the plugin's own calls use
            /// (not the host: [`Capability::host_uses`]).
            pub fn gated(&self) -> Vec<(&'static str, bool)> {
                let mut gated = Vec::new();
                $(
                    if <$cap as Capability>::describe_grant(&Default::default()).is_empty() {
                        let granted = !<$cap as Capability>::describe_grant(&self.$name).is_empty()
                            && !<$cap as Capability>::host_uses(&self.$name);
                        gated.push((<$cap as Capability>::NAME, granted));
                    }
                )*
                gated
            }

            /// Every grant in words: "files: /etc/containerd/certs.d (read-write)".
            pub fn describe(&self) -> Vec<String> {
                let mut lines = Vec::new();
                $(
                    for line in <$cap as Capability>::describe_grant(&self.$name) {
                        lines.push(format!("{}: {line}", <$cap as Capability>::NAME));
                    }
                )*
                lines
            }
        }

        /// Every capability's `[host.<name>]` settings.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct Settings {
            $( pub $name: <$cap as Capability>::Settings, )*
        }

        /// Every capability's own `[plugins.<name>.limits]` keys, each named
        /// `<capability>-<key>` ("kube-qps").
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct CapabilityLimits {
            $( pub $name: <$cap as Capability>::Limits, )*
        }

        impl CapabilityLimits {
            /// Read the keys `owner` owns (its table): the capability's own
            /// type refuses what it does not know, by the key as written.
            pub fn read(&mut self, owner: &str, table: toml::Table) -> Result<(), toml::de::Error> {
                $(
                    if owner == <$cap as Capability>::NAME {
                        self.$name = toml::Value::Table(table).try_into()?;
                        return Ok(());
                    }
                )*
                unreachable!("limits read for {owner}, which is not a capability")
            }
        }

        /// The backends every plugin's adapters share.
        #[derive(Clone)]
        pub struct Backends {
            $( pub $name: Arc<<$cap as Capability>::Backend>, )*
        }

        /// Handles on the fakes behind [`Backends::fake`], to script and inspect them.
        pub struct Fakes {
            $( pub $name: Arc<<$cap as Capability>::Fake>, )*
        }

        /// The adapters handed to one reconcile of one plugin.
        pub struct Capabilities {
            $( pub $name: $cap, )*
        }

        /// Every capability's name, in registration order.
        pub const NAMES: &[&str] = &[$( <$cap as Capability>::NAME, )*];

        /// Every mutating operation as "capability.operation": what a budget may name.
        pub fn mutating_operations() -> Vec<String> {
            let mut all = Vec::new();
            $(
                for operation in <$cap as Capability>::MUTATIONS {
                    all.push(format!("{}.{operation}", <$cap as Capability>::NAME));
                }
            )*
            all
        }

        impl Backends {
            /// Every capability's trigger source, in registration order.
            pub fn watches(&self) -> Vec<Box<dyn CapabilityWatch>> {
                let mut sources: Vec<Box<dyn CapabilityWatch>> = Vec::new();
                $(
                    if let Some(source) = <$cap as Capability>::watch(&self.$name) {
                        sources.push(Box::new(GrantWatch { source, pick: |grants: &Grants| &grants.$name }));
                    }
                )*
                sources
            }

            /// Every capability's own `/metrics` families, of the plugins `configured` accepts.
            pub fn render_metrics(&self, configured: &dyn Fn(&str) -> bool) -> String {
                let mut text = String::new();
                $( text.push_str(&<$cap as Capability>::render_metrics(&*self.$name, configured)); )*
                text
            }

            pub fn real(settings: &Settings, env: &BackendEnv) -> anyhow::Result<Self> {
                Ok(Backends { $( $name: <$cap as Capability>::real(&settings.$name, env)?, )* })
            }

            pub fn fake() -> (Self, Fakes) {
                $( let $name = <$cap as Capability>::fake(); )*
                (Backends { $( $name: $name.0, )* }, Fakes { $( $name: $name.1, )* })
            }
        }

        impl Capabilities {
            pub fn for_call(backends: &Backends, grants: &Grants, limits: &CapabilityLimits, call: &Arc<Call>) -> Self {
                Capabilities {
                    $( $name: <$cap as Capability>::for_call(&backends.$name, &grants.$name, &limits.$name, call), )*
                }
            }

            /// Register every capability's imports (and the shared `types`).
            pub fn add_to_linker<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
                wit::types::add_to_linker::<T, HasSelf<Capabilities>>(linker, |t: &mut T| t.capabilities())?;
                $( <$cap as Capability>::add_to_linker(linker, |t: &mut T| &mut t.capabilities().$name)?; )*
                Ok(())
            }
        }
    };
}
capability_list!(generate);

impl wit::types::Host for Capabilities {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_can_name_every_mutation_and_nothing_else() {
        let operations = mutating_operations();
        for expected in [
            "files.write",
            "files.remove",
            "http.send",
            "systemd.restart",
            "systemd.daemon-reload",
            "cri.remove-pod-sandbox",
            "cri.pull-image",
            "kube.delete",
            "kube.emit-event",
        ] {
            assert!(operations.iter().any(|o| o == expected), "{operations:?}");
        }
        assert!(
            !operations
                .iter()
                .any(|o| o.starts_with("state.") || o.starts_with("metrics.") || o == "files.read")
        );
    }

    #[test]
    fn metrics_renders_the_series_of_configured_plugins_through_its_hook() {
        let (backends, _) = Backends::fake();
        let counter = crate::capabilities::metrics::Kind::Counter;
        for plugin in ["kept", "gone"] {
            backends
                .metrics
                .record(plugin, counter, "syncs_total", &[], 1.0)
                .unwrap();
        }
        let text = backends.render_metrics(&|plugin| plugin == "kept");
        assert!(text.contains("plugin=\"kept\""), "{text}");
        assert!(!text.contains("plugin=\"gone\""), "{text}");
    }
}
