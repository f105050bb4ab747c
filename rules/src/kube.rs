//! What a plugin's Kubernetes grant allows: rules like RBAC's, pure, so every
//! decision is tested without an API server.
//!
//! `kube = [{ resource = "nodes", verbs = ["get", "list", "patch"], names =
//! ["$NODE"] }]`: a call needs one rule covering its API group, resource,
//! verb, namespace and name. `namespaces` absent means every namespace (and
//! cluster-scoped resources); `names` absent means every name; `$NODE` in
//! `names` is the host's node name.
//!
//! The parts of the call that become URL path parts are checked first
//! ([`check_key`]), so a name can never address a subresource, another
//! namespace or a query parameter. Then:
//!
//! - **Selectors are part of the grant.** A rule's `label-selector` and
//!   `field-selector` are ANDed into every list it allows ([`list_scope`]),
//!   and an object read or mutated by name must match them
//!   ([`check_object`]). A plugin's own selector is ANDed, never widens.
//! - **A list is served under one rule**: the first rule, in the order
//!   written, that allows it. Its names cut the result (one name is also
//!   ANDed as `metadata.name=<name>`), its selectors are ANDed. Rules are
//!   never unioned for a list: two rules with different selectors would need
//!   two requests, and a union sent as one request would widen both.
//! - **`fields` narrows `patch`** to field paths ([`patch_paths`]).
//! - **Tend's own election Lease is never written** ([`check_own_lease`]),
//!   whatever the rules say.

use crate::Refusal;
use crate::ident::{
    self, KUBE_GROUP, KUBE_KIND, KUBE_NAME, KUBE_NAMESPACE, KUBE_PLURAL, KUBE_VERSION,
};
use serde::{Deserialize, Deserializer, de::Error as _};
use serde_json::Value;

/// A Kubernetes API verb, as RBAC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Patch,
    Delete,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    fn mutates(self) -> bool {
        matches!(self, Verb::Create | Verb::Patch | Verb::Delete)
    }
}

/// The placeholder for the host's own node name in `names` and field selectors.
pub const NODE: &str = "$NODE";

/// The field keys a rule's `field-selector` may name: those every object a
/// by-name call reads can be checked against without asking the API server.
pub const RULE_FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "spec.nodeName"];

/// One rule of `[plugins.<name>.grants] kube`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct KubeRule {
    /// The API group: "" (the default) for the core group, "apps", "coordination.k8s.io".
    #[serde(default)]
    pub group: String,
    /// The resource, plural and lower case as RBAC writes it: "nodes", "pods".
    #[serde(deserialize_with = "resource_name")]
    pub resource: String,
    pub verbs: Vec<Verb>,
    /// Absent: every namespace, and cluster-scoped objects.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Absent: every name. `$NODE` is the host's node name.
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// Only objects with these labels: ANDed into lists, watches and cache
    /// keys; objects read or mutated by name must match it.
    #[serde(default, deserialize_with = "rule_labels")]
    pub label_selector: Option<String>,
    /// Likewise, on `metadata.name`, `metadata.namespace` or `spec.nodeName`;
    /// `$NODE` is the host's node name, so `"spec.nodeName=$NODE"` is the
    /// Pods of this node only.
    #[serde(default, deserialize_with = "rule_fields")]
    pub field_selector: Option<String>,
    /// Narrows `patch` to these field paths (dotted, for example
    /// "metadata.labels"): every path a patch touches must lie under one.
    /// Absent: the whole object.
    #[serde(default, deserialize_with = "field_paths")]
    pub fields: Option<Vec<String>>,
}

fn resource_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    // "nodes", or a subresource rule as RBAC writes it: "nodes/status".
    let ok = text.split('/').count() <= 2
        && text
            .split('/')
            .all(|part| ident::check("resource", part, &KUBE_PLURAL).is_ok());
    if !ok {
        return Err(D::Error::custom(format!(
            "invalid resource {text:?}: expected a plural lower-case resource as RBAC writes it, for example \"nodes\" or \"pods\""
        )));
    }
    Ok(text)
}

fn rule_labels<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    LabelSelector::parse(&text).map_err(D::Error::custom)?;
    Ok(Some(text))
}

fn rule_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    let selector = FieldSelector::parse(&text).map_err(D::Error::custom)?;
    if let Some(term) = selector
        .0
        .iter()
        .find(|t| !RULE_FIELDS.contains(&t.path.as_str()))
    {
        return Err(D::Error::custom(format!(
            "field-selector {text:?}: a grant can select on {} only (the host checks objects read by name against it), not {:?}",
            RULE_FIELDS.join(", "),
            term.path
        )));
    }
    Ok(Some(text))
}

fn field_paths<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let paths = Vec::<String>::deserialize(d)?;
    if let Some(path) = paths.iter().find(|p| !field_path_shaped(p)) {
        return Err(D::Error::custom(format!(
            "fields: invalid field path {path:?}: expected dotted field names, for example \"metadata.labels\" or \"status.conditions\", and a key with a dot or a slash in brackets, for example \"metadata.annotations[tend.dev/replace-requested]\""
        )));
    }
    Ok(Some(paths))
}

/// A path `fields` may hold: well spelled, and a label's or annotation's key
/// one step, since their values are strings: `metadata.labels.example.com`
/// (a key with a dot written after one) would name nothing a patch reaches.
fn field_path_shaped(path: &str) -> bool {
    field_steps(path).is_some_and(|steps| {
        // Where `metadata.labels` or `metadata.annotations` is (an object's,
        // or a template's within it), at most a key follows.
        steps
            .windows(2)
            .position(|w| w[0] == "metadata" && matches!(w[1], "labels" | "annotations"))
            .is_none_or(|at| steps.len() <= at + 3)
    })
}

/// A grant's field path as the steps a patch's paths are compared with:
/// names joined by dots, and a map key holding a dot or a slash (an
/// annotation's, a label's) in brackets, so one key can be granted rather
/// than its whole map: `metadata.annotations[tend.dev/replace-requested]`.
/// One spelling each ([`grantable_path`] writes it). None when malformed.
fn field_steps(path: &str) -> Option<Vec<&str>> {
    let mut steps = Vec::new();
    let mut rest = path;
    loop {
        let (step, after) = match rest.strip_prefix('[') {
            Some(inner) => {
                let end = inner.find(']')?;
                let key = &inner[..end];
                (step_kind(key)? == Step::Key).then_some(())?;
                (key, &inner[end + 1..])
            }
            None => {
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                let name = &rest[..end];
                (step_kind(name)? == Step::Name).then_some(())?;
                (name, &rest[end..])
            }
        };
        steps.push(step);
        if after.is_empty() {
            return Some(steps);
        }
        // After a step: `.name` or `[key]`.
        rest = match after.strip_prefix('.') {
            Some(next) if !next.starts_with('[') => next,
            Some(_) => return None,
            None if after.starts_with('[') => after,
            None => return None,
        };
    }
}

/// How a grant's field path writes a step.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Letters, digits, `-` and `_`: after a dot.
    Name,
    /// Also `.` or `/`, as label and annotation keys have: in brackets.
    Key,
}

/// None for a step no grant can name (empty, or a character no
/// Kubernetes field name or label or annotation key has).
fn step_kind(step: &str) -> Option<Step> {
    let within = |extra: &str| {
        step.chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
    };
    match () {
        _ if step.is_empty() => None,
        _ if within("-_") => Some(Step::Name),
        _ if within("-_./") => Some(Step::Key),
        _ => None,
    }
}

/// A patch's `path` as a grant's `fields` write it (at most
/// [`GRANTABLE_PATH`] bytes), [`field_steps`] reading it back as exactly
/// those steps: what a refusal tells the operator to add. None when no
/// field path can name it (a step with a character no field name, label or
/// annotation key has): then no `fields` allow it, and a refusal suggests
/// no nearer path, which would grant the whole map around it.
fn grantable_path(path: &[String]) -> Option<String> {
    let mut text = String::new();
    for step in path {
        // A plugin's key may be as long as its patch: no copy past the bound.
        if text.len() + step.len() > GRANTABLE_PATH {
            return None;
        }
        match step_kind(step)? {
            Step::Name if text.is_empty() => text += step,
            Step::Name => text += &format!(".{step}"),
            Step::Key => text += &format!("[{step}]"),
        }
    }
    (text.len() <= GRANTABLE_PATH).then_some(text)
}

