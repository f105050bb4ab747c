//! The WIT `types` interface: its generated records, with the constructors
//! and helpers plugins and their tests use.

#[cfg(target_arch = "wasm32")]
use crate::bindings::tend::plugin::types::Error as WitError;
use serde::de::DeserializeOwned;

/// The one error type of every capability; each case carries an
/// operator-facing message. The host returns the very same type (it lives in
/// the rules crate), so fakes and host agree on cases, kinds and display.
pub use tend_rules::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The SDK's error as the WIT's, for what a plugin's reconcile returns.
#[cfg(target_arch = "wasm32")]
pub(crate) fn to_wit_error(e: Error) -> WitError {
    match e {
        Error::Denied(m) => WitError::Denied(m),
        Error::NotFound(m) => WitError::NotFound(m),
        Error::Conflict(m) => WitError::Conflict(m),
        Error::Unavailable(m) => WitError::Unavailable(m),
        Error::Timeout(m) => WitError::Timeout(m),
        Error::Invalid(m) => WitError::Invalid(m),
        Error::BudgetExhausted(m) => WitError::BudgetExhausted(m),
        Error::Other(m) => WitError::Other(m),
    }
}

/// The WIT's error as the SDK's, for what an import answered.
#[cfg(target_arch = "wasm32")]
pub(crate) fn from_wit_error(e: WitError) -> Error {
    match e {
        WitError::Denied(m) => Error::Denied(m),
        WitError::NotFound(m) => Error::NotFound(m),
        WitError::Conflict(m) => Error::Conflict(m),
        WitError::Unavailable(m) => Error::Unavailable(m),
        WitError::Timeout(m) => Error::Timeout(m),
        WitError::Invalid(m) => Error::Invalid(m),
        WitError::BudgetExhausted(m) => Error::BudgetExhausted(m),
        WitError::Other(m) => Error::Other(m),
    }
}

/// The WIT records themselves: the host hands over and takes these very types.
pub use crate::bindings::tend::plugin::types::{Context, Health, Outcome, PluginInfo, Trigger};

impl Trigger {
    pub fn new(kind: &str) -> Self {
        Trigger {
            kind: kind.to_string(),
            subject: None,
        }
    }
}

impl Context {
    /// A context for tests: a manual trigger on node "test-node".
    pub fn new(plugin: &str, config_json: &str) -> Self {
        Context {
            plugin: plugin.to_string(),
            config: config_json.to_string(),
            triggers: vec![Trigger::new("manual")],
            node_name: "test-node".to_string(),
            dry_run: false,
        }
    }

    /// The plugin config deserialized into `T`; an `invalid` error names the
    /// key that is wrong ("[plugins.NAME.config] caches[1].endpoint: ...").
    pub fn config<T: DeserializeOwned>(&self) -> Result<T> {
        // Through a JSON value: its errors carry no line and column of a text
        // the operator never saw, only the path of the key.
        let json: serde_json::Value = serde_json::from_str(&self.config)
            .map_err(|e| self.invalid_config(".", &e.to_string()))?;
        serde_path_to_error::deserialize(json)
            .map_err(|e| self.invalid_config(&e.path().to_string(), &e.inner().to_string()))
    }

    /// The `invalid` error of a config value the plugin checked itself.
    pub fn invalid_config(&self, key: &str, why: &str) -> Error {
        Error::Invalid(format!("[plugins.{}.config] {key}: {why}", self.plugin))
    }

    pub fn triggered_by(&self, kind: &str) -> bool {
        self.triggers.iter().any(|t| t.kind == kind)
    }
}

impl Outcome {
    pub fn healthy(message: impl Into<String>) -> Self {
        Outcome {
            health: Health::Healthy,
            message: message.into(),
            requeue_after_ms: None,
        }
    }
    pub fn progressing(message: impl Into<String>) -> Self {
        Outcome {
            health: Health::Progressing,
            message: message.into(),
            requeue_after_ms: None,
        }
    }
    pub fn degraded(message: impl Into<String>) -> Self {
        Outcome {
            health: Health::Degraded,
            message: message.into(),
            requeue_after_ms: None,
        }
    }
    /// Ask the host to run this plugin again after `after` (in whole
    /// milliseconds).
    pub fn requeue_after(mut self, after: std::time::Duration) -> Self {
        self.requeue_after_ms = Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

impl PluginInfo {
    pub fn new(name: &str, version: &str, summary: &str) -> Self {
        PluginInfo {
            name: name.into(),
            version: version.into(),
            summary: summary.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn config_errors_name_the_plugin_table_and_field() {
        let ctx = Context::new("demo", r#"{"nmae": "x"}"#);
        let err = ctx.config::<Cfg>().unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(err.message().contains("[plugins.demo.config]"), "{err}");
        assert!(err.message().contains("nmae"), "{err}");
    }
}
