//! The operator's TOML config: parsed strictly (unknown keys are errors), every
//! value validated while it is parsed so that errors point at file:line:column,
//! then resolved into absolute paths and defaults.

pub mod diff;
mod limits;
mod listen;

pub use listen::Listen;

pub use crate::capabilities::Grants;
pub use crate::capabilities::limits::Limits;
use crate::units as values;
pub use crate::units::ByteSize;

use crate::capabilities::capability::Capability;
use crate::capabilities::gate::BudgetRule;
use crate::capabilities::registry::{
    CapabilityLimits, Settings, capability_list, mutating_operations,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// A config that parsed and validated; paths are absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub source: PathBuf,
    /// "sha256:<hex>" of the file's text: its part of the node's revision.
    pub digest: String,
    pub host: HostConfig,
    /// Every configured plugin, enabled or not, by name.
    pub plugins: BTreeMap<String, PluginConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    pub plugins_dir: PathBuf,
    pub state_dir: PathBuf,
    /// Compiled-artifact cache; `<state-dir>/cache` unless set.
    pub cache_dir: PathBuf,
    /// Builds made ahead of time (`tend plugins precompile`), loaded where the
    /// cache has none: an image's, for a first start that compiles nothing.
    pub precompiled_dir: Option<PathBuf>,
    pub node_name: String,
    pub dry_run: bool,
    /// Where `/metrics`, `/healthz`, `/readyz` and `/status` are served; off when None.
    pub listen: Option<Listen>,
    /// Compiled artifacts beyond this size are evicted (those no plugin uses, oldest first).
    pub cache_max_size: ByteSize,
    /// `[host.budgets.<name>]`: host-wide budgets for destructive operations.
    pub budgets: Vec<BudgetRule>,
    /// `[host.<capability>]`: how each capability's backend is reached.
    pub capabilities: Settings,
    /// `[host.leader-election]`: the Lease whose holder runs cluster-scope plugins.
    pub leader_election: Option<LeaderElection>,
    /// `[host.oci]`: how plugins named by `oci://` references are pulled.
    pub oci: crate::oci::Settings,
    /// `[host.fleet]`: disruption budgets shared by every node.
    pub fleet: Option<crate::fleet::settings::FleetSettings>,
}

/// Where a plugin runs: on every node, or only on the holder of the cluster's Lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    #[default]
    Node,
    Cluster,
}

/// `[host.leader-election]`, as client-go's leader election takes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LeaderElection {
    pub namespace: String,
    pub name: String,
    /// How long a Lease holds without renewal before another host may take it.
    #[serde(default = "default_lease_duration", with = "values::duration")]
    pub lease_duration: Duration,
    /// A holder that has not renewed for this long stops its cluster-scope
    /// plugins: shorter than lease-duration, so two holders never act at once.
    #[serde(default = "default_renew_deadline", with = "values::duration")]
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    #[serde(default = "default_retry_period", with = "values::duration")]
    pub retry_period: Duration,
}

fn default_lease_duration() -> Duration {
    Duration::from_secs(15)
}
fn default_renew_deadline() -> Duration {
    Duration::from_secs(10)
}
fn default_retry_period() -> Duration {
    Duration::from_secs(2)
}

#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub name: String,
    pub enabled: bool,
    /// The component file; `<plugins-dir>/<name>.wasm` unless set. For a
    /// plugin from a registry, its `oci://` reference (what changes when the
    /// config names another digest), and `oci` says where to pull it from.
    pub file: PathBuf,
    /// `file = "oci://…"`: the registry source (and the key its signature needs).
    pub oci: Option<crate::oci::Source>,
    pub interval: Option<Duration>,
    /// Paths (inside the files grants) whose changes trigger a reconcile.
    pub watch: Vec<PathBuf>,
    pub grants: Grants,
    /// `[plugins.<name>.limits]`: the plugin's own ...
    pub limits: Limits,
    /// ... and each capability's (`kube-qps`), handed to its adapter.
    pub capability_limits: CapabilityLimits,
    pub scope: Scope,
    /// `[plugins.<name>.config]` as JSON text, handed to the plugin.
    pub config_json: String,
}