/// `path` as a JSON pointer (RFC 6901: `~` as `~0`, `/` as `~1`): how a
/// refusal shows a path no grant can name, one text per path.
fn json_pointer(path: &[String]) -> String {
    path.iter()
        .map(|step| format!("/{}", step.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// The longest path a refusal suggests: an annotation's key is at most 317
/// bytes (a 253-byte prefix, `/`, a 63-byte name).
const GRANTABLE_PATH: usize = 512;

/// One call as the grant sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub verb: Verb,
    /// None for cluster-scoped objects, and for lists across all namespaces.
    pub namespace: Option<&'a str>,
    /// None for lists and creates without a name yet.
    pub name: Option<&'a str>,
}

impl KubeRule {
    fn names_for(&self, node: &str) -> Option<Vec<String>> {
        self.names.as_ref().map(|names| {
            names
                .iter()
                .map(|n| {
                    if n == NODE {
                        node.to_string()
                    } else {
                        n.clone()
                    }
                })
                .collect()
        })
    }

    fn covers(&self, node: &str, access: &Access) -> bool {
        let namespace_ok = match (&self.namespaces, access.namespace) {
            (None, _) => true,
            (Some(allowed), Some(ns)) => allowed.iter().any(|a| a == ns),
            // A list across all namespaces needs a rule for all of them.
            (Some(_), None) => false,
        };
        let name_ok = match (self.names_for(node), access.name) {
            (None, _) => true,
            (Some(allowed), Some(name)) => allowed.iter().any(|a| a == name),
            // Lists are cut to the allowed names afterwards.
            (Some(_), None) => access.verb == Verb::List || access.verb == Verb::Watch,
        };
        self.group == access.group
            && self.resource == access.resource
            && self.verbs.contains(&access.verb)
            && namespace_ok
            && name_ok
    }

    /// The rule's field selector with `$NODE` substituted.
    fn fields_for(&self, node: &str) -> Option<String> {
        self.field_selector.as_ref().map(|f| f.replace(NODE, node))
    }

    fn selects(&self) -> bool {
        self.label_selector.is_some() || self.field_selector.is_some()
    }

    /// The rule's selectors, parsed (None when one does not parse, which
    /// config validation rules out: such a rule then matches nothing).
    fn selectors(&self, node: &str) -> Option<Selectors> {
        Some(Selectors {
            labels: LabelSelector::parse(self.label_selector.as_deref().unwrap_or_default())
                .ok()?,
            fields: FieldSelector::parse(&self.fields_for(node).unwrap_or_default()).ok()?,
        })
    }

    fn matches(&self, node: &str, object: &Value) -> bool {
        self.selectors(node).is_some_and(|s| s.matches(object))
    }

    /// The path of `touched` outside the rule's `fields`, if any.
    fn outside_fields<'p>(&self, touched: &'p [Vec<String>]) -> Option<&'p Vec<String>> {
        let fields = self.fields.as_ref()?;
        touched.iter().find(|path| {
            !fields.iter().any(|f| {
                field_steps(f).is_some_and(|prefix| {
                    path.len() >= prefix.len() && path.iter().zip(&prefix).all(|(a, b)| a == b)
                })
            })
        })
    }

    /// The rule as the config writes it, for messages.
    fn written(&self) -> String {
        let mut text = String::from("{ ");
        if !self.group.is_empty() {
            text += &format!("group = {:?}, ", self.group);
        }
        text += &format!("resource = {:?}", self.resource);
        if let Some(l) = &self.label_selector {
            text += &format!(", label-selector = {l:?}");
        }
        if let Some(f) = &self.field_selector {
            text += &format!(", field-selector = {f:?}");
        }
        if let Some(f) = &self.fields {
            text += &format!(", fields = {f:?}");
        }
        text + " }"
    }
}

fn describe(access: &Access) -> String {
    let resource = if access.group.is_empty() {
        access.resource.to_string()
    } else {
        format!("{}.{}", access.resource, access.group)
    };
    let mut text = format!("{} {resource}", access.verb.name());
    if let Some(ns) = access.namespace {
        text += &format!(" in namespace {ns}");
    }
    if let Some(name) = access.name {
        text += &format!(" named {}", crate::shown(name));
    }
    text
}

/// The parts of a call a plugin names that go into the request's URL: each
/// of its shape, else `invalid`. Checked before the grant and before any
/// request (discovery included).
pub fn check_key(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), Refusal> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let ok = (group.is_empty() != api_version.contains('/'))
        && ident::check("", group, &KUBE_GROUP).is_ok()
        && ident::check("", version, &KUBE_VERSION).is_ok();
    if !ok {
        return Err(Refusal::Invalid(format!(
            "kube api-version {:?}: expected \"v1\" or \"<group>/<version>\" such as \"coordination.k8s.io/v1\" (the group a DNS-1123 subdomain, the version such as v1 or v1beta1)",
            crate::shown(api_version)
        )));
    }
    ident::check("kube kind", kind, &KUBE_KIND)?;
    if let Some(namespace) = namespace {
        ident::check("kube namespace", namespace, &KUBE_NAMESPACE)?;
    }
    if let Some(name) = name {
        ident::check("kube name", name, &KUBE_NAME)?;
    }
    Ok(())
}

/// May `plugin`, on node `node`, make `access`? (By group, resource, verb,
/// namespace and name; selectors and `fields` need the object or the patch:
/// [`check_object`].)
pub fn check(rules: &[KubeRule], plugin: &str, node: &str, access: &Access) -> Result<(), Refusal> {
    if rules.iter().any(|r| r.covers(node, access)) {
        return Ok(());
    }
    let group = if access.group.is_empty() {
        String::new()
    } else {
        format!("group = \"{}\", ", access.group)
    };
    let namespaces = access
        .namespace
        .map(|ns| format!(", namespaces = [\"{ns}\"]"))
        .unwrap_or_default();
    let names = access
        .name
        .map(|n| format!(", names = [\"{}\"]", crate::shown(n)))
        .unwrap_or_default();
    Err(Refusal::Denied(format!(
        "no kube grant allows {}: add {{ {group}resource = \"{}\", verbs = [\"{}\"]{namespaces}{names} }} to [plugins.{plugin}.grants] kube",
        describe(access),
        access.resource,
        access.verb.name()
    )))
}

/// `[host.leader-election]`'s Lease: Tend's own, never written by a plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnLease {
    pub namespace: String,
    pub name: String,
}

/// Why a write of Tend's own election Lease is refused.
pub const OWN_LEASE: &str = "it is Tend's own leader-election Lease ([host.leader-election]), which no grant reaches; give the plugin a Lease of its own";

/// Refuse `access` when it writes `own` (create, patch, delete), whatever
/// the rules say: a plugin holding the election Lease would decide which
/// replica runs the cluster plugins. Reading it stays a matter of grants.
pub fn check_own_lease(own: Option<&OwnLease>, access: &Access) -> Result<(), Refusal> {
    let Some(own) = own else { return Ok(()) };
    let hit = access.verb.mutates()
        && access.group == "coordination.k8s.io"
        && access.resource == "leases"
        && access.namespace == Some(own.namespace.as_str())
        && access.name == Some(own.name.as_str());
    if hit {
        return Err(Refusal::Denied(format!(
            "{}: {OWN_LEASE}",
            describe(access)
        )));
    }
    Ok(())
}

/// Why a write of one of Tend's fleet Leases is refused.
pub const FLEET_LEASE: &str = "it is one of Tend's own fleet Leases ([host.fleet] namespace: the ledgers, the node Leases, the rollout), which no grant reaches; give the plugin a Lease whose name does not start with \"tend-\"";

