//! The rules [`super::FakeKube::grant`] takes: values, or text as written in the host config.

use serde_json::Value;
use tend_rules::kube::KubeRule;

/// Rules for [`FakeKube::grant`]: a [`KubeRule`], a `Vec` or slice of them,
/// or text, one rule or a list, written as in the host config (TOML inline
/// tables: `{ resource = "nodes", verbs = ["get", "patch"], names = ["$NODE"] }`)
/// or as JSON.
pub trait IntoKubeRules {
    fn into_kube_rules(self) -> Vec<KubeRule>;
}

impl IntoKubeRules for KubeRule {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        vec![self]
    }
}

impl IntoKubeRules for Vec<KubeRule> {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        self
    }
}

impl IntoKubeRules for &[KubeRule] {
    fn into_kube_rules(self) -> Vec<KubeRule> {
        self.to_vec()
    }
}

impl IntoKubeRules for &str {
    /// Panics on a rule the host would reject: a test setup error.
    fn into_kube_rules(self) -> Vec<KubeRule> {
        parse_rules(self).unwrap_or_else(|e| panic!("FakeKube::grant: {e} in {self}"))
    }
}

/// One rule or a list, as JSON or as the value of `kube = ...` in the host
/// config (parsed by the `toml` crate, as the host parses its config).
pub(super) fn parse_rules(text: &str) -> std::result::Result<Vec<KubeRule>, String> {
    #[derive(serde::Deserialize)]
    struct Grants<T> {
        kube: T,
    }
    // TOML wants a value on the line of its key: start at the value, after
    // any leading comments.
    let mut value = text.trim_start();
    while let Some(comment) = value.strip_prefix('#') {
        value = comment
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .trim_start();
    }
    let many = value.starts_with('[');
    if serde_json::from_str::<Value>(text).is_ok() {
        return match many {
            true => serde_json::from_str(text),
            false => serde_json::from_str(text).map(|rule| vec![rule]),
        }
        .map_err(|e| e.to_string());
    }
    let document = format!("kube = {value}");
    match many {
        true => toml::from_str::<Grants<Vec<KubeRule>>>(&document).map(|g| g.kube),
        false => toml::from_str::<Grants<KubeRule>>(&document).map(|g| vec![g.kube]),
    }
    .map_err(|e| e.to_string())
}
