//! The Kubernetes RBAC objects that the kube grants of one scope's plugins
//! need, as YAML text: what `tend rbac -c FILE` prints, so the RBAC a cluster
//! grants and the grants in the config cannot drift apart. Pure: the same
//! input always gives the same bytes.
//!
//! - Rules without `namespaces` go into one ClusterRole (and its
//!   ClusterRoleBinding); rules restricted to namespaces into one Role (and
//!   RoleBinding) per namespace.
//! - `names` become `resourceNames` for get, patch and delete. RBAC cannot
//!   narrow `create` by name (the name is in the request body), and narrows
//!   list and watch by name only for a request with a `metadata.name` field
//!   selector, while the host lists the whole resource and cuts the result to
//!   the granted names: those verbs get a rule without `resourceNames`.
//! - `$NODE` is the name of the node tend runs on, which one role serving
//!   every node cannot name: such a rule has no `resourceNames` either.
//! - `watch` and `list` both become list + watch: the host serves them from a
//!   shared watch cache, and a reflector lists, then watches.
//! - The grant stays the finer check: tend refuses any call the grant does not
//!   cover, whatever RBAC allows. Every rule left wider than its grant says so
//!   in a comment.
//! - Rules are merged per (group, resource, resourceNames), verbs a wider rule
//!   already allows are dropped, and everything is sorted.
//! - Every string that comes from the config is checked (no `*` can come out
//!   of a grant) and double-quoted.

use crate::kube::{KubeRule, NODE, Verb};
use std::collections::{BTreeMap, BTreeSet};

/// Where the plugins run: a DaemonSet pod on every node, or the elected
/// replica of a Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Node,
    Cluster,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Node => "node",
            Scope::Cluster => "cluster",
        }
    }
}

/// The kube rules of one plugin (`[plugins.<plugin>.grants] kube`).
#[derive(Debug, Clone, Copy)]
pub struct PluginRules<'a> {
    pub plugin: &'a str,
    pub rules: &'a [KubeRule],
}

/// A namespaced object: the ServiceAccount, the leader-election Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Named<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

/// What the RBAC of one scope is made from.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The config file as the operator named it (`tend rbac -c <config>`), for the header.
    pub config: &'a str,
    pub scope: Scope,
    /// The ServiceAccount the tend pods of this scope run as.
    pub service_account: Named<'a>,
    /// The plugins of this scope that have kube grants.
    pub plugins: &'a [PluginRules<'a>],
    /// Whether tend emits events.k8s.io/v1 Events (it gets, creates and patches them).
    pub events: bool,
    /// Cluster scope: the leader-election Lease (`[host.leader-election]`).
    pub lease: Option<Named<'a>>,
}

/// Why no RBAC could be made: a grant or name RBAC cannot express safely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacError(pub String);

impl std::fmt::Display for RbacError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RbacError {}

/// An RBAC verb, in the order rules list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum RbacVerb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl RbacVerb {
    fn name(self) -> &'static str {
        match self {
            RbacVerb::Get => "get",
            RbacVerb::List => "list",
            RbacVerb::Watch => "watch",
            RbacVerb::Create => "create",
            RbacVerb::Update => "update",
            RbacVerb::Patch => "patch",
            RbacVerb::Delete => "delete",
        }
    }

    /// What a grant's verb needs from RBAC.
    fn for_grant(verb: Verb) -> &'static [RbacVerb] {
        match verb {
            Verb::Get => &[RbacVerb::Get],
            // The host's shared watch cache serves both: a reflector lists, then watches.
            Verb::List | Verb::Watch => &[RbacVerb::List, RbacVerb::Watch],
            Verb::Create => &[RbacVerb::Create],
            Verb::Patch => &[RbacVerb::Patch],
            Verb::Delete => &[RbacVerb::Delete],
        }
    }

    /// RBAC can narrow this verb by `resourceNames` for the host's requests.
    fn narrowable_by_name(self) -> bool {
        matches!(
            self,
            RbacVerb::Get | RbacVerb::Update | RbacVerb::Patch | RbacVerb::Delete
        )
    }
}

/// Who needs a rule, in the order comments name them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Why {
    Plugin(String),
    Events,
    Lease,
}

/// Why a rule is wider than the grant it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Note {
    /// `names = ["$NODE"]`.
    OwnNode,
    /// list/watch of a grant with names.
    ListsWhole,
    /// create of a grant with names.
    CreateUnnamed,
    /// create of the leader-election Lease.
    LeaseCreate,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RuleKey {
    group: String,
    resource: String,
    /// None: any name.
    names: Option<BTreeSet<String>>,
}

#[derive(Debug, Clone, Default)]
struct Entry {
    verbs: BTreeSet<RbacVerb>,
    why: BTreeSet<Why>,
    notes: BTreeSet<Note>,
}

/// Rules by where they apply: None is cluster-wide (sorts first), else a namespace.
type Rules = BTreeMap<Option<String>, BTreeMap<RuleKey, Entry>>;