/// Refuse `access` when it writes a Lease in the fleet's namespace whose
/// name starts with "tend-" (or names none), whatever the rules say: a
/// plugin writing a ledger could hand out disruption tickets, and one
/// renewing another node's Lease could keep a dead holder's ticket alive.
pub fn check_fleet_lease(namespace: Option<&str>, access: &Access) -> Result<(), Refusal> {
    let Some(namespace) = namespace else {
        return Ok(());
    };
    let hit = access.verb.mutates()
        && access.group == "coordination.k8s.io"
        && access.resource == "leases"
        && access.namespace.is_none_or(|n| n == namespace)
        && access.name.is_none_or(|n| n.starts_with("tend-"));
    if hit {
        return Err(Refusal::Denied(format!(
            "{}: {FLEET_LEASE}",
            describe(access)
        )));
    }
    Ok(())
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A label selector as the API server reads it: "app=web,tier!=db",
/// "env in (a,b)", "env notin (c)", "gpu", "!gpu".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// `prefix/name` (prefix a DNS subdomain) or `name`: at most 63 letters,
/// digits, '-', '_', '.', starting and ending with a letter or digit.
fn label_key(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    (!key.contains('/') || ident::check("", prefix, &KUBE_NAME).is_ok())
        && !name.is_empty()
        && label_value(name)
}

/// Empty, or as a label key's name part.
fn label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// `text` split at the commas outside parentheses.
fn top_level_terms(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

impl LabelSelector {
    /// Equality (`=`, `==`, `!=`) and set-based (`in`, `notin`, exists,
    /// `!`) requirements; the error says which part is not understood.
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = |part: &str| {
            format!(
                "label selector {:?}: cannot parse {:?}; expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key",
                crate::shown(text),
                crate::shown(part)
            )
        };
        let mut requirements = Vec::new();
        for part in top_level_terms(text).into_iter().map(str::trim) {
            if part.is_empty() && text.trim().is_empty() {
                continue;
            }
            let set = |rest: &str| -> Option<Vec<String>> {
                let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
                Some(inner.split(',').map(|v| v.trim().to_string()).collect())
            };
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::Absent(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotIn(key.trim().to_string(), vec![value.trim().to_string()])
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                Requirement::In(key.trim().to_string(), vec![value.trim().to_string()])
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(
                    key.trim().to_string(),
                    set(rest).ok_or_else(|| invalid(part))?,
                )
            } else if let Some((key, rest)) = part.split_once(" in ") {
                Requirement::In(
                    key.trim().to_string(),
                    set(rest).ok_or_else(|| invalid(part))?,
                )
            } else {
                Requirement::Exists(part.to_string())
            };
            let (key, values) = match &requirement {
                Requirement::Exists(k) | Requirement::Absent(k) => (k, &[][..]),
                Requirement::In(k, v) | Requirement::NotIn(k, v) => (k, &v[..]),
            };
            if !label_key(key) || !values.iter().all(|v| label_value(v)) {
                return Err(invalid(part));
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels[key].as_str();
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::Absent(k) => label(k).is_none(),
            Requirement::In(k, values) => label(k).is_some_and(|v| values.iter().any(|a| a == v)),
            Requirement::NotIn(k, values) => label(k).is_none_or(|v| values.iter().all(|a| a != v)),
        })
    }
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    path: String,
    equal: bool,
    value: String,
}

/// A field selector: "spec.nodeName=node-1,metadata.namespace!=kube-system",
/// a dotted path of the object compared as text (absent: "").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldTerm>);

impl FieldSelector {
    /// `path=value`, `path==value`, `path!=value` terms joined by commas.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (p, true, v)
            } else {
                return Err(format!(
                    "field selector {:?}: {:?} is not field=value or field!=value",
                    crate::shown(text),
                    crate::shown(part)
                ));
            };
            let path = path.trim();
            if path
                .split('.')
                .any(|step| step.is_empty() || !step.chars().all(|c| c.is_ascii_alphanumeric()))
            {
                return Err(format!(
                    "field selector {:?}: {:?} is not a dotted field path such as spec.nodeName",
                    crate::shown(text),
                    crate::shown(path)
                ));
            }
            // The fields selectable (names, namespaces, node names) hold at
            // most 253 bytes and no control characters; anything else in a
            // value only reaches cache keys and the API server's errors.
            let value = value.trim();
            if value.len() > 253 || value.chars().any(char::is_control) {
                return Err(format!(
                    "field selector {:?}: the value of {:?} is longer than 253 bytes or holds a control character",
                    crate::shown(text),
                    crate::shown(path)
                ));
            }
            terms.push(FieldTerm {
                path: path.to_string(),
                equal,
                value: value.to_string(),
            });
        }
        Ok(FieldSelector(terms))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|term| {
            let field = term.path.split('.').fold(object, |v, step| &v[step]);
            let text = match field {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (text == term.value) == term.equal
        })
    }
}

/// A rule's selectors, parsed once for a whole list.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selectors {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Selectors {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

/// `a` and `b`, ANDed as selector text.
fn and(a: Option<String>, b: Option<&str>) -> Option<String> {
    match (a, b.filter(|b| !b.trim().is_empty())) {
        (Some(a), Some(b)) => Some(format!("{a},{b}")),
        (a, b) => a.or(b.map(str::to_string)),
    }
}

/// What one list may return, under the rule that allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListScope {
    /// The label selector to send: the rule's ANDed with the plugin's.
    pub label_selector: Option<String>,
    /// The field selector to send: the rule's (and `metadata.name=<name>`
    /// for a one-name rule) ANDed with the plugin's.
    pub field_selector: Option<String>,
    /// The rule's selectors (None: it has one that does not parse).
    selectors: Option<Selectors>,
    names: Option<Vec<String>>,
}

impl ListScope {
    /// Whether a listed object lies inside the grant: its name granted, the
    /// rule's selectors matching. Applied to every result, whatever the
    /// server (or a cache) did with the selectors sent.
    pub fn admits(&self, object: &Value) -> bool {
        let named = self.names.as_ref().is_none_or(|names| {
            object["metadata"]["name"]
                .as_str()
                .is_some_and(|n| names.iter().any(|a| a == n))
        });
        named && self.selectors.as_ref().is_some_and(|s| s.matches(object))
    }

    /// Whether [`ListScope::admits`] holds for every object (the rule names
    /// no objects and has no selectors): a list of 10,000 then skips reading
    /// each object, parsing a cached object's summary included.
    pub fn admits_everything(&self) -> bool {
        self.names.is_none()
            && self
                .selectors
                .as_ref()
                .is_some_and(|s| s.labels.0.is_empty() && s.fields.0.is_empty())
    }

    /// Whether the list sees every object bound to `node`: no names, no
    /// label selector, and a field selector of `spec.nodeName=<node>` terms
    /// only (a drain that could not see a pod would call the Node drained).
    pub fn sees_all_on_node(&self, node: &str) -> bool {
        let fields_ok = match &self.field_selector {
            None => true,
            Some(text) => FieldSelector::parse(text).is_ok_and(|selector| {
                selector
                    .0
                    .iter()
                    .all(|t| t.path == "spec.nodeName" && t.equal && t.value == node)
            }),
        };
        self.names.is_none() && self.label_selector.is_none() && fields_ok
    }
}

/// The scope of a list: refused (denied) when no rule allows it, or
/// (invalid) when a plugin selector does not parse; else the first rule
/// allowing it decides, see the module docs.
pub fn list_scope(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
    labels: Option<&str>,
    fields: Option<&str>,
) -> Result<ListScope, Refusal> {
    check(rules, plugin, node, access)?;
    if let Some(labels) = labels {
        LabelSelector::parse(labels).map_err(|e| Refusal::Invalid(format!("kube {e}")))?;
    }
    if let Some(fields) = fields {
        FieldSelector::parse(fields).map_err(|e| Refusal::Invalid(format!("kube {e}")))?;
    }
    let rule = rules
        .iter()
        .find(|r| r.covers(node, access))
        .expect("check found a covering rule");
    let names = rule.names_for(node);
    let by_name = match names.as_deref() {
        Some([name]) => Some(format!("metadata.name={name}")),
        _ => None,
    };
    Ok(ListScope {
        label_selector: and(rule.label_selector.clone(), labels),
        field_selector: and(and(rule.fields_for(node), by_name.as_deref()), fields),
        selectors: rule.selectors(node),
        names,
    })
}

/// Whether deciding `access` on one object needs the object itself: every
/// rule allowing it by name narrows by selectors. (When one rule allows it
/// without selectors, no read is spent.)
pub fn needs_object(rules: &[KubeRule], node: &str, access: &Access) -> bool {
    let mut covering = rules.iter().filter(|r| r.covers(node, access)).peekable();
    covering.peek().is_some() && covering.all(KubeRule::selects)
}

/// A created object's namespace: a `metadata.namespace` in the body must be
/// the call's (the call's namespace is what the grant was checked against),
/// and the call's is written into the body. `invalid` otherwise; the echoed
/// value is JSON (control characters escaped) and cut short.
pub fn body_namespace(object: &mut Value, namespace: Option<&str>) -> Result<(), Refusal> {
    match (&object["metadata"]["namespace"], namespace) {
        (Value::Null, _) => {}
        (Value::String(inside), Some(ns)) if inside == ns => {}
        (inside, _) => {
            return Err(Refusal::Invalid(format!(
                "kube create: metadata.namespace {} does not match the namespace of the call ({}); name the same namespace in both, or leave it out of the object",
                crate::shown(&inside.to_string()),
                namespace.unwrap_or("none: the kind is cluster-scoped")
            )));
        }
    }
    if let (Some(ns), Some(meta)) = (namespace, object["metadata"].as_object_mut()) {
        meta.insert("namespace".into(), ns.into());
    }
    Ok(())
}

