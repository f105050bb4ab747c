//! Which RBAC rules the kube grants of one scope's plugins need: the pure
//! part of `tend rbac`, kept apart from the k8s-openapi objects and the YAML
//! they become (the parent module). Only `tend rbac` needs it, so it lives in
//! the host, not in the rules crate every plugin builds.
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
//!   cover, whatever RBAC allows. Every rule left wider than its grant carries
//!   a [`Note`] saying so.
//! - Rules are merged per (group, resource, resourceNames), verbs a wider rule
//!   already allows are dropped, and everything is sorted.
//! - Every string that comes from the config is checked: no `*` can come out
//!   of a grant.

use crate::config::Scope;
use std::collections::{BTreeMap, BTreeSet};
use tend_rules::kube::{KubeRule, NODE, Verb};

/// How the comments name a scope.
pub(super) fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Node => "node",
        Scope::Cluster => "cluster",
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
    /// Node scope: `[host.fleet]`, whose Leases, Nodes and other
    /// remediators' objects every tend reads (and its Leases writes).
    pub fleet: Option<&'a crate::fleet::settings::FleetSettings>,
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
pub(super) enum RbacVerb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl RbacVerb {
    pub(super) fn name(self) -> &'static str {
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
pub(super) enum Why {
    Plugin(String),
    Events,
    Lease,
    Fleet,
}

/// Why a rule is wider than the grant it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Note {
    /// `names = ["$NODE"]`.
    OwnNode,
    /// list/watch of a grant with names.
    ListsWhole,
    /// create of a grant with names.
    CreateUnnamed,
    /// create of the leader-election Lease.
    LeaseCreate,
    /// A grant with `fields`: RBAC grants patch of the whole object.
    Fields,
    /// A grant with a label or field selector.
    Selectors,
    /// get the grant lacks: the host reads the object before a patch.
    HostReads,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RuleKey {
    pub(super) group: String,
    pub(super) resource: String,
    /// None: any name.
    pub(super) names: Option<BTreeSet<String>>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Entry {
    pub(super) verbs: BTreeSet<RbacVerb>,
    pub(super) why: BTreeSet<Why>,
    pub(super) notes: BTreeSet<Note>,
}

/// Rules by where they apply: None is cluster-wide (sorts first), else a namespace.
pub(super) type Rules = BTreeMap<Option<String>, BTreeMap<RuleKey, Entry>>;

fn add(
    rules: &mut Rules,
    namespace: Option<&str>,
    key: RuleKey,
    verbs: impl IntoIterator<Item = RbacVerb>,
    why: &Why,
    notes: impl IntoIterator<Item = Note>,
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
    entry.notes.extend(notes);
}

/// The RBAC rules `input` needs, by namespace (None: cluster-wide, first).
pub(super) fn rules(input: &Input) -> Result<Rules, RbacError> {
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
        let judges_rollouts = input.fleet.is_some_and(|f| f.rollout.is_some());
        if input.scope == Scope::Node && !judges_rollouts {
            return Err(RbacError(
                "a leader-election Lease is for cluster scope: node scope runs on every node (but with [host.fleet.rollout], where every node's tend takes part in the election)"
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
    if let Some(fleet) = input.fleet {
        fleet_rules(&mut rules, fleet)?;
    }
    drop_covered(&mut rules);
    Ok(rules)
}

/// `[host.fleet]`: its Leases in its namespace (the ledgers and node
/// Leases: read, listed, created and written), every Node (listed, and its
/// own read for the settle check), kured's DaemonSet and Medik8s' objects.
fn fleet_rules(
    rules: &mut Rules,
    fleet: &crate::fleet::settings::FleetSettings,
) -> Result<(), RbacError> {
    check_label("[host.fleet] namespace", &fleet.namespace)?;
    let key = |group: &str, resource: &str, names: Option<BTreeSet<String>>| RuleKey {
        group: group.into(),
        resource: resource.into(),
        names,
    };
    use RbacVerb::*;
    add(
        rules,
        Some(&fleet.namespace),
        key("coordination.k8s.io", "leases", None),
        [Get, List, Create, Update, Patch],
        &Why::Fleet,
        None,
    );
    if fleet.rollout.is_some() {
        // Every node watches the rollout Lease (RBAC cannot narrow a
        // watch of a collection by name; a field selector does).
        add(
            rules,
            Some(&fleet.namespace),
            key("coordination.k8s.io", "leases", None),
            [Watch],
            &Why::Fleet,
            None,
        );
    }
    add(
        rules,
        None,
        key("", "nodes", None),
        [Get, List],
        &Why::Fleet,
        None,
    );
    if let Some((namespace, name)) = &fleet.kured {
        check_label("[host.fleet] kured namespace", namespace)?;
        check_subdomain("[host.fleet] kured name", name)?;
        add(
            rules,
            Some(namespace),
            key("apps", "daemonsets", Some(BTreeSet::from([name.clone()]))),
            [Get],
            &Why::Fleet,
            None,
        );
    }
    if fleet.medik8s {
        for (group, resource) in [
            ("self-node-remediation.medik8s.io", "selfnoderemediations"),
            ("nodemaintenance.medik8s.io", "nodemaintenances"),
        ] {
            add(
                rules,
                None,
                key(group, resource, None),
                [List],
                &Why::Fleet,
                None,
            );
        }
    }
    Ok(())
}

/// Whether the host reads the object itself (`get`, as tend's own account)
/// for a call this rule allows: before every patch, for the plan's diff
/// against the API server's dry run; before a patch or delete that only
/// selectors allow, since only the object shows it matches them.
fn host_reads(rule: &KubeRule, selects: bool) -> bool {
    rule.verbs.contains(&Verb::Patch) || (selects && rule.verbs.contains(&Verb::Delete))
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
    let mut verbs: BTreeSet<RbacVerb> = rule
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
    // What RBAC cannot express, said on every rule this grant becomes.
    let mut extra = Vec::new();
    if rule.fields.is_some() && rule.verbs.contains(&Verb::Patch) {
        extra.push(Note::Fields);
    }
    let selects = rule.label_selector.is_some() || rule.field_selector.is_some();
    if selects {
        extra.push(Note::Selectors);
    }
    if host_reads(rule, selects) && verbs.insert(RbacVerb::Get) {
        extra.push(Note::HostReads);
    }
    for ns in namespaces {
        match &rule.names {
            None => add(
                rules,
                ns,
                key(None),
                verbs.iter().copied(),
                &why,
                extra.clone(),
            ),
            // The node tend runs on: one role serves every node.
            Some(names) if names.iter().any(|n| n == NODE) => {
                add(
                    rules,
                    ns,
                    key(None),
                    verbs.iter().copied(),
                    &why,
                    extra.iter().copied().chain([Note::OwnNode]),
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
                add(
                    rules,
                    ns,
                    key(None),
                    lists,
                    &why,
                    extra.iter().copied().chain([Note::ListsWhole]),
                );
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
                    extra.clone(),
                );
                for (verb, note) in [
                    (RbacVerb::List, Note::ListsWhole),
                    (RbacVerb::Watch, Note::ListsWhole),
                    (RbacVerb::Create, Note::CreateUnnamed),
                ] {
                    if verbs.contains(&verb) {
                        add(
                            rules,
                            ns,
                            key(None),
                            [verb],
                            &why,
                            extra.iter().copied().chain([note]),
                        );
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
    RbacError(format!("{what} {:?}: {expected}", inert(value)))
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
/// control characters (YAML-special characters are fine: the serializer quotes them).
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

/// Text for a comment or message: printable ASCII only, everything else `?`,
/// so no newline can end a comment early.
pub(super) fn inert(text: &str) -> String {
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

pub(super) fn note_text(note: Note, scope: Scope) -> &'static str {
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
        (Note::Fields, _) => {
            "fields: RBAC grants patch of the whole object; the grant narrows patch to the rule's field paths (tend checks every patch body)."
        }
        (Note::Selectors, _) => {
            "label-selector/field-selector: RBAC cannot narrow by selector; the grant narrows lists, watches and calls by name to the selected objects."
        }
        (Note::HostReads, _) => {
            "get: the grant has none, but the host reads the object itself before a patch (a plan's diff against the API server's dry run) and before a patch or delete that only selectors allow; the grant still refuses the plugin's own get."
        }
        (Note::CreateUnnamed, _) => {
            "create: RBAC cannot narrow create by name (the name is in the request body): not narrowed by name here; the grant narrows it."
        }
    }
}

pub(super) fn why_lines(why: &BTreeSet<Why>, lease: Option<Named>) -> Vec<String> {
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
    if why.contains(&Why::Fleet) {
        lines.push(
            "tend: the fleet's disruption budgets ([host.fleet]): its ledger and node Leases, the Nodes it counts, the other remediators it respects"
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