fn add(
    rules: &mut Rules,
    namespace: Option<&str>,
    key: RuleKey,
    verbs: impl IntoIterator<Item = RbacVerb>,
    why: &Why,
    note: Option<Note>,
) {
    let verbs: Vec<RbacVerb> = verbs.into_iter().collect();
    if verbs.is_empty() {
        return;
    }
    let entry = rules
        .entry(namespace.map(str::to_string))
        .or_default()
        .entry(key)
        .or_default();
    entry.verbs.extend(verbs);
    entry.why.insert(why.clone());
    entry.notes.extend(note);
}

/// The RBAC objects `input` needs, as commented YAML (several documents).
pub fn render(input: &Input) -> Result<String, RbacError> {
    let sa = input.service_account;
    check_subdomain("the ServiceAccount name", sa.name)?;
    check_label("the ServiceAccount namespace", sa.namespace)?;
    let mut rules = Rules::new();
    for plugin in input.plugins {
        for rule in plugin.rules {
            expand(&mut rules, plugin.plugin, rule)?;
        }
    }
    if input.events {
        let key = RuleKey {
            group: "events.k8s.io".into(),
            resource: "events".into(),
            names: None,
        };
        add(
            &mut rules,
            None,
            key,
            [RbacVerb::Get, RbacVerb::Create, RbacVerb::Patch],
            &Why::Events,
            None,
        );
    }
    if let Some(lease) = input.lease {
        if input.scope == Scope::Node {
            return Err(RbacError(
                "a leader-election Lease is for cluster scope: node scope runs on every node"
                    .into(),
            ));
        }
        check_label("[host.leader-election] namespace", lease.namespace)?;
        check_subdomain("[host.leader-election] name", lease.name)?;
        let key = |names: Option<BTreeSet<String>>| RuleKey {
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            names,
        };
        let named = Some(BTreeSet::from([lease.name.to_string()]));
        let ns = Some(lease.namespace);
        add(
            &mut rules,
            ns,
            key(named),
            [RbacVerb::Get, RbacVerb::Update],
            &Why::Lease,
            None,
        );
        add(
            &mut rules,
            ns,
            key(None),
            [RbacVerb::Create],
            &Why::Lease,
            Some(Note::LeaseCreate),
        );
    }
    drop_covered(&mut rules);
    Ok(yaml(input, &rules))
}