/// The object-level decision on `access`: some rule allowing it matches
/// `object` (as stored, or a create's body) with its selectors and, for a
/// patch, covers every path the patch touches with its `fields`. `object`
/// may be None when [`needs_object`] says so; `patch` is the patch sent.
pub fn check_object(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
    object: Option<&Value>,
    patch: Option<(PatchShape, &Value)>,
) -> Result<(), Refusal> {
    let selected = |r: &KubeRule| !r.selects() || object.is_some_and(|o| r.matches(node, o));
    check_selected(rules, plugin, node, access, selected, patch)
}

/// A patch's `fields` checked before its object is read: every rule
/// allowing it by name counts, its selectors judged later on the object
/// ([`check_found`]). What a call checks before it changes anything (a
/// cordon, a drain's first step).
pub fn check_patch_fields(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
    patch: (PatchShape, &Value),
) -> Result<(), Refusal> {
    check_selected(rules, plugin, node, access, |_| true, Some(patch))
}

/// [`check_object`] with the rules whose selectors hold said by `selected`.
fn check_selected(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
    selected: impl Fn(&KubeRule) -> bool,
    patch: Option<(PatchShape, &Value)>,
) -> Result<(), Refusal> {
    check(rules, plugin, node, access)?;
    let covering: Vec<&KubeRule> = rules.iter().filter(|r| r.covers(node, access)).collect();
    let selected: Vec<&KubeRule> = covering.iter().copied().filter(|r| selected(r)).collect();
    if selected.is_empty() {
        let written: Vec<String> = covering.iter().map(|r| r.written()).collect();
        return Err(Refusal::Denied(format!(
            "{}: the object is outside the grant's selectors ({}); label the object to match, or widen the selectors in [plugins.{plugin}.grants] kube",
            describe(access),
            written.join(", ")
        )));
    }
    let Some((shape, body)) = patch else {
        return Ok(());
    };
    if selected.iter().any(|r| r.fields.is_none()) {
        return Ok(());
    }
    let touched = patch_paths(shape, body)?;
    let mut outside = None;
    for rule in &selected {
        match rule.outside_fields(&touched) {
            None => return Ok(()),
            Some(path) => outside = outside.or(Some((path, rule))),
        }
    }
    let (path, rule) = outside.expect("some rule was selected");
    let named = match path.is_empty() {
        true => None,
        false => Some(grantable_path(path)),
    };
    let (touched, add) = match named {
        None => (
            "the whole object".to_string(),
            "only a rule without fields allows it: widen the rule",
        ),
        Some(Some(written)) => (format!("{written:?}"), "add that path to the rule's fields"),
        Some(None) => (
            format!("{:?}", crate::shown(&json_pointer(path))),
            "no field path can name it (a key with a character no label or annotation key has), so no fields allow it",
        ),
    };
    Err(Refusal::Denied(format!(
        "{}: the patch touches {touched}, outside the fields of {}; {add} in [plugins.{plugin}.grants] kube",
        describe(access),
        rule.written()
    )))
}

/// A patch bound to the object its grant was checked on: `metadata.uid` in
/// a merge patch or an applied object, a leading `test` of `/metadata/uid`
/// in a JSON patch. The API server then changes only that object (422 when
/// one was recreated under the name since: the UID is immutable, or the test
/// fails), as an eviction carries its pod's UID. A body that cannot carry
/// the UID (not an object or list, `metadata` not an object) is `invalid`:
/// it would go unbound.
pub fn bind_to_uid(shape: PatchShape, body: &mut Value, uid: &str) -> Result<(), Refusal> {
    let unbound = |what: &str| {
        Refusal::Invalid(format!(
            "kube {} patch: {what}; the patch is bound to the object its grant was checked on (its metadata.uid)",
            shape.name()
        ))
    };
    match (shape, body) {
        (PatchShape::Json, Value::Array(operations)) => {
            operations.insert(
                0,
                serde_json::json!({"op": "test", "path": "/metadata/uid", "value": uid}),
            );
            Ok(())
        }
        (PatchShape::Merge | PatchShape::Apply, Value::Object(fields)) => {
            match fields
                .entry("metadata")
                .or_insert_with(|| Value::Object(Default::default()))
            {
                Value::Object(metadata) => {
                    metadata.insert("uid".into(), uid.into());
                    Ok(())
                }
                _ => Err(unbound("its metadata is not an object")),
            }
        }
        (PatchShape::Json, _) => Err(unbound("the body is not a list of operations")),
        _ => Err(unbound("the body is not an object")),
    }
}

/// [`check_object`] on an object named by the plugin and read fresh
/// (`found`: None when the API server has no such object), answered as the
/// plugin may learn it. When only rules with selectors allow the call, an
/// object outside them and one that does not exist get the same `not-found`,
/// naming the grant's scope: a call by name is no oracle for what exists
/// beyond the grant. When a rule without selectors allows it, an absent
/// object passes here and the caller answers the API server's own not-found.
/// (A create's body is the plugin's own text: [`check_object`] denies it.)
pub fn check_found(
    rules: &[KubeRule],
    plugin: &str,
    node: &str,
    access: &Access,
    found: Option<&Value>,
    patch: Option<(PatchShape, &Value)>,
) -> Result<(), crate::Error> {
    // No rule covering the call by name: no object is needed, and
    // check_object denies it, naming the grant to add.
    if needs_object(rules, node, access) {
        let covering = || rules.iter().filter(|r| r.covers(node, access));
        if !found.is_some_and(|o| covering().any(|r| r.matches(node, o))) {
            let written: Vec<String> = covering().map(|r| r.written()).collect();
            return Err(crate::Error::NotFound(format!(
                "{}: no such object within the grant's selectors ({}); one outside them is answered as absent: if it exists, label it to match, or widen the selectors in [plugins.{plugin}.grants] kube",
                describe(access),
                written.join(", ")
            )));
        }
    }
    Ok(check_object(rules, plugin, node, access, found, patch)?)
}

/// The one conversion of the WIT `patch-type` to a [`PatchShape`], expanded
/// beside each binding (the host's and the SDK's are different Rust types of
/// the same enum, and this crate depends on neither): `patch_shape_of!(wit)`,
/// with `wit` the binding's module of the interface in scope, defines
/// `fn patch_shape(kind: wit::PatchType) -> PatchShape`.
#[macro_export]
macro_rules! patch_shape_of {
    ($wit:ident) => {
        /// The WIT patch type as the rules read its body.
        pub(crate) fn patch_shape(kind: $wit::PatchType) -> $crate::kube::PatchShape {
            match kind {
                $wit::PatchType::Merge => $crate::kube::PatchShape::Merge,
                $wit::PatchType::Json => $crate::kube::PatchShape::Json,
                $wit::PatchType::Apply => $crate::kube::PatchShape::Apply,
            }
        }
    };
}

/// How a patch body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchShape {
    /// RFC 7386 JSON merge patch (strategic-merge directives such as
    /// `$patch` count as touching their parent).
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Server-side apply: the object as the manager wants it.
    Apply,
}

impl PatchShape {
    /// "merge", "json" or "apply": the WIT's name, as plans and fakes spell it.
    pub fn name(self) -> &'static str {
        match self {
            PatchShape::Merge => "merge",
            PatchShape::Json => "json",
            PatchShape::Apply => "apply",
        }
    }
}

/// Fields naming the object or preconditions, not changes.
fn exempt(shape: PatchShape, path: &[String]) -> bool {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match path[..] {
        ["metadata", "resourceVersion"] => true,
        ["apiVersion"] | ["kind"] | ["metadata", "name"] | ["metadata", "namespace"] => {
            shape == PatchShape::Apply
        }
        _ => false,
    }
}

/// Every leaf path of a merge patch or applied object under `at`.
fn leaves(value: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, value) in fields {
                if key.starts_with('$') {
                    // A directive ($patch, $retainKeys, $setElementOrder/...) acts on its parent.
                    out.push(at.clone());
                    continue;
                }
                at.push(key.clone());
                leaves(value, at, out);
                at.pop();
            }
        }
        // A scalar, an array (replaced whole), null (a deletion) or an
        // empty object (created or kept) touches its own path.
        _ => out.push(at.clone()),
    }
}

/// A JSON pointer's steps, `~1` and `~0` unescaped.
fn pointer(text: &str) -> Result<Vec<String>, Refusal> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let rest = text.strip_prefix('/').ok_or_else(|| {
        Refusal::Invalid(format!(
            "kube JSON patch path {:?}: expected a JSON pointer such as \"/metadata/labels/a\"",
            crate::shown(text)
        ))
    })?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// The field paths (as steps) a patch body touches: leaf paths of a merge