/// A config error that says where and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    host: RawHost,
    #[serde(default)]
    plugins: BTreeMap<Spanned<String>, RawPlugin>,
}

/// `[host]`: its own keys, `budgets`, and one settings table per capability
/// (generated from the registration list, so adding a capability adds its key).
macro_rules! raw_host {
    ($($name:ident: $cap:ty,)*) => {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        struct RawHost {
            plugins_dir: PathBuf,
            state_dir: PathBuf,
            cache_dir: Option<PathBuf>,
            precompiled_dir: Option<PathBuf>,
            node_name: Option<String>,
            #[serde(default)]
            dry_run: bool,
            listen: Option<Listen>,
            cache_max_size: Option<ByteSize>,
            #[serde(default)]
            budgets: BTreeMap<Spanned<String>, RawBudget>,
            leader_election: Option<Spanned<LeaderElection>>,
            #[serde(default)]
            oci: crate::oci::Settings,
            fleet: Option<Spanned<crate::fleet::settings::RawFleet>>,
            $( #[serde(default)] $name: <$cap as Capability>::Settings, )*
        }

        impl RawHost {
            fn capability_settings(&self) -> Settings {
                Settings { $( $name: self.$name.clone(), )* }
            }
        }
    };
}
capability_list!(raw_host);

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBudget {
    operations: Vec<Spanned<String>>,
    max: Spanned<u32>,
    #[serde(with = "values::duration")]
    per: Duration,
    #[serde(default, with = "values::duration_or_zero")]
    min_interval_per_target: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    #[serde(default, with = "values::optional_duration")]
    interval: Option<Duration>,
    file: Option<Spanned<PathBuf>>,
    verify: Option<Spanned<crate::oci::Verify>>,
    #[serde(default)]
    watch: Vec<Spanned<PathBuf>>,
    #[serde(default)]
    grants: Grants,
    #[serde(default)]
    limits: limits::PluginLimits,
    scope: Option<Spanned<Scope>>,
    #[serde(default)]
    config: toml::Table,
}

fn enabled_by_default() -> bool {
    true
}

/// The compile cache's bound when `cache-max-size` is not set (and the bound of
/// the one-off commands' own cache).
pub const DEFAULT_CACHE_MAX_SIZE: ByteSize = ByteSize(1 << 30);

impl Config {
    /// Read, parse and validate the config at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = crate::untrusted::read_to_string(path, crate::untrusted::MAX_TEXT_BYTES)
            .map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        Self::parse(path, &text)
    }

    /// Parse `text` as if read from `path` (relative paths resolve against its folder).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message,
            }
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim().to_string()))?;
        let base = absolute_parent(path);
        let host = host_config(raw.host, &base, &at)?;
        let plugins = plugin_configs(raw.plugins, &host, &base, &at)?;
        Ok(Config {
            source: path.to_path_buf(),
            digest: crate::digest::sha256_digest(text.as_bytes()),
            host,
            plugins,
        })
    }

    pub fn enabled_plugins(&self) -> impl Iterator<Item = &PluginConfig> {
        self.plugins.values().filter(|p| p.enabled)
    }
}

/// A config error at a span of the text: file, line and column.
type At<'a> = dyn Fn(Option<Range<usize>>, String) -> ConfigError + 'a;