/// One grant rule into RBAC rules.
fn expand(rules: &mut Rules, plugin: &str, rule: &KubeRule) -> Result<(), RbacError> {
    let at = format!("[plugins.{}.grants] kube", inert(plugin));
    check_group(&at, &rule.group)?;
    check_resource(&at, &rule.resource)?;
    let namespaces: Vec<Option<&str>> = match &rule.namespaces {
        None => vec![None],
        Some(list) => {
            for ns in list {
                check_label(&format!("{at}: namespace"), ns)?;
            }
            list.iter().map(|ns| Some(ns.as_str())).collect()
        }
    };
    if let Some(names) = &rule.names {
        for name in names.iter().filter(|n| *n != NODE) {
            check_object_name(&at, name)?;
        }
    }
    let verbs: BTreeSet<RbacVerb> = rule
        .verbs
        .iter()
        .flat_map(|v| RbacVerb::for_grant(*v))
        .copied()
        .collect();
    let key = |names: Option<BTreeSet<String>>| RuleKey {
        group: rule.group.clone(),
        resource: rule.resource.clone(),
        names,
    };
    let why = Why::Plugin(plugin.to_string());
    for ns in namespaces {
        match &rule.names {
            None => add(rules, ns, key(None), verbs.iter().copied(), &why, None),
            // The node tend runs on: one role serves every node.
            Some(names) if names.iter().any(|n| n == NODE) => {
                add(
                    rules,
                    ns,
                    key(None),
                    verbs.iter().copied(),
                    &why,
                    Some(Note::OwnNode),
                );
            }
            // No name at all: the grant allows get, patch, delete and create of
            // nothing, and lists cut to nothing.
            Some(names) if names.is_empty() => {
                let lists: Vec<RbacVerb> = verbs
                    .iter()
                    .copied()
                    .filter(|v| matches!(v, RbacVerb::List | RbacVerb::Watch))
                    .collect();
                add(rules, ns, key(None), lists, &why, Some(Note::ListsWhole));
            }
            Some(names) => {
                let named: Vec<RbacVerb> = verbs
                    .iter()
                    .copied()
                    .filter(|v| v.narrowable_by_name())
                    .collect();
                add(
                    rules,
                    ns,
                    key(Some(names.iter().cloned().collect())),
                    named,
                    &why,
                    None,
                );
                for (verb, note) in [
                    (RbacVerb::List, Note::ListsWhole),
                    (RbacVerb::Watch, Note::ListsWhole),
                    (RbacVerb::Create, Note::CreateUnnamed),
                ] {
                    if verbs.contains(&verb) {
                        add(rules, ns, key(None), [verb], &why, Some(note));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Drop the verbs of a rule that a wider rule already allows (its reasons go
/// to the wider rule), and rules left with none. Cluster-wide named rules
/// first, then namespaced rules without names, then namespaced named rules,
/// so a reason is never handed to a rule that goes afterwards.
fn drop_covered(rules: &mut Rules) {
    let covers = |target_ns: &Option<String>,
                  target: &RuleKey,
                  cover_ns: &Option<String>,
                  cover: &RuleKey| {
        if cover.group != target.group || cover.resource != target.resource {
            return false;
        }
        if cover_ns == target_ns {
            return cover.names.is_none() && target.names.is_some();
        }
        cover_ns.is_none() && (cover.names.is_none() || cover.names == target.names)
    };
    let mut targets: Vec<(Option<String>, RuleKey)> = rules
        .iter()
        .flat_map(|(ns, keys)| keys.keys().map(move |k| (ns.clone(), k.clone())))
        .collect();
    // Stable: within a rank, the map's sorted order.
    targets.sort_by_key(|(ns, key)| match (ns, &key.names) {
        (None, _) => 0,
        (Some(_), None) => 1,
        (Some(_), Some(_)) => 2,
    });
    for (target_ns, target) in targets {
        let Some(entry) = rules.get(&target_ns).and_then(|k| k.get(&target)).cloned() else {
            continue;
        };
        let mut taken: Vec<(Option<String>, RuleKey)> = Vec::new();
        let mut left = entry.verbs.clone();
        for (cover_ns, keys) in rules.iter() {
            for (cover, cover_entry) in keys {
                if covers(&target_ns, &target, cover_ns, cover)
                    && cover_entry.verbs.iter().any(|v| left.contains(v))
                {
                    left.retain(|v| !cover_entry.verbs.contains(v));
                    taken.push((cover_ns.clone(), cover.clone()));
                }
            }
        }
        for (cover_ns, cover) in taken {
            let cover_entry = rules.get_mut(&cover_ns).unwrap().get_mut(&cover).unwrap();
            cover_entry.why.extend(entry.why.iter().cloned());
        }
        let keys = rules.get_mut(&target_ns).unwrap();
        if left.is_empty() {
            keys.remove(&target);
        } else {
            keys.get_mut(&target).unwrap().verbs = left;
        }
    }
    rules.retain(|_, keys| !keys.is_empty());
}

// ---------------------------------------------------------------------------
// Checks: what RBAC cannot express safely is an error, not a wildcard.
// ---------------------------------------------------------------------------

fn error(what: &str, value: &str, expected: &str) -> RbacError {
    RbacError(format!("{what} {}: {expected}", quoted(&inert(value))))
}

fn is_dns(text: &str, max: usize, dots: bool) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !text.is_empty()
        && text.len() <= max
        && text
            .chars()
            .all(|c| alnum(c) || c == '-' || (dots && c == '.'))
        && text.starts_with(alnum)
        && text.ends_with(alnum)
}

fn check_label(what: &str, text: &str) -> Result<(), RbacError> {
    match is_dns(text, 63, false) {
        true => Ok(()),
        false => Err(error(
            what,
            text,
            "expected a DNS label (lower-case letters, digits and '-', at most 63)",
        )),
    }
}

fn check_subdomain(what: &str, text: &str) -> Result<(), RbacError> {
    match is_dns(text, 253, true) {
        true => Ok(()),
        false => Err(error(
            what,
            text,
            "expected a DNS subdomain (lower-case letters, digits, '-' and '.', at most 253)",
        )),
    }
}

fn check_group(at: &str, group: &str) -> Result<(), RbacError> {
    match group.is_empty() || is_dns(group, 253, true) {
        true => Ok(()),
        false => Err(error(
            &format!("{at}: group"),
            group,
            "expected an API group such as \"apps\" or \"\" (the core group); RBAC wildcards are not granted",
        )),
    }
}

fn check_resource(at: &str, resource: &str) -> Result<(), RbacError> {
    let parts: Vec<&str> = resource.split('/').collect();
    let ok = parts.len() <= 2 && resource.len() <= 63 && parts.iter().all(|p| is_dns(p, 63, false));
    match ok {
        true => Ok(()),
        false => Err(error(
            &format!("{at}: resource"),
            resource,
            "expected a plural lower-case resource such as \"nodes\" or \"nodes/status\"; RBAC wildcards are not granted",
        )),
    }
}

/// Object names: what the API server accepts in a path, without wildcards or
/// control characters (YAML-special characters are fine: names are quoted).
fn check_object_name(at: &str, name: &str) -> Result<(), RbacError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| (' '..='~').contains(&c) && !matches!(c, '/' | '%' | '*'));
    match ok {
        true => Ok(()),
        false => Err(error(
            &format!("{at}: name"),
            name,
            "expected an object name (printable ASCII without '/', '%' or '*', at most 253)",
        )),
    }
}

// ---------------------------------------------------------------------------
// YAML
// ---------------------------------------------------------------------------

/// A double-quoted YAML scalar. Checked strings are printable ASCII, so only
/// `"` and `\` need escaping; anything else (only ever in error messages and
/// comments) was made inert first.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Text for a comment or message: printable ASCII only, everything else `?`,
/// so no newline can end a comment early.
fn inert(text: &str) -> String {
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

fn flow<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(quoted).collect();
    format!("[{}]", items.join(", "))
}

/// `text` as comment lines of at most ~88 columns, each starting with `indent`.
fn comment(out: &mut String, indent: &str, text: &str) {
    let mut line = String::new();
    for word in inert(text).split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && indent.len() + 2 + line.len() + 1 + word.len() > 88 {
            out.push_str(&format!("{indent}# {line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&format!("{indent}# {line}\n"));
}

fn note_text(note: Note, scope: Scope) -> &'static str {
    match (note, scope) {
        (Note::OwnNode, Scope::Node) => {
            "names = [\"$NODE\"]: one role serves every node and RBAC cannot name each pod's own node, so this rule is not narrowed by name; the grant narrows it to the node tend runs on. (The NodeRestriction admission plugin narrows kubelets, not service accounts.)"
        }
        (Note::OwnNode, Scope::Cluster) => {
            "names = [\"$NODE\"]: the node the elected replica runs on, which RBAC cannot name: not narrowed by name here; the grant narrows it."
        }
        (Note::ListsWhole, _) => {
            "list/watch of a grant with names: the host lists and watches the whole resource (its shared cache) and cuts the result to the granted names, and RBAC narrows list/watch by name only for a metadata.name field selector: not narrowed by name here."
        }
        (Note::LeaseCreate, _) => {
            "create: RBAC cannot narrow create by name (the name is in the request body), so this allows any Lease in this namespace; tend only ever creates its own."
        }
        (Note::CreateUnnamed, _) => {
            "create: RBAC cannot narrow create by name (the name is in the request body): not narrowed by name here; the grant narrows it."
        }
    }
}

fn why_lines(why: &BTreeSet<Why>, lease: Option<Named>) -> Vec<String> {
    let plugins: Vec<String> = why
        .iter()
        .filter_map(|w| match w {
            Why::Plugin(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    let mut lines = Vec::new();
    if !plugins.is_empty() {
        lines.push(format!("plugins: {}", plugins.join(", ")));
    }
    if why.contains(&Why::Events) {
        lines.push(
            "tend: the events.k8s.io/v1 Events it records about the objects plugins act on, in their namespaces (cluster-scoped objects: default); it reads an Event before raising its count"
                .into(),
        );
    }
    if let (true, Some(lease)) = (why.contains(&Why::Lease), lease) {
        lines.push(format!(
            "tend: leader election on the Lease {}/{} ([host.leader-election])",
            lease.namespace, lease.name
        ));
    }
    lines
}

fn labels(out: &mut String, scope: Scope) {
    out.push_str("  labels:\n");
    out.push_str("    app.kubernetes.io/part-of: tend\n");
    out.push_str(&format!(
        "    app.kubernetes.io/component: {}\n",
        scope.name()
    ));
}

fn yaml(input: &Input, rules: &Rules) -> String {
    let sa = input.service_account;
    let scope = input.scope;
    let role = format!("{}:{}", sa.namespace, sa.name);
    let mut out = String::new();
    comment(
        &mut out,
        "",
        &format!("generated by `tend rbac -c {}`; do not edit.", input.config),
    );
    out.push_str("#\n");
    comment(
        &mut out,
        "",
        &format!(
            "The RBAC of tend's {} scope (config {}), bound to the ServiceAccount {}/{}. Each rule names who needs it. The plugins' kube grants stay the finer check: tend refuses every call a grant does not cover, whatever RBAC allows.",
            scope.name(),
            input.config,
            sa.namespace,
            sa.name
        ),
    );
    comment(
        &mut out,
        "",
        "A grant's list or watch needs both: the host serves them from a shared watch cache (a reflector lists, then watches). API discovery (/api, /apis) needs no rule: the default system:discovery role allows it to every authenticated user.",
    );
    if rules.is_empty() {
        out.push_str("#\n");
        comment(
            &mut out,
            "",
            "Nothing to grant: no plugin of this scope has a kube grant.",
        );
    }
    for (namespace, keys) in rules {
        out.push_str("---\n");
        match namespace {
            None => comment(&mut out, "", "Cluster-wide: the rules without namespaces."),
            Some(ns) => comment(
                &mut out,
                "",
                &format!("Namespace {ns}: the rules restricted to it."),
            ),
        }
        let kind = if namespace.is_some() {
            "Role"
        } else {
            "ClusterRole"
        };
        out.push_str("apiVersion: rbac.authorization.k8s.io/v1\n");
        out.push_str(&format!("kind: {kind}\n"));
        out.push_str("metadata:\n");
        out.push_str(&format!("  name: {}\n", quoted(&role)));
        if let Some(ns) = namespace {
            out.push_str(&format!("  namespace: {}\n", quoted(ns)));
        }
        labels(&mut out, scope);
        out.push_str("rules:\n");
        for (key, entry) in keys {
            for line in why_lines(&entry.why, input.lease) {
                comment(&mut out, "  ", &line);
            }
            for note in &entry.notes {
                comment(&mut out, "  ", note_text(*note, scope));
            }
            out.push_str(&format!("  - apiGroups: {}\n", flow([key.group.as_str()])));
            out.push_str(&format!(
                "    resources: {}\n",
                flow([key.resource.as_str()])
            ));
            if let Some(names) = &key.names {
                out.push_str(&format!(
                    "    resourceNames: {}\n",
                    flow(names.iter().map(String::as_str))
                ));
            }
            out.push_str(&format!(
                "    verbs: {}\n",
                flow(entry.verbs.iter().map(|v| v.name()))
            ));
        }
        out.push_str("---\n");
        out.push_str("apiVersion: rbac.authorization.k8s.io/v1\n");
        out.push_str(&format!("kind: {kind}Binding\n"));
        out.push_str("metadata:\n");
        out.push_str(&format!("  name: {}\n", quoted(&role)));
        if let Some(ns) = namespace {
            out.push_str(&format!("  namespace: {}\n", quoted(ns)));
        }
        labels(&mut out, scope);
        out.push_str("roleRef:\n");
        out.push_str("  apiGroup: rbac.authorization.k8s.io\n");
        out.push_str(&format!("  kind: {kind}\n"));
        out.push_str(&format!("  name: {}\n", quoted(&role)));
        out.push_str("subjects:\n");
        out.push_str("  - kind: ServiceAccount\n");
        out.push_str(&format!("    name: {}\n", quoted(sa.name)));
        out.push_str(&format!("    namespace: {}\n", quoted(sa.namespace)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(json: &str) -> Vec<KubeRule> {
        serde_json::from_str(json).unwrap()
    }

    const SA: Named = Named {
        namespace: "tend-system",
        name: "tend-node",
    };

    fn node(plugins: &[PluginRules]) -> Result<String, RbacError> {
        render(&Input {
            config: "tend.toml",
            scope: Scope::Node,
            service_account: SA,
            plugins,
            events: false,
            lease: None,
        })
    }

    /// The YAML lines that are not comments.
    fn body(yaml: &str) -> Vec<&str> {
        yaml.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect()
    }

    /// The text of every comment, wrapped lines joined.
    fn comments(yaml: &str) -> String {
        let lines: Vec<&str> = yaml
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix('#'))
            .map(str::trim)
            .collect();
        lines.join(" ")
    }

    /// Every flow list of `key:` in the output, parsed (quoted flow lists of
    /// printable ASCII are JSON arrays, so a real parser checks the quoting).
    fn lists(yaml: &str, key: &str) -> Vec<Vec<String>> {
        let prefix = format!("{key}: ");
        body(yaml)
            .iter()
            .filter_map(|l| {
                l.trim_start()
                    .trim_start_matches("- ")
                    .strip_prefix(prefix.as_str())
            })
            .map(|list| serde_json::from_str(list).unwrap_or_else(|e| panic!("{list}: {e}")))
            .collect()
    }

    #[test]
    fn a_small_config_renders_exactly() {
        let labeler =
            rules(r#"[{"resource": "nodes", "verbs": ["get", "patch"], "names": ["$NODE"]}]"#);
        let reaper = rules(
            r#"[{"resource": "nodes", "verbs": ["list", "watch"]},
            {"resource": "configmaps", "verbs": ["get"], "namespaces": ["kube-system"], "names": ["kubeadm-config"]}]"#,
        );
        let yaml = render(&Input {
            config: "cluster.toml",
            scope: Scope::Cluster,
            service_account: Named {
                namespace: "tend-system",
                name: "tend-cluster",
            },
            plugins: &[
                PluginRules {
                    plugin: "reaper",
                    rules: &reaper,
                },
                PluginRules {
                    plugin: "labeler",
                    rules: &labeler,
                },
            ],
            events: true,
            lease: Some(Named {
                namespace: "tend-system",
                name: "tend-cluster",
            }),
        })
        .unwrap();
        let expected = r#"# generated by `tend rbac -c cluster.toml`; do not edit.
#
# The RBAC of tend's cluster scope (config cluster.toml), bound to the ServiceAccount
# tend-system/tend-cluster. Each rule names who needs it. The plugins' kube grants stay
# the finer check: tend refuses every call a grant does not cover, whatever RBAC allows.
# A grant's list or watch needs both: the host serves them from a shared watch cache (a
# reflector lists, then watches). API discovery (/api, /apis) needs no rule: the default
# system:discovery role allows it to every authenticated user.
---
# Cluster-wide: the rules without namespaces.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: "tend-system:tend-cluster"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
rules:
  # plugins: labeler, reaper
  # names = ["$NODE"]: the node the elected replica runs on, which RBAC cannot name: not
  # narrowed by name here; the grant narrows it.
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "watch", "patch"]
  # tend: the events.k8s.io/v1 Events it records about the objects plugins act on, in
  # their namespaces (cluster-scoped objects: default); it reads an Event before raising
  # its count
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["get", "create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: "tend-system:tend-cluster"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: "tend-system:tend-cluster"
subjects:
  - kind: ServiceAccount
    name: "tend-cluster"
    namespace: "tend-system"
---
# Namespace kube-system: the rules restricted to it.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: "tend-system:tend-cluster"
  namespace: "kube-system"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
rules:
  # plugins: reaper
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["kubeadm-config"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: "tend-system:tend-cluster"
  namespace: "kube-system"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: "tend-system:tend-cluster"
subjects:
  - kind: ServiceAccount
    name: "tend-cluster"
    namespace: "tend-system"
---
# Namespace tend-system: the rules restricted to it.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: "tend-system:tend-cluster"
  namespace: "tend-system"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
rules:
  # tend: leader election on the Lease tend-system/tend-cluster ([host.leader-election])
  # create: RBAC cannot narrow create by name (the name is in the request body), so this
  # allows any Lease in this namespace; tend only ever creates its own.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  # tend: leader election on the Lease tend-system/tend-cluster ([host.leader-election])
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["tend-cluster"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: "tend-system:tend-cluster"
  namespace: "tend-system"
  labels:
    app.kubernetes.io/part-of: tend
    app.kubernetes.io/component: cluster
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: "tend-system:tend-cluster"
subjects:
  - kind: ServiceAccount
    name: "tend-cluster"
    namespace: "tend-system"
"#;
        assert_eq!(yaml, expected, "\n{yaml}");
    }

    #[test]
    fn own_node_is_not_narrowed_by_rbac_and_says_why() {
        let r = rules(r#"[{"resource": "nodes", "verbs": ["get", "patch"], "names": ["$NODE"]}]"#);
        let yaml = node(&[PluginRules {
            plugin: "labeler",
            rules: &r,
        }])
        .unwrap();
        assert!(!yaml.contains("resourceNames"), "{yaml}");
        assert!(!yaml.contains("\nkind: Role\n"), "{yaml}");
        assert_eq!(lists(&yaml, "verbs"), [["get", "patch"]]);
        assert!(
            yaml.contains("# names = [\"$NODE\"]: one role serves every node"),
            "{yaml}"
        );
        assert!(
            comments(&yaml).contains(
                "NodeRestriction admission plugin narrows kubelets, not service accounts"
            ),
            "{yaml}"
        );
        // "$NODE" among other names: still the whole resource, and only once.
        let r = rules(r#"[{"resource": "nodes", "verbs": ["get"], "names": ["a", "$NODE"]}]"#);
        let yaml = node(&[PluginRules {
            plugin: "p",
            rules: &r,
        }])
        .unwrap();
        assert_eq!(lists(&yaml, "resources"), [["nodes"]]);
        assert!(!yaml.contains("resourceNames"), "{yaml}");
    }

    #[test]
    fn list_and_watch_need_both_and_patch_stays_patch() {
        for verb in ["list", "watch"] {
            let r = rules(&format!(
                r#"[{{"resource": "pods", "verbs": ["{verb}", "patch"]}}]"#
            ));
            let yaml = node(&[PluginRules {
                plugin: "p",
                rules: &r,
            }])
            .unwrap();
            assert_eq!(
                lists(&yaml, "verbs"),
                [["list", "watch", "patch"]],
                "{verb}"
            );
        }
    }

    #[test]
    fn names_narrow_get_patch_delete_but_not_list_watch_or_create() {
        let r = rules(
            r#"[{"group": "apps", "resource": "deployments", "verbs": ["get", "list", "create", "patch", "delete"], "names": ["web", "api"]}]"#,
        );
        let yaml = node(&[PluginRules {
            plugin: "p",
            rules: &r,
        }])
        .unwrap();
        assert_eq!(lists(&yaml, "resourceNames"), [["api", "web"]]);
        assert_eq!(
            lists(&yaml, "verbs"),
            [
                vec!["list", "watch", "create"],
                vec!["get", "patch", "delete"]
            ]
        );
        assert!(
            yaml.contains("# list/watch of a grant with names"),
            "{yaml}"
        );
        assert!(
            yaml.contains("# create: RBAC cannot narrow create by name"),
            "{yaml}"
        );
        // No names at all grants no get: never an empty resourceNames (= every name).
        let r = rules(
            r#"[{"resource": "secrets", "verbs": ["get", "delete", "create"], "names": []}]"#,
        );
        let yaml = node(&[PluginRules {
            plugin: "p",
            rules: &r,
        }])
        .unwrap();
        assert!(!yaml.contains("resourceNames"), "{yaml}");
        assert!(!yaml.contains("secrets"), "{yaml}");
    }

    #[test]
    fn namespaces_make_one_role_each_and_no_namespace_is_cluster_wide() {
        let r = rules(
            r#"[{"resource": "configmaps", "verbs": ["get"], "namespaces": ["b", "a", "b"]},
                {"resource": "pods", "verbs": ["get"], "namespaces": []}]"#,
        );
        let yaml = node(&[PluginRules {
            plugin: "p",
            rules: &r,
        }])
        .unwrap();
        assert!(!yaml.contains("kind: ClusterRole"), "{yaml}");
        assert!(
            !yaml.contains("pods"),
            "no namespace at all grants nothing: {yaml}"
        );
        let namespaces: Vec<&str> = body(&yaml)
            .iter()
            .filter_map(|l| l.strip_prefix("  namespace: "))
            .collect();
        assert_eq!(
            namespaces,
            ["\"a\"", "\"a\"", "\"b\"", "\"b\""],
            "a Role and a RoleBinding each, sorted"
        );
        assert_eq!(yaml.matches("kind: RoleBinding").count(), 2);
    }

    #[test]
    fn rules_merge_and_wider_rules_absorb_narrower_ones() {
        let a = rules(
            r#"[{"resource": "nodes", "verbs": ["get"]},
                {"resource": "configmaps", "verbs": ["get", "patch"], "namespaces": ["x"], "names": ["c"]}]"#,
        );
        let b = rules(
            r#"[{"resource": "nodes", "verbs": ["get", "patch"], "names": ["n1"]},
                {"resource": "configmaps", "verbs": ["get"]},
                {"resource": "nodes", "verbs": ["delete"]}]"#,
        );
        let yaml = node(&[
            PluginRules {
                plugin: "a",
                rules: &a,
            },
            PluginRules {
                plugin: "b",
                rules: &b,
            },
        ])
        .unwrap();
        // configmaps get everywhere covers x/c's get; its patch stays in x.
        assert_eq!(
            lists(&yaml, "resources"),
            [
                vec!["configmaps"],
                vec!["nodes"],
                vec!["nodes"],
                vec!["configmaps"]
            ],
            "{yaml}"
        );
        assert_eq!(
            lists(&yaml, "verbs"),
            [
                vec!["get"],
                vec!["get", "delete"],
                vec!["patch"],
                vec!["patch"]
            ],
            "{yaml}"
        );
        assert_eq!(
            lists(&yaml, "resourceNames"),
            [vec!["n1"], vec!["c"]],
            "{yaml}"
        );
        assert!(yaml.contains("# plugins: a, b\n  - apiGroups: [\"\"]\n    resources: [\"nodes\"]\n    verbs: [\"get\", \"delete\"]"), "{yaml}");
        // A rule wholly covered leaves nothing behind.
        let c = rules(
            r#"[{"resource": "nodes", "verbs": ["get"], "names": ["n1"], "namespaces": ["x"]}]"#,
        );
        let yaml = node(&[
            PluginRules {
                plugin: "a",
                rules: &a,
            },
            PluginRules {
                plugin: "c",
                rules: &c,
            },
        ])
        .unwrap();
        assert_eq!(yaml.matches("\nkind: Role\n").count(), 1, "{yaml}");
        assert!(yaml.contains("# plugins: a, c\n"), "{yaml}");
    }

    #[test]
    fn output_is_deterministic_whatever_the_input_order() {
        let a = rules(
            r#"[{"resource": "pods", "verbs": ["watch", "get"], "namespaces": ["z", "y"]},
                {"group": "apps", "resource": "daemonsets", "verbs": ["patch", "get"], "names": ["q", "p"]}]"#,
        );
        let b = rules(r#"[{"resource": "nodes", "verbs": ["patch", "get"], "names": ["$NODE"]}]"#);
        let one = node(&[
            PluginRules {
                plugin: "a",
                rules: &a,
            },
            PluginRules {
                plugin: "b",
                rules: &b,
            },
        ])
        .unwrap();
        let mut a_reversed = a.clone();
        a_reversed.reverse();
        let two = node(&[
            PluginRules {
                plugin: "b",
                rules: &b,
            },
            PluginRules {
                plugin: "a",
                rules: &a_reversed,
            },
        ])
        .unwrap();
        assert_eq!(one, two);
    }

    #[test]
    fn yaml_special_names_are_quoted_and_read_back_unchanged() {
        let names = [
            "a: b",
            "#c",
            "'d'",
            "\"e\"",
            "- f",
            "[g]",
            "{h}",
            "&i",
            "!k",
            "|l",
            ">m",
            "@o",
            "`p",
            "yes",
            "null",
            "~",
            "1e3",
            "0o17",
            " lead",
            "trail ",
            "back\\slash",
            "x, y",
            "? q",
            "---",
            "...",
        ];
        let json = serde_json::to_string(&names).unwrap();
        let r = rules(&format!(
            r#"[{{"resource": "configmaps", "verbs": ["get"], "namespaces": ["ns"], "names": {json}}}]"#
        ));
        let yaml = node(&[PluginRules {
            plugin: "p",
            rules: &r,
        }])
        .unwrap();
        let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        expected.sort();
        assert_eq!(lists(&yaml, "resourceNames"), [expected]);
        // Every non-comment line is a known key or a document marker.
        for line in body(&yaml) {
            let key = line
                .trim_start()
                .trim_start_matches("- ")
                .split(':')
                .next()
                .unwrap();
            assert!(
                line == "---"
                    || [
                        "apiVersion",
                        "kind",
                        "metadata",
                        "name",
                        "namespace",
                        "labels",
                        "app.kubernetes.io/part-of",
                        "app.kubernetes.io/component",
                        "rules",
                        "apiGroups",
                        "resources",
                        "resourceNames",
                        "verbs",
                        "roleRef",
                        "apiGroup",
                        "subjects",
                    ]
                    .contains(&key),
                "{line:?} in\n{yaml}"
            );
        }
    }

    #[test]
    fn no_wildcard_can_come_out_of_a_grant() {
        // The config refuses them while parsing...
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(r#"[{"resource": "*", "verbs": ["get"]}]"#)
                .is_err()
        );
        assert!(
            serde_json::from_str::<Vec<KubeRule>>(r#"[{"resource": "nodes", "verbs": ["*"]}]"#)
                .is_err()
        );
        // ...and rules built any other way are refused here.
        let hostile = |rule: KubeRule| {
            let rules = [rule];
            node(&[PluginRules {
                plugin: "evil",
                rules: &rules,
            }])
        };
        let base = KubeRule {
            resource: "nodes".into(),
            verbs: vec![Verb::Get],
            ..KubeRule::default()
        };
        for (rule, expected) in [
            (
                KubeRule {
                    resource: "*".into(),
                    ..base.clone()
                },
                "resource \"*\"",
            ),
            (
                KubeRule {
                    resource: "nodes/*".into(),
                    ..base.clone()
                },
                "resource \"nodes/*\"",
            ),
            (
                KubeRule {
                    resource: "a/b/c".into(),
                    ..base.clone()
                },
                "resource \"a/b/c\"",
            ),
            (
                KubeRule {
                    resource: "".into(),
                    ..base.clone()
                },
                "resource \"\"",
            ),
            (
                KubeRule {
                    group: "*".into(),
                    ..base.clone()
                },
                "group \"*\"",
            ),
            (
                KubeRule {
                    group: "apps\n- x".into(),
                    ..base.clone()
                },
                "group \"apps?- x\"",
            ),
            (
                KubeRule {
                    namespaces: Some(vec!["*".into()]),
                    ..base.clone()
                },
                "namespace \"*\"",
            ),
            (
                KubeRule {
                    namespaces: Some(vec!["Kube-System".into()]),
                    ..base.clone()
                },
                "namespace \"Kube-System\"",
            ),
            (
                KubeRule {
                    names: Some(vec!["*".into()]),
                    ..base.clone()
                },
                "name \"*\"",
            ),
            (
                KubeRule {
                    names: Some(vec!["a/b".into()]),
                    ..base.clone()
                },
                "name \"a/b\"",
            ),
            (
                KubeRule {
                    names: Some(vec!["..".into()]),
                    ..base.clone()
                },
                "name \"..\"",
            ),
            (
                KubeRule {
                    names: Some(vec!["a\nb".into()]),
                    ..base.clone()
                },
                "name \"a?b\"",
            ),
            (
                KubeRule {
                    names: Some(vec!["caf\u{e9}".into()]),
                    ..base.clone()
                },
                "name \"caf?\"",
            ),
            (
                KubeRule {
                    names: Some(vec![String::new()]),
                    ..base.clone()
                },
                "name \"\"",
            ),
        ] {
            let err = hostile(rule).unwrap_err().0;
            assert!(err.starts_with("[plugins.evil.grants] kube: "), "{err}");
            assert!(err.contains(expected), "{err} should name {expected}");
            assert!(!err.contains('\n'), "{err:?}");
        }
        assert!(hostile(base).is_ok());
    }

    #[test]
    fn service_account_and_lease_are_checked() {
        let input = |sa: Named<'static>, lease: Option<Named<'static>>, scope| {
            render(&Input {
                config: "c",
                scope,
                service_account: sa,
                plugins: &[],
                events: false,
                lease,
            })
        };
        let bad = Named {
            namespace: "tend-system",
            name: "x\"y",
        };
        assert!(
            input(bad, None, Scope::Node)
                .unwrap_err()
                .0
                .contains("ServiceAccount name")
        );
        let bad_ns = Named {
            namespace: "*",
            name: "tend",
        };
        assert!(
            input(bad_ns, None, Scope::Node)
                .unwrap_err()
                .0
                .contains("ServiceAccount namespace")
        );
        let lease = Named {
            namespace: "tend-system",
            name: "tend",
        };
        assert!(
            input(SA, Some(lease), Scope::Node)
                .unwrap_err()
                .0
                .contains("cluster scope")
        );
        let bad_lease = Named {
            namespace: "tend-system",
            name: "a b",
        };
        assert!(
            input(SA, Some(bad_lease), Scope::Cluster)
                .unwrap_err()
                .0
                .contains("[host.leader-election] name")
        );
    }

    #[test]
    fn nothing_to_grant_says_so_and_comments_stay_comments() {
        let yaml = render(&Input {
            config: "evil\n---\nkind: ClusterRole\n.toml",
            scope: Scope::Node,
            service_account: SA,
            plugins: &[],
            events: false,
            lease: None,
        })
        .unwrap();
        assert!(yaml.lines().all(|l| l.starts_with('#')), "{yaml}");
        assert!(yaml.contains("Nothing to grant"), "{yaml}");
        // A plugin name with a newline (the config refuses it) stays in its comment.
        let r = rules(r#"[{"resource": "nodes", "verbs": ["get"]}]"#);
        let yaml = node(&[PluginRules {
            plugin: "p\n- apiGroups: [\"*\"]",
            rules: &r,
        }])
        .unwrap();
        assert!(!body(&yaml).iter().any(|l| l.contains('*')), "{yaml}");
        assert_eq!(lists(&yaml, "apiGroups"), [[""]]);
    }
}