/// patch or applied object (not apiVersion, kind, metadata.name and
/// metadata.namespace of an apply), each operation's `path` and a move's or
/// copy's `from` of a JSON patch (`test` changes nothing). The root is the
/// empty path.
pub fn patch_paths(shape: PatchShape, body: &Value) -> Result<Vec<Vec<String>>, Refusal> {
    let mut out = Vec::new();
    match shape {
        // `{}` changes nothing (not even the root).
        PatchShape::Merge | PatchShape::Apply if body.as_object().is_some_and(|o| o.is_empty()) => {
        }
        PatchShape::Merge | PatchShape::Apply => leaves(body, &mut Vec::new(), &mut out),
        PatchShape::Json => {
            let invalid =
                || Refusal::Invalid("not a JSON patch: expected a list of operations".into());
            for op in body.as_array().ok_or_else(invalid)? {
                let kind = op["op"].as_str().ok_or_else(invalid)?;
                if kind == "test" {
                    continue;
                }
                out.push(pointer(op["path"].as_str().ok_or_else(invalid)?)?);
                if matches!(kind, "move" | "copy") {
                    out.push(pointer(op["from"].as_str().ok_or_else(invalid)?)?);
                }
            }
        }
    }
    out.retain(|path| !exempt(shape, path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(toml_like_json: &str) -> Vec<KubeRule> {
        serde_json::from_str(toml_like_json).unwrap()
    }

    fn access<'a>(
        resource: &'a str,
        verb: Verb,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> Access<'a> {
        Access {
            group: "",
            resource,
            verb,
            namespace,
            name,
        }
    }

    #[test]
    fn my_own_node_only() {
        let r = rules(
            r#"[{"resource": "nodes", "verbs": ["get", "list", "patch"], "names": ["$NODE"]}]"#,
        );
        assert!(
            check(
                &r,
                "p",
                "node-1",
                &access("nodes", Verb::Patch, None, Some("node-1"))
            )
            .is_ok()
        );
        let err = check(
            &r,
            "p",
            "node-1",
            &access("nodes", Verb::Patch, None, Some("node-2")),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "no kube grant allows patch nodes named node-2: add { resource = \"nodes\", verbs = [\"patch\"], names = [\"node-2\"] } to [plugins.p.grants] kube"
        );
        assert!(
            check(
                &r,
                "p",
                "node-1",
                &access("nodes", Verb::Delete, None, Some("node-1"))
            )
            .is_err()
        );
        assert!(check(&r, "p", "node-1", &access("nodes", Verb::List, None, None)).is_ok());
        let scope = list_scope(
            &r,
            "p",
            "node-1",
            &access("nodes", Verb::List, None, None),
            None,
            Some("metadata.name!=x"),
        )
        .unwrap();
        assert_eq!(
            scope.field_selector.as_deref(),
            Some("metadata.name=node-1,metadata.name!=x"),
            "a plugin's field selector is ANDed with the one name, never replaces it"
        );
        assert!(scope.admits(&json!({"metadata": {"name": "node-1"}})));
        assert!(!scope.admits(&json!({"metadata": {"name": "node-2"}})));
        assert!(!scope.admits_everything(), "a one-name rule");
    }

    #[test]
    fn a_rule_without_names_or_selectors_admits_everything_whatever_the_plugin_asks() {
        let r = rules(
            r#"[{"resource": "nodes", "verbs": ["list"]},
                {"resource": "pods", "verbs": ["list"], "field-selector": "spec.nodeName=$NODE"},
                {"resource": "configmaps", "verbs": ["list"], "label-selector": "tend=yes"}]"#,
        );
        let scope = |resource, label: Option<&str>| {
            list_scope(
                &r,
                "p",
                "n1",
                &access(resource, Verb::List, None, None),
                label,
                None,
            )
            .unwrap()
        };
        assert!(scope("nodes", None).admits_everything());
        assert!(
            scope("nodes", Some("app=web")).admits_everything(),
            "the plugin's own selector narrows what is asked, not the grant"
        );
        assert!(!scope("pods", None).admits_everything(), "a field selector");
        assert!(
            !scope("configmaps", None).admits_everything(),
            "a label selector"
        );
    }

    #[test]
    fn namespaces_groups_and_resources_must_all_match() {
        let r = rules(
            r#"[{"group": "coordination.k8s.io", "resource": "leases", "verbs": ["get"], "namespaces": ["kube-system"]}]"#,
        );
        let lease = |ns| Access {
            group: "coordination.k8s.io",
            resource: "leases",
            verb: Verb::Get,
            namespace: ns,
            name: Some("x"),
        };
        assert!(check(&r, "p", "n", &lease(Some("kube-system"))).is_ok());
        assert!(check(&r, "p", "n", &lease(Some("default"))).is_err());
        assert!(check(&r, "p", "n", &lease(None)).is_err());
        let core = Access {
            group: "",
            ..lease(Some("kube-system"))
        };
        assert!(
            check(&r, "p", "n", &core).is_err(),
            "the core group is not coordination.k8s.io"
        );
        assert!(
            check(&[], "p", "n", &lease(Some("kube-system"))).is_err(),
            "deny by default"
        );
        let list = rules(r#"[{"resource": "pods", "verbs": ["list"], "namespaces": ["a"]}]"#);
        assert!(
            check(&list, "p", "n", &access("pods", Verb::List, None, None)).is_err(),
            "all namespaces need a rule for all"
        );
        let scope = list_scope(
            &list,
            "p",
            "n",
            &access("pods", Verb::List, Some("a"), None),
            None,
            None,
        )
        .unwrap();
        assert_eq!((scope.label_selector, scope.field_selector), (None, None));
    }

    #[test]
    fn rules_parse_strictly() {
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(r#"[{"resource": "Nodes", "verbs": ["get"]}]"#)
                .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "nodes", "verbs": ["escalate"]}]"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "nodes", "verbs": ["get"], "nmes": []}]"#
            )
            .is_err()
        );
    }

    fn pod(name: &str, node: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": {"nodeName": node}})
    }

    #[test]
    fn keys_are_checked_as_path_parts() {
        assert!(check_key("v1", "Pod", Some("default"), Some("web-0")).is_ok());
        assert!(check_key("coordination.k8s.io/v1", "Lease", Some("x"), None).is_ok());
        for (api_version, kind, namespace, name) in [
            ("v1", "Pod", Some("default"), Some("web/status")),
            (
                "v1",
                "ConfigMap",
                Some("kube-system/secrets/db?x="),
                Some("a"),
            ),
            (
                "v1",
                "Pod",
                Some("default"),
                Some("web?fieldManager=x&force=true"),
            ),
            ("v1", "Pod", Some("default"), Some("..")),
            ("v1", "Pod", Some(".."), Some("a")),
            ("v1/..", "Pod", None, None),
            ("/v1", "Pod", None, None),
            ("a/b/v1", "Pod", None, None),
            ("v1", "Pod/eviction", None, None),
            ("v1", "Pod", Some("default"), Some("a%2fb")),
            ("v1", "Pod", Some("default"), Some("a\nb")),
        ] {
            let err = check_key(api_version, kind, namespace, name).unwrap_err();
            assert_eq!(
                err.kind(),
                "invalid",
                "{api_version} {kind} {namespace:?} {name:?}"
            );
            assert!(err.message().contains("expected"), "{err}");
        }
        assert_eq!(
            check_key(
                "v1",
                "ConfigMap",
                Some("kube-system/secrets/db?x="),
                Some("a")
            )
            .unwrap_err()
            .message(),
            "kube namespace \"kube-system/secrets/db?x=\": expected a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 bytes), for example \"kube-system\""
        );
    }

    #[test]
    fn tend_fleet_leases_are_never_written_by_a_plugin() {
        let lease = |verb, ns: Option<&'static str>, name: Option<&'static str>| Access {
            group: "coordination.k8s.io",
            resource: "leases",
            verb,
            namespace: ns,
            name,
        };
        for verb in [Verb::Create, Verb::Patch, Verb::Delete] {
            for name in [
                Some("tend-fleet-reboot"),
                Some("tend-node-n1"),
                Some("tend-rollout"),
                None,
            ] {
                let err =
                    check_fleet_lease(Some("tend-system"), &lease(verb, Some("tend-system"), name))
                        .unwrap_err();
                assert_eq!(err.kind(), "denied");
                assert!(err.message().ends_with(FLEET_LEASE), "{err}");
            }
        }
        // Reads, other names, other namespaces and no fleet: the grants decide.
        let allowed = [
            lease(Verb::Get, Some("tend-system"), Some("tend-fleet-reboot")),
            lease(Verb::Patch, Some("tend-system"), Some("my-lock")),
            lease(Verb::Patch, Some("other"), Some("tend-fleet-reboot")),
        ];
        for access in &allowed {
            assert!(check_fleet_lease(Some("tend-system"), access).is_ok());
        }
        assert!(
            check_fleet_lease(
                None,
                &lease(Verb::Patch, Some("tend-system"), Some("tend-node-n1"))
            )
            .is_ok()
        );
    }

    #[test]
    fn the_election_lease_is_never_written() {
        let own = OwnLease {
            namespace: "tend-system".into(),
            name: "tend-cluster".into(),
        };
        let lease = |verb, ns, name| Access {
            group: "coordination.k8s.io",
            resource: "leases",
            verb,
            namespace: Some(ns),
            name: Some(name),
        };
        for verb in [Verb::Create, Verb::Patch, Verb::Delete] {
            let err = check_own_lease(Some(&own), &lease(verb, "tend-system", "tend-cluster"))
                .unwrap_err();
            assert_eq!(err.kind(), "denied");
            assert!(err.message().ends_with(OWN_LEASE), "{err}");
        }
        assert_eq!(
            check_own_lease(
                Some(&own),
                &lease(Verb::Patch, "tend-system", "tend-cluster")
            )
            .unwrap_err()
            .message(),
            format!(
                "patch leases.coordination.k8s.io in namespace tend-system named tend-cluster: {OWN_LEASE}"
            )
        );
        assert!(
            check_own_lease(Some(&own), &lease(Verb::Get, "tend-system", "tend-cluster")).is_ok()
        );
        assert!(check_own_lease(Some(&own), &lease(Verb::Patch, "tend-system", "mine")).is_ok());
        assert!(check_own_lease(Some(&own), &lease(Verb::Patch, "other", "tend-cluster")).is_ok());
        assert!(check_own_lease(None, &lease(Verb::Patch, "tend-system", "tend-cluster")).is_ok());
    }

    #[test]
    fn selectors_parse_and_match_as_the_api_server_does() {
        let labels =
            LabelSelector::parse("tend=yes, tier!=db,env in (a, b),zone notin (x),gpu,!legacy")
                .unwrap();
        assert!(labels.matches(&pod(
            "a",
            "n",
            json!({"tend": "yes", "env": "a", "gpu": ""})
        )));
        assert!(!labels.matches(&pod(
            "a",
            "n",
            json!({"tend": "yes", "env": "c", "gpu": ""})
        )));
        assert!(!labels.matches(&pod(
            "a",
            "n",
            json!({"tend": "yes", "env": "a", "gpu": "", "legacy": "1"})
        )));
        assert!(
            !labels.matches(&pod("a", "n", json!({"env": "a", "gpu": ""}))),
            "unlabelled"
        );
        for bad in [
            "a=b=c",
            "env in a,b",
            "a b",
            "=x",
            "a=(b)",
            "x/y/z=1",
            "a=b?c",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
        let fields = FieldSelector::parse("spec.nodeName=n1,metadata.name!=b").unwrap();
        assert!(fields.matches(&pod("a", "n1", json!({}))));
        assert!(!fields.matches(&pod("b", "n1", json!({}))));
        assert!(!fields.matches(&pod("a", "n2", json!({}))));
        assert!(FieldSelector::parse("spec.nodeName").is_err());
        assert!(FieldSelector::parse("spec..x=1").is_err());
        // Values reach cache keys and the server's errors: no control
        // characters, no more than a name holds.
        assert!(FieldSelector::parse("spec.nodeName=a\n\u{1b}]0;x").is_err());
        assert!(FieldSelector::parse(&format!("metadata.name={}", "a".repeat(254))).is_err());
    }

    #[test]
    fn rule_selectors_are_checked_when_the_config_is_read() {
        let err = serde_json::from_str::<Vec<KubeRule>>(
            r#"[{"resource": "pods", "verbs": ["list"], "field-selector": "status.phase=Running"}]"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("metadata.name, metadata.namespace, spec.nodeName only"),
            "{err}"
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "pods", "verbs": ["list"], "label-selector": "a=b=c"}]"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(
                r#"[{"resource": "nodes", "verbs": ["patch"], "fields": ["metadata..labels"]}]"#
            )
            .is_err()
        );
        let ok = rules(
            r#"[{"resource": "pods", "verbs": ["list"], "field-selector": "spec.nodeName=$NODE", "label-selector": "tend=yes"}]"#,
        );
        assert_eq!(ok[0].field_selector.as_deref(), Some("spec.nodeName=$NODE"));
    }

    #[test]
    fn a_list_is_narrowed_by_its_rules_selectors_and_a_plugins_selector_never_widens() {
        let r = rules(
            r#"[{"resource": "pods", "verbs": ["list", "get"], "field-selector": "spec.nodeName=$NODE", "label-selector": "tend=yes"},
                {"resource": "pods", "verbs": ["list"], "namespaces": ["default"]}]"#,
        );
        let list = access("pods", Verb::List, Some("default"), None);
        let scope = list_scope(
            &r,
            "p",
            "n1",
            &list,
            Some("app=web"),
            Some("metadata.name!=x"),
        )
        .unwrap();
        assert_eq!(scope.label_selector.as_deref(), Some("tend=yes,app=web"));
        assert_eq!(
            scope.field_selector.as_deref(),
            Some("spec.nodeName=n1,metadata.name!=x"),
            "the first rule allowing the list decides"
        );
        assert!(scope.admits(&pod("a", "n1", json!({"tend": "yes"}))));
        assert!(
            !scope.admits(&pod("a", "n2", json!({"tend": "yes"}))),
            "another node's pod"
        );
        assert!(
            !scope.admits(&pod("a", "n1", json!({}))),
            "an unlabelled pod"
        );
        assert!(!scope.admits_everything());
        let err = list_scope(&r, "p", "n1", &list, Some("a b"), None).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            err.message()
                .starts_with("kube label selector \"a b\": cannot parse"),
            "{err}"
        );
    }

    #[test]
    fn objects_by_name_must_match_some_rules_selectors() {
        let r = rules(
            r#"[{"resource": "pods", "verbs": ["get", "delete"], "label-selector": "tend=yes"},
                {"resource": "pods", "verbs": ["get"], "field-selector": "spec.nodeName=$NODE"}]"#,
        );
        let get = access("pods", Verb::Get, Some("default"), Some("a"));
        assert!(needs_object(&r, "n1", &get));
        let labelled = pod("a", "n2", json!({"tend": "yes"}));
        let mine = pod("a", "n1", json!({}));
        let other = pod("a", "n2", json!({}));
        assert!(check_object(&r, "p", "n1", &get, Some(&labelled), None).is_ok());
        assert!(check_object(&r, "p", "n1", &get, Some(&mine), None).is_ok());
        let err = check_object(&r, "p", "n1", &get, Some(&other), None).unwrap_err();
        assert_eq!(
            err.message(),
            "get pods in namespace default named a: the object is outside the grant's selectors ({ resource = \"pods\", label-selector = \"tend=yes\" }, { resource = \"pods\", field-selector = \"spec.nodeName=$NODE\" }); label the object to match, or widen the selectors in [plugins.p.grants] kube"
        );
        let delete = access("pods", Verb::Delete, Some("default"), Some("a"));
        assert!(
            check_object(&r, "p", "n1", &delete, Some(&mine), None).is_err(),
            "the node rule has no delete"
        );
        assert!(
            check_object(&r, "p", "n1", &delete, None, None).is_err(),
            "no object, no match"
        );
        let open = rules(r#"[{"resource": "pods", "verbs": ["get"]}]"#);
        assert!(!needs_object(&open, "n1", &get));
        assert!(check_object(&open, "p", "n1", &get, None, None).is_ok());
    }

    #[test]
    fn by_selectors_an_absent_object_and_one_outside_them_answer_alike() {
        let r = rules(
            r#"[{"resource": "pods", "verbs": ["get", "patch"], "label-selector": "tend=yes", "fields": ["metadata.labels"]}]"#,
        );
        let get = access("pods", Verb::Get, Some("default"), Some("a"));
        let outside = pod("a", "n1", json!({}));
        let absent = check_found(&r, "p", "n1", &get, None, None).unwrap_err();
        let elsewhere = check_found(&r, "p", "n1", &get, Some(&outside), None).unwrap_err();
        assert_eq!(absent, elsewhere, "the same case and the same words");
        assert_eq!(absent.kind(), "not-found");
        assert_eq!(
            absent.message(),
            "get pods in namespace default named a: no such object within the grant's selectors ({ resource = \"pods\", label-selector = \"tend=yes\", fields = [\"metadata.labels\"] }); one outside them is answered as absent: if it exists, label it to match, or widen the selectors in [plugins.p.grants] kube"
        );
        let inside = pod("a", "n1", json!({"tend": "yes"}));
        assert_eq!(
            check_found(&r, "p", "n1", &get, Some(&inside), None),
            Ok(())
        );
        // Inside the selectors, the rest of the check is check_object's:
        // a patch beyond the rule's fields is denied, naming them.
        let patch = access("pods", Verb::Patch, Some("default"), Some("a"));
        let body = json!({"spec": {"nodeName": "n2"}});
        let shape = Some((PatchShape::Merge, &body));
        let err = check_found(&r, "p", "n1", &patch, Some(&inside), shape).unwrap_err();
        assert_eq!(err.kind(), "denied", "{err}");
        let err = check_found(&r, "p", "n1", &patch, Some(&outside), shape).unwrap_err();
        assert_eq!(
            err.kind(),
            "not-found",
            "outside, the fields tell nothing: {err}"
        );
        // Not granted by name: denied, whatever exists.
        let ungranted = access("pods", Verb::Delete, Some("default"), Some("a"));
        let err = check_found(&r, "p", "n1", &ungranted, Some(&inside), None).unwrap_err();
        assert_eq!(err.kind(), "denied", "{err}");
        // A rule without selectors sees every object: an absent one passes
        // here, for the API server's own not-found.
        let open = rules(r#"[{"resource": "pods", "verbs": ["get"]}]"#);
        assert_eq!(check_found(&open, "p", "n1", &get, None, None), Ok(()));
    }

    #[test]
    fn a_patch_is_bound_to_the_uid_it_was_checked_on() {
        let mut merge = json!({"metadata": {"labels": {"a": "b"}}});
        bind_to_uid(PatchShape::Merge, &mut merge, "u1").unwrap();
        assert_eq!(
            merge,
            json!({"metadata": {"labels": {"a": "b"}, "uid": "u1"}})
        );
        let mut apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"uid": "forged"}});
        bind_to_uid(PatchShape::Apply, &mut apply, "u1").unwrap();
        assert_eq!(
            apply["metadata"]["uid"], "u1",
            "the checked object's, not the plugin's"
        );
        let mut bare = json!({"spec": {}});
        bind_to_uid(PatchShape::Merge, &mut bare, "u1").unwrap();
        assert_eq!(bare, json!({"spec": {}, "metadata": {"uid": "u1"}}));
        let mut ops = json!([{"op": "add", "path": "/metadata/labels/a", "value": "b"}]);
        bind_to_uid(PatchShape::Json, &mut ops, "u1").unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "add", "path": "/metadata/labels/a", "value": "b"}
            ])
        );
        // What cannot carry the UID would go unbound: refused.
        for (shape, mut body) in [
            (
                PatchShape::Apply,
                json!({"apiVersion": "v1", "metadata": null}),
            ),
            (PatchShape::Merge, json!({"metadata": "x"})),
            (PatchShape::Merge, json!("x")),
            (PatchShape::Json, json!({"op": "add"})),
        ] {
            let before = body.clone();
            let err = bind_to_uid(shape, &mut body, "u1").unwrap_err();
            assert_eq!(err.kind(), "invalid", "{before}");
            assert!(err.message().contains("bound to the object"), "{err}");
        }
    }

    fn narrowed() -> Vec<KubeRule> {
        rules(
            r#"[{"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["metadata.labels", "metadata.annotations", "status.conditions"]}]"#,
        )
    }

    fn patch(shape: PatchShape, body: Value) -> Result<(), Refusal> {
        let access = access("nodes", Verb::Patch, None, Some("n1"));
        check_object(&narrowed(), "p", "n1", &access, None, Some((shape, &body)))
    }

    #[test]
    fn fields_narrow_merge_and_apply_patches() {
        assert!(
            patch(
                PatchShape::Merge,
                json!({"metadata": {"labels": {"a": "b", "c": null}, "annotations": {"x": "y"}}})
            )
            .is_ok()
        );
        assert!(
            patch(
                PatchShape::Merge,
                json!({"metadata": {"resourceVersion": "7", "labels": {"a": "b"}}})
            )
            .is_ok()
        );
        assert!(
            patch(PatchShape::Merge, json!({})).is_ok(),
            "an empty patch changes nothing"
        );
        for hostile in [
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {"unschedulable": true}}),
            json!({"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}),
            json!({"metadata": null}),
            json!({"metadata": {"labels": {"a": "b"}, "$patch": "replace"}}),
            json!({"metadata": {"$setElementOrder/labels": []}}),
            json!({"metadata": {"name": "other"}}),
            json!([1]),
            json!({"status": {}}),
        ] {
            let err = patch(PatchShape::Merge, hostile.clone()).unwrap_err();
            assert_eq!(err.kind(), "denied", "{hostile}");
        }
        assert_eq!(
            patch(PatchShape::Merge, json!({"spec": {"unschedulable": true}}))
                .unwrap_err()
                .message(),
            "patch nodes named n1: the patch touches \"spec.unschedulable\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\", \"metadata.annotations\", \"status.conditions\"] }; add that path to the rule's fields in [plugins.p.grants] kube"
        );
        assert!(
            patch(
                PatchShape::Merge,
                json!({"metadata": {"$patch": "replace"}})
            )
            .unwrap_err()
            .message()
            .contains("touches \"metadata\""),
            "a directive touches its parent"
        );
        let apply = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {"conditions": [{"type": "X"}]}});
        assert!(patch(PatchShape::Apply, apply).is_ok());
        let hidden = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}}, "spec": {"taints": []}});
        assert!(
            patch(PatchShape::Apply, hidden).is_err(),
            "a taint hidden in spec"
        );
        assert!(
            patch(PatchShape::Merge, json!("x"))
                .unwrap_err()
                .message()
                .starts_with("patch nodes named n1: the patch touches the whole object, outside"),
            "a merge patch that is not an object replaces the whole object"
        );
    }

    #[test]
    fn fields_narrow_json_patches_with_pointers_unescaped() {
        let op = |op: &str, path: &str| json!({"op": op, "path": path, "value": "x"});
        assert!(
            patch(
                PatchShape::Json,
                json!([
                    op("add", "/metadata/labels/a"),
                    op("test", "/spec/unschedulable")
                ])
            )
            .is_ok()
        );
        assert!(
            patch(
                PatchShape::Json,
                json!([op("add", "/metadata/labels/example.com~1role")])
            )
            .is_ok()
        );
        for hostile in [
            json!([op("replace", "/spec/unschedulable")]),
            json!([op("add", "/spec/taints/-")]),
            json!([op("add", "/metadata/labels/a"), op("remove", "/spec")]),
            json!([op("replace", "/metadata")]),
            json!([op("replace", "")]),
            json!([op("add", "/metadata~1labels/a")]),
            json!([{"op": "move", "from": "/spec/taints", "path": "/metadata/labels/a"}]),
            json!([{"op": "copy", "from": "/spec", "path": "/metadata/annotations/a"}]),
        ] {
            assert_eq!(
                patch(PatchShape::Json, hostile.clone()).unwrap_err().kind(),
                "denied",
                "{hostile}"
            );
        }
        for malformed in [
            json!({"op": "add"}),
            json!([{"path": "/a"}]),
            json!([op("add", "metadata/labels")]),
        ] {
            assert_eq!(
                patch(PatchShape::Json, malformed.clone())
                    .unwrap_err()
                    .kind(),
                "invalid",
                "{malformed}"
            );
        }
        assert_eq!(
            patch_paths(PatchShape::Json, &json!([op("add", "/a~1b/c~0d")])).unwrap(),
            vec![vec!["a/b".to_string(), "c~d".to_string()]]
        );
    }

    /// One annotation granted, in brackets since its key has dots: that key
    /// alone, set or removed, by every patch shape; never a sibling, a key it
    /// begins, the whole map, or the map replaced.
    #[test]
    fn a_key_in_brackets_grants_that_key_alone() {
        let one = rules(
            r#"[{"resource": "nodes", "verbs": ["patch"], "names": ["$NODE"], "fields": ["spec.unschedulable", "metadata.annotations[tend.dev/replace-requested]"]}]"#,
        );
        let access = access("nodes", Verb::Patch, None, Some("n1"));
        let check =
            |shape, body: Value| check_object(&one, "p", "n1", &access, None, Some((shape, &body)));
        let op = |op: &str, path: &str| json!([{"op": op, "path": path, "value": "true"}]);
        for allowed in [
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"tend.dev/replace-requested": "true"}}}),
            ),
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"tend.dev/replace-requested": null}}, "spec": {"unschedulable": true}}),
            ),
            (
                PatchShape::Json,
                op("add", "/metadata/annotations/tend.dev~1replace-requested"),
            ),
            (
                PatchShape::Json,
                json!([{"op": "remove", "path": "/metadata/annotations/tend.dev~1replace-requested"}]),
            ),
            (
                PatchShape::Apply,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {"tend.dev/replace-requested": "true"}}}),
            ),
        ] {
            assert!(check(allowed.0, allowed.1.clone()).is_ok(), "{}", allowed.1);
        }
        for hostile in [
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"tend.dev/other": "x"}}}),
            ),
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"tend.dev/replace-requested-by": "x"}}}),
            ),
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"tend.dev": "x"}}}),
            ),
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": null}}),
            ),
            (
                PatchShape::Merge,
                json!({"metadata": {"annotations": {"$patch": "replace"}}}),
            ),
            (PatchShape::Json, op("replace", "/metadata/annotations")),
            (
                PatchShape::Json,
                op("add", "/metadata/annotations/tend.dev~1replace"),
            ),
            (
                PatchShape::Json,
                json!([{"op": "move", "from": "/metadata/annotations/x", "path": "/metadata/annotations/tend.dev~1replace-requested"}]),
            ),
        ] {
            assert_eq!(
                check(hostile.0, hostile.1.clone()).unwrap_err().kind(),
                "denied",
                "{}",
                hostile.1
            );
        }
        // The refusal names a key with dots as a grant writes it: the path to add.
        let labels =
            rules(r#"[{"resource": "nodes", "verbs": ["patch"], "fields": ["metadata.labels"]}]"#);
        let refused = |body: Value| {
            check_object(
                &labels,
                "p",
                "n1",
                &access,
                None,
                Some((PatchShape::Merge, &body)),
            )
            .unwrap_err()
            .message()
            .to_string()
        };
        let message =
            refused(json!({"metadata": {"annotations": {"tend.dev/replace-requested": "true"}}}));
        assert!(
            message.contains("touches \"metadata.annotations[tend.dev/replace-requested]\", outside the fields of { resource = \"nodes\", fields = [\"metadata.labels\"] }; add that path to the rule's fields"),
            "{message}"
        );
        // A key no grant can name (a bracket, a space) is shown as a JSON
        // pointer, never as another key's path, and no nearer path is
        // suggested: it would grant the whole map around the key.
        for body in [
            json!({"metadata": {"annotations[tend": {"dev/replace-requested]": "x"}}}),
            json!({"metadata": {"annotations": {"a b": "x"}}}),
            json!({"a b": 1}),
        ] {
            let message = refused(body);
            assert!(
                message.contains("no field path can name it") && !message.contains("add that"),
                "{message}"
            );
        }
        let message =
            refused(json!({"metadata": {"annotations[tend": {"dev/replace-requested]": "x"}}}));
        assert!(
            message.contains("touches \"/metadata/annotations[tend/dev~1replace-requested]\""),
            "{message}"
        );
    }

    /// What a refusal says to add is read back by the config as exactly the
    /// path refused.
    #[test]
    fn the_path_a_refusal_names_reads_back_as_that_path() {
        let long = "a".repeat(600);
        for steps in [
            vec!["metadata", "labels", "app"],
            vec!["metadata", "annotations", "tend.dev/replace-requested"],
            vec!["metadata", "labels", "node-role/x"],
            vec!["x.y", "z"],
            vec!["metadata", "annotations", "a[b"],
            vec!["metadata", "annotations", ""],
            vec!["spec", long.as_str()],
        ] {
            let steps: Vec<String> = steps.into_iter().map(String::from).collect();
            match grantable_path(&steps) {
                Some(written) => {
                    assert!(written.len() <= GRANTABLE_PATH);
                    assert_eq!(field_steps(&written).unwrap(), steps, "{written}");
                }
                None => assert!(
                    steps.iter().any(|s| step_kind(s).is_none()) || steps.concat().len() > 500,
                    "{steps:?} is nameable"
                ),
            }
        }
    }

    #[test]
    fn field_paths_are_names_and_bracketed_keys_spelled_one_way() {
        for good in [
            "metadata.labels.app",
            "metadata.labels",
            "metadata.annotations[tend.dev/replace-requested]",
            "metadata.labels[node-role/x]",
            "spec.template.metadata.annotations[example.com/a]",
            "status.conditions",
        ] {
            assert!(field_path_shaped(good), "{good}");
        }
        assert_eq!(
            field_steps("metadata.annotations[tend.dev/x]").unwrap(),
            ["metadata", "annotations", "tend.dev/x"]
        );
        for bad in [
            "",
            "metadata..labels",
            "metadata.",
            "metadata.annotations[]",
            "metadata.annotations[a",
            "metadata.annotations.[a]",
            "metadata.annotations[a]b",
            "metadata.annotations[a b]",
            "metadata.annotations[a[b]]",
            "metadata.annotations[\"a\"]",
            "metadata.annotations[a]]",
            // one spelling: a plain name after a dot, a key with `.` or `/` in brackets
            "metadata[annotations]",
            "[metadata].annotations",
            "metadata.labels[app]",
            "metadata.annotations.example.com/note",
            "metadata.labels.a/b",
            "metadata.labels.example.com",
            "metadata.annotations.tend.dev",
            "spec.template.metadata.labels.example.com",
            "metadata.annotations[example.com/a][b.c]",
        ] {
            assert!(!field_path_shaped(bad), "{bad}");
            let text = format!(
                r#"[{{"resource": "nodes", "verbs": ["patch"], "fields": [{}]}}]"#,
                serde_json::to_string(bad).unwrap()
            );
            let err = serde_json::from_str::<Vec<KubeRule>>(&text)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("metadata.annotations[tend.dev/replace-requested]"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_rule_without_fields_allows_any_patch() {
        let mut r = narrowed();
        r.push(rules(r#"[{"resource": "nodes", "verbs": ["patch"]}]"#).remove(0));
        let access = access("nodes", Verb::Patch, None, Some("n1"));
        let body = json!({"spec": {"unschedulable": true}});
        assert!(
            check_object(
                &r,
                "p",
                "n1",
                &access,
                None,
                Some((PatchShape::Merge, &body))
            )
            .is_ok()
        );
    }
}

/// The largest object or patch a plugin may send (etcd's own limit is 1.5 MiB).
pub const MAX_BODY: usize = 1024 * 1024;
/// Selectors and continue tokens a plugin may send.
pub const MAX_SELECTOR: usize = 4096;
/// Event reasons and messages, as the API server bounds them.
pub const MAX_REASON: usize = 128;
pub const MAX_NOTE: usize = 1024;

/// `text` a plugin sends (a body, a selector) within `max` bytes; `what`
/// names it in the message.
pub fn check_size(what: &str, text: &str, max: usize) -> Result<(), Refusal> {
    if text.len() > max {
        return Err(Refusal::Invalid(format!(
            "kube {what}: {} bytes, at most {max}",
            text.len()
        )));
    }
    Ok(())
}

/// An Event's reason and message, as the API server takes them: bounded,
/// the reason one CamelCase word.
pub fn check_event(reason: &str, message: &str) -> Result<(), Refusal> {
    check_size("event reason", reason, MAX_REASON)?;
    check_size("event message", message, MAX_NOTE)?;
    if reason.is_empty() || !reason.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Refusal::Invalid(format!(
            "kube event reason {reason:?}: expected a CamelCase word such as \"LabelsApplied\""
        )));
    }
    Ok(())
}

#[cfg(test)]
mod bounds {
    use super::*;

    #[test]
    fn bodies_and_events_are_bounded() {
        assert!(check_size("patch", &"x".repeat(MAX_BODY), MAX_BODY).is_ok());
        assert_eq!(
            check_size("patch", &"x".repeat(MAX_BODY + 1), MAX_BODY)
                .unwrap_err()
                .to_string(),
            "invalid: kube patch: 1048577 bytes, at most 1048576"
        );
        assert!(check_event(&"R".repeat(MAX_REASON), &"m".repeat(MAX_NOTE)).is_ok());
        assert!(check_event(&"R".repeat(MAX_REASON + 1), "m").is_err());
        assert!(check_event("Reason", &"m".repeat(MAX_NOTE + 1)).is_err());
        assert_eq!(
            check_event("a\nb", "m").unwrap_err().message(),
            "kube event reason \"a\\nb\": expected a CamelCase word such as \"LabelsApplied\""
        );
        assert!(check_event("", "m").is_err());
    }
}