/// `[host]`: paths against the config's folder, budgets, each capability's
/// settings and the leader election.
fn host_config(raw: RawHost, base: &Path, at: &At) -> Result<HostConfig, ConfigError> {
    let budgets = budget_rules(&raw.budgets, at)?;
    if let Some(election) = &raw.leader_election {
        check_election(election, at)?;
    }
    let mut capabilities = raw.capability_settings();
    // The election Lease is Tend's own: the kube adapter refuses plugin writes to it.
    capabilities.kube.own_lease =
        raw.leader_election
            .as_ref()
            .map(|e| crate::capabilities::kube::OwnLease {
                namespace: e.get_ref().namespace.clone(),
                name: e.get_ref().name.clone(),
            });
    let fleet = match &raw.fleet {
        Some(fleet) => Some(
            crate::fleet::settings::validate(fleet, &mutating_operations())
                .map_err(|(span, message)| at(span, format!("[host.fleet]: {message}")))?,
        ),
        None => None,
    };
    // The leader judges a rollout: without an election, nothing would.
    if let Some(rollout) = raw
        .fleet
        .as_ref()
        .and_then(|f| f.get_ref().rollout.as_ref())
        && raw.leader_election.is_none()
    {
        return Err(at(
            Some(rollout.span()),
            "[host.fleet.rollout] is judged by the cluster's leader: add [host.leader-election] with namespace and name".into(),
        ));
    }
    // The node's name becomes a Lease's name and a URL path part.
    if let (Some(fleet), Some(name)) = (&raw.fleet, &raw.node_name)
        && let Err(e) = tend_rules::ident::check("node-name", name, &tend_rules::ident::KUBE_NAME)
    {
        return Err(at(
            Some(fleet.span()),
            format!("[host.fleet] needs a valid node-name: {e}"),
        ));
    }
    // The fleet's Leases are Tend's own too.
    capabilities.kube.fleet_namespace = fleet.as_ref().map(|f| f.namespace.clone());
    // The Node's conditions are written with the kube client and its bounds.
    capabilities.conditions.kube = capabilities.kube.clone();
    Ok(HostConfig {
        plugins_dir: base.join(&raw.plugins_dir),
        cache_dir: base.join(raw.cache_dir.unwrap_or_else(|| raw.state_dir.join("cache"))),
        precompiled_dir: raw.precompiled_dir.map(|dir| base.join(dir)),
        state_dir: base.join(&raw.state_dir),
        node_name: node_name(raw.node_name, std::env::var("NODE_NAME").ok(), hostname),
        dry_run: raw.dry_run,
        listen: raw.listen,
        cache_max_size: raw.cache_max_size.unwrap_or(DEFAULT_CACHE_MAX_SIZE),
        budgets,
        capabilities,
        leader_election: raw.leader_election.map(Spanned::into_inner),
        oci: crate::oci::Settings {
            docker_config: raw.oci.docker_config.map(|f| base.join(f)),
            ..raw.oci
        },
        fleet,
    })
}

/// A holder must give up its Lease before the Lease can expire.
fn check_election(election: &Spanned<LeaderElection>, at: &At) -> Result<(), ConfigError> {
    let e = election.get_ref();
    if e.renew_deadline >= e.lease_duration || e.retry_period >= e.renew_deadline {
        return Err(at(
            Some(election.span()),
            "expected retry-period < renew-deadline < lease-duration (a holder must give up before its Lease can expire)".into(),
        ));
    }
    Ok(())
}

/// Every `[plugins.<name>]`, each checked alone and against the others.
fn plugin_configs(
    raw: BTreeMap<Spanned<String>, RawPlugin>,
    host: &HostConfig,
    base: &Path,
    at: &At,
) -> Result<BTreeMap<String, PluginConfig>, ConfigError> {
    let mut plugins = BTreeMap::new();
    let mut keys = VerifyKeys::new();
    let mut owners = vec![];
    for (name, plugin) in raw {
        let span = name.span();
        let name = plugin_name(name, at)?;
        owners.push((name.clone(), span, plugin.grants.conditions.clone()));
        check_watch(&plugin, at)?;
        check_scope(&plugin, host, at)?;
        let (file, oci) = plugin_source(&name, &plugin, host, base, at)?;
        if let Some(source) = &oci {
            one_key_per_component(&mut keys, &name, &file, source, &plugin, at)?;
        }
        plugins.insert(name.clone(), plugin_config(name, plugin, file, oci));
    }
    one_owner_per_condition(&owners, at)?;
    Ok(plugins)
}

