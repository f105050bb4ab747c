//! `[plugins.<name>.limits]` as written: the plugin's own limits and each
//! capability's, in one table. A key named `<capability>-<key>` ("kube-qps")
//! belongs to that capability's `Capability::Limits`, any other to the
//! plugin's own [`Limits`]. Each value is read by its owner's type as it is
//! met, so an error points at its line and lists what its owner expects.

use crate::capabilities::limits::Limits;
use crate::capabilities::registry::{CapabilityLimits, NAMES};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, Visitor};
use std::collections::BTreeMap;

/// One plugin's limits: its own and each capability's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginLimits {
    pub own: Limits,
    pub capabilities: CapabilityLimits,
}

impl<'de> Deserialize<'de> for PluginLimits {
    fn deserialize<D: Deserializer<'de>>(table: D) -> Result<Self, D::Error> {
        table.deserialize_map(LimitsTable)
    }
}

struct LimitsTable;

impl<'de> Visitor<'de> for LimitsTable {
    type Value = PluginLimits;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a table of limits")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PluginLimits, A::Error> {
        let mut tables: BTreeMap<&'static str, toml::Table> = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let owner = owner(&key);
            let value = map.next_value_seed(OneLimit { owner, key: &key })?;
            tables.entry(owner).or_default().insert(key, value);
        }
        assemble(tables).map_err(A::Error::custom)
    }
}

/// The capability whose limit `key` is ("kube-qps": "kube"), or "" for the
/// plugin's own.
fn owner(key: &str) -> &'static str {
    NAMES
        .iter()
        .find(|name| {
            key.strip_prefix(**name)
                .is_some_and(|rest| rest.starts_with('-'))
        })
        .copied()
        .unwrap_or("")
}

/// One value, read by its owner's type on the spot.
struct OneLimit<'a> {
    owner: &'static str,
    key: &'a str,
}

impl<'de> DeserializeSeed<'de> for OneLimit<'_> {
    type Value = toml::Value;

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<toml::Value, D::Error> {
        let value = toml::Value::deserialize(value)?;
        let one = toml::Table::from_iter([(self.key.to_string(), value.clone())]);
        assemble(BTreeMap::from([(self.owner, one)])).map_err(D::Error::custom)?;
        Ok(value)
    }
}

/// The limits from each owner's keys, the rest at their defaults.
fn assemble(tables: BTreeMap<&'static str, toml::Table>) -> Result<PluginLimits, String> {
    let mut limits = PluginLimits::default();
    for (owner, table) in tables {
        if owner.is_empty() {
            limits.own = toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| own_error(e.message().trim()))?;
        } else {
            limits
                .capabilities
                .read(owner, table)
                .map_err(|e| e.message().trim().to_string())?;
        }
    }
    Ok(limits)
}

/// An error of the plugin's own limits; an unknown key may have been meant
/// for a capability.
fn own_error(message: &str) -> String {
    if message.starts_with("unknown field") {
        format!("{message}, or a capability's own, named after it (`kube-qps`, `log-lines`)")
    } else {
        message.to_string()
    }
}