/// No two plugins are granted one condition type: every condition Tend
/// writes has one owner (disabled plugins count: enabling one must not
/// take over another's condition).
fn one_owner_per_condition(
    owners: &[(
        String,
        Range<usize>,
        crate::capabilities::conditions::ConditionsGrant,
    )],
    at: &At,
) -> Result<(), ConfigError> {
    for (later, (name, span, _)) in owners.iter().enumerate() {
        tend_rules::conditions::owners(
            owners[..=later]
                .iter()
                .map(|(n, _, grant)| (n.as_str(), grant)),
        )
        .map_err(|message| at(Some(span.clone()), format!("plugin {name}: {message}")))?;
    }
    Ok(())
}

/// The name, if a plugin may have it (it becomes a path and a state namespace).
fn plugin_name(name: Spanned<String>, at: &At) -> Result<String, ConfigError> {
    if !is_valid_plugin_name(name.get_ref()) {
        return Err(at(
            Some(name.span()),
            format!(
                "invalid plugin name {:?}: expected lowercase letters, digits and '-'",
                name.get_ref()
            ),
        ));
    }
    Ok(name.into_inner())
}

/// A watched path must lie inside a files grant: a plugin is woken only by
/// what it may read.
fn check_watch(plugin: &RawPlugin, at: &At) -> Result<(), ConfigError> {
    for watched in &plugin.watch {
        let granted = plugin
            .grants
            .files
            .iter()
            .any(|g| watched.get_ref().starts_with(&g.path));
        if !granted {
            return Err(at(
                Some(watched.span()),
                format!(
                    "watch path {} is outside every files grant: add a files grant that covers it",
                    watched.get_ref().display()
                ),
            ));
        }
    }
    Ok(())
}

/// A cluster-scope plugin runs only on the holder of a Lease, so one must be configured.
fn check_scope(plugin: &RawPlugin, host: &HostConfig, at: &At) -> Result<(), ConfigError> {
    if let Some(scope) = &plugin.scope
        && *scope.get_ref() == Scope::Cluster
        && host.leader_election.is_none()
    {
        return Err(at(
            Some(scope.span()),
            "scope = \"cluster\" runs the plugin only on the holder of a Lease: add [host.leader-election] with namespace and name".into(),
        ));
    }
    if let Some(scope) = &plugin.scope
        && *scope.get_ref() == Scope::Cluster
        && host.fleet.as_ref().is_some_and(|f| f.rollout.is_some())
    {
        return Err(at(
            Some(scope.span()),
            "scope = \"cluster\" with [host.fleet.rollout]: every node's tend takes part in that election to judge rollouts, so a cluster plugin would run under the node's ServiceAccount: run cluster-scope plugins in a tend of their own (a Deployment, without [host.fleet.rollout])".into(),
        ));
    }
    Ok(())
}

/// Each pulled component's first plugin and the verify key it asked for.
type VerifyKeys = BTreeMap<PathBuf, (String, Option<PathBuf>)>;

/// A reference is pulled once for every plugin naming it (with the first
/// one's key), so all of them must ask for the same key.
fn one_key_per_component(
    keys: &mut VerifyKeys,
    name: &str,
    file: &Path,
    source: &crate::oci::Source,
    plugin: &RawPlugin,
    at: &At,
) -> Result<(), ConfigError> {
    let (first, key) = keys
        .entry(file.to_path_buf())
        .or_insert_with(|| (name.to_string(), source.key.clone()));
    if *key != source.key {
        let span = plugin.verify.as_ref().map(Spanned::span);
        return Err(at(
            span.or_else(|| plugin.file.as_ref().map(Spanned::span)),
            format!(
                "plugin {name} names {} like plugin {first} but with another verify: the component is pulled once for both, so give them the same verify key (or neither one)",
                file.display()
            ),
        ));
    }
    Ok(())
}

/// The checked plugin as the host runs it.
fn plugin_config(
    name: String,
    plugin: RawPlugin,
    file: PathBuf,
    oci: Option<crate::oci::Source>,
) -> PluginConfig {
    let config_json =
        serde_json::to_string(&plugin.config).expect("a TOML table always converts to JSON");
    PluginConfig {
        name,
        enabled: plugin.enabled,
        file,
        oci,
        interval: plugin.interval,
        watch: plugin.watch.into_iter().map(Spanned::into_inner).collect(),
        grants: plugin.grants,
        limits: plugin.limits.own,
        capability_limits: plugin.limits.capabilities,
        scope: plugin.scope.map(Spanned::into_inner).unwrap_or_default(),
        config_json,
    }
}

/// The component file, or the registry source of `file = "oci://…"` (with its
/// `verify` key); `verify` without a registry source is an error.
fn plugin_source(
    name: &str,
    plugin: &RawPlugin,
    host: &HostConfig,
    base: &Path,
    at: &At,
) -> Result<(PathBuf, Option<crate::oci::Source>), ConfigError> {
    let reference = plugin
        .file
        .as_ref()
        .filter(|f| f.get_ref().to_string_lossy().starts_with("oci://"));
    let Some(reference) = reference else {
        if let Some(verify) = &plugin.verify {
            return Err(at(
                Some(verify.span()),
                "verify checks the cosign signature of a plugin from a registry: set file = \"oci://…\" or remove verify".into(),
            ));
        }
        let file = match &plugin.file {
            Some(file) => base.join(file.get_ref()),
            None => host.plugins_dir.join(format!("{name}.wasm")),
        };
        return Ok((file, None));
    };
    let parsed = crate::oci::Reference::parse(&reference.get_ref().to_string_lossy())
        .map_err(|e| at(Some(reference.span()), e))?;
    let source = crate::oci::Source {
        key: plugin.verify.as_ref().map(|v| base.join(&v.get_ref().key)),
        reference: parsed,
    };
    Ok((PathBuf::from(source.reference.to_string()), Some(source)))
}

/// Validate `[host.budgets]`: names like plugin names, operations that exist
/// and mutate, a max of at least one.
fn budget_rules(
    raw: &BTreeMap<Spanned<String>, RawBudget>,
    at: &At,
) -> Result<Vec<BudgetRule>, ConfigError> {
    let known = mutating_operations();
    let mut rules = Vec::new();
    for (name, budget) in raw {
        if !is_valid_plugin_name(name.get_ref()) {
            return Err(at(
                Some(name.span()),
                format!(
                    "invalid budget name {:?}: expected lowercase letters, digits and '-'",
                    name.get_ref()
                ),
            ));
        }
        if budget.operations.is_empty() {
            return Err(at(
                Some(name.span()),
                format!(
                    "budget {:?} names no operations: expected for example operations = [\"files.remove\"]",
                    name.get_ref()
                ),
            ));
        }
        for operation in &budget.operations {
            if !known.contains(operation.get_ref()) {
                return Err(at(
                    Some(operation.span()),
                    format!(
                        "unknown operation {:?}: a budget can name {}",
                        operation.get_ref(),
                        known.join(", ")
                    ),
                ));
            }
        }
        if *budget.max.get_ref() == 0 {
            return Err(at(
                Some(budget.max.span()),
                "max must be at least 1 (to forbid an operation, do not grant it)".to_string(),
            ));
        }
        rules.push(BudgetRule {
            name: name.get_ref().clone(),
            operations: budget
                .operations
                .iter()
                .map(|o| o.get_ref().clone())
                .collect(),
            max: *budget.max.get_ref(),
            per: budget.per,
            min_interval_per_target: budget.min_interval_per_target,
        });
    }
    Ok(rules)
}

pub(crate) fn is_valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

/// The directory relative paths of the config at `path` resolve against,
/// made absolute. A bare file name (`-c tend.toml`, as the starter's README
/// says) has the empty parent "", which `absolute` refuses: it is ".".
fn absolute_parent(path: &Path) -> PathBuf {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf())
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `[host] node-name`, else the environment's `NODE_NAME` (in a pod, from the
/// downward API: `spec.nodeName`, right even when the kubelet runs with
/// `--hostname-override`), else the hostname.
fn node_name(
    configured: Option<String>,
    env: Option<String>,
    hostname: impl FnOnce() -> String,
) -> String {
    configured
        .or(env.filter(|name| !name.trim().is_empty()))
        .unwrap_or_else(hostname)
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests;
