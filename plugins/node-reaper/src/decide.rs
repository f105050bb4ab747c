//! The decision of one pass, with no I/O: which instances are registered,
//! which are candidates, which breakers are open, what may be deleted now,
//! and what to remember. Pure and linear (hash maps by instance ID, name and
//! IP), so a benchmark can drive it natively with 10,000 instances and Nodes.

use crate::nodes::NodeInfo;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use tend_sdk::{Instance, InstanceState, OwnerTag};

/// What the decision is told by the config.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The cluster's ownership tag: only instances carrying it are judged.
    pub owner: OwnerTag,
    pub registration_timeout_ms: u64,
    /// The tag naming an instance's pool; without it, one pool ("").
    pub pool_tag: Option<String>,
    /// Registration timeouts of pools, by the pool tag's value.
    pub pool_timeouts_ms: HashMap<String, u64>,
    pub error_grace_ms: u64,
    /// Delete errored instances even when they once were Nodes.
    pub delete_errored_all: bool,
    /// An instance that was once a Node becomes a candidate only after its
    /// Node has been gone this long (None: its pool's registration timeout).
    pub lost_node_grace_ms: Option<u64>,
    /// A candidate must have been one this long, over two passes at least.
    pub confirm_after_ms: u64,
    pub max_fraction: f64,
    pub min_breaker_candidates: usize,
    pub max_not_ready: f64,
    pub max_deletions_per_pass: usize,
    pub protect_tag: String,
    /// The operator's reset token: a new value clears the latched breakers.
    pub breaker_reset: String,
    /// Recent launches remembered per pool for the churn guard.
    pub churn_window: usize,
    /// Failed registrations among them that trip it (when most failed).
    pub churn_min_failures: usize,
    /// Act on a Node's request to replace its instance (node-remediator's
    /// last step): delete the instance its `spec.providerID` names.
    pub replace_requests: bool,
    /// Report mode: nothing is deleted, so nothing is in flight and no cap
    /// applies; every confirmed candidate the breakers let through is one it
    /// would delete, so that a report vets them all.
    pub report_only: bool,
}

impl Policy {
    /// The defaults of the config, for the cluster `owner` (enforcing: the
    /// decision of a pass that may delete).
    pub fn new(owner: OwnerTag) -> Self {
        Policy {
            owner,
            registration_timeout_ms: 20 * MINUTE,
            pool_tag: None,
            pool_timeouts_ms: HashMap::new(),
            error_grace_ms: 5 * MINUTE,
            delete_errored_all: false,
            lost_node_grace_ms: None,
            confirm_after_ms: MINUTE,
            max_fraction: 0.5,
            min_breaker_candidates: 3,
            max_not_ready: 0.5,
            max_deletions_per_pass: 1,
            protect_tag: "tend.dev/protect".into(),
            breaker_reset: String::new(),
            churn_window: 6,
            churn_min_failures: 3,
            replace_requests: false,
            report_only: false,
        }
    }

    fn pool_of<'a>(&self, instance: &'a Instance) -> &'a str {
        let tag = self.pool_tag.as_deref();
        tag.and_then(|key| instance.tag(key)).unwrap_or_default()
    }

    fn timeout_ms(&self, pool: &str) -> u64 {
        let timeout = self.pool_timeouts_ms.get(pool);
        timeout.copied().unwrap_or(self.registration_timeout_ms)
    }

    fn lost_node_grace_ms(&self, pool: &str) -> u64 {
        (self.lost_node_grace_ms).unwrap_or_else(|| self.timeout_ms(pool))
    }
}

const MINUTE: u64 = 60_000;

/// The most instances without a Node whose clocks are remembered (about
/// 55 bytes each in state): one beyond them has its clock start anew each
/// pass, so it waits (never the other way round).
pub const MAX_ABSENT: usize = 4096;

/// What the plugin remembers between passes (one JSON value in `state`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Memory {
    /// When the Node listing last succeeded after failing (or first
    /// succeeded): registration timeouts count from no earlier.
    pub api_healthy_since_ms: Option<u64>,
    /// When the Node listing started failing, while it fails.
    pub api_down_since_ms: Option<u64>,
    /// Running or pending instances without a Node, by ID: the first pass
    /// that saw them so, since the last start or leader change. Timeouts
    /// count from it, never from the cloud's clock alone.
    pub absent_since: BTreeMap<String, u64>,
    /// Candidates of the last pass, by instance ID: when first seen as one.
    pub candidates: BTreeMap<String, u64>,
    /// Instances in error, by ID: when first seen so.
    pub errored_since: BTreeMap<String, u64>,
    /// Listed instances that were ever matched to a Node.
    #[serde(deserialize_with = "set_from_sorted_list")]
    pub ever_matched: BTreeSet<String>,
    /// The deletion in flight of each pool.
    pub in_flight: BTreeMap<String, InFlight>,
    /// Each pool's most recent launches, newest first: the churn guard's view.
    pub launches: BTreeMap<String, Vec<Launch>>,
    /// Latched breakers ("max-fraction", "churn:<pool>"), open until the
    /// operator changes `breaker-reset`.
    pub latched: BTreeMap<String, Latch>,
    /// The `breaker-reset` the latches were set under.
    pub breaker_reset: String,
}

/// A set read back from the list it was stored as, built in one pass: a
/// `BTreeSet` serializes in order, and collecting a sorted list builds the
/// tree without the search serde's own impl does per element (10,000 IDs with
/// a long common prefix, compared byte by byte in the guest: a tenth of a
/// 10,000-instance pass). The set is the same whatever the order.
fn set_from_sorted_list<'de, D>(list: D) -> Result<BTreeSet<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Vec::<String>::deserialize(list).map(BTreeSet::from_iter)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct InFlight {
    pub id: String,
    pub since_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Launch {
    pub id: String,
    pub created_at_ms: i64,
    pub registered: bool,
}

/// `str`'s order, compared eight bytes at a time. The guest's `memcmp`
/// (wasi-libc's) goes byte by byte, and instance IDs share long prefixes
/// (`i-0` and a dozen zeros): sorting 10,000 of them spent an eighth of a pass
/// there. Big-endian words compare as their bytes do.
fn in_str_order(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let word = |bytes: &[u8]| u64::from_be_bytes(bytes.try_into().expect("chunks of 8"));
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        match word(x).cmp(&word(y)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
    }
    let compared = a.len().min(b.len()) / 8 * 8;
    a[compared..].iter().cmp(&b[compared..])
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Latch {
    pub since_ms: u64,
    pub why: String,
}

/// The Node listing of this pass: listing the cloud came first.
pub enum Nodes<'a> {
    Listed(&'a [NodeInfo]),
    /// Any error of the listing (an unsynced or failing watch answers
    /// `unavailable`), with its message.
    Failed(&'a str),
}

/// When the pass runs and whether it is the first after a start or a
/// leader change (which never deletes).
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    pub now_ms: u64,
    pub first: bool,
}

/// Which key matched an instance to a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    ProviderId,
    Name,
    InternalIp,
}

/// Why an instance is a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Running or pending and no Node after its registration timeout.
    RegistrationTimeout,
    /// Once a Node, and its Node gone for the lost-node grace.
    NodeLost,
    /// In error past the grace, and never a Node (or `delete-errored = "all"`).
    Errored,
    /// Its Node, named by `spec.providerID`, asks to be replaced.
    ReplaceRequested,
}

impl Why {
    /// The `reason` label of the deletions counter.
    pub fn label(self) -> &'static str {
        match self {
            Why::RegistrationTimeout => "registration_timeout",
            Why::NodeLost => "node_lost",
            Why::Errored => "error",
            Why::ReplaceRequested => "replace_requested",
        }
    }
}

/// A breaker: while one is open, nothing (or nothing in its pool) is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BreakerKind {
    NodeListing,
    NoNodes,
    NotReady,
    MaxFraction,
    /// Per pool: most recent registrations there failed.
    Churn,
    /// The listing named an instance more than once: it contradicts itself
    /// (pages that shifted may also have lost instances, so no fraction
    /// drawn from it holds). Open for that pass only.
    DuplicateListing,
}

impl BreakerKind {
    pub const ALL: [BreakerKind; 6] = [
        BreakerKind::NodeListing,
        BreakerKind::NoNodes,
        BreakerKind::NotReady,
        BreakerKind::MaxFraction,
        BreakerKind::Churn,
        BreakerKind::DuplicateListing,
    ];

    /// Its name in messages and the `breaker` label.
    pub fn name(self) -> &'static str {
        match self {
            BreakerKind::NodeListing => "node_listing",
            BreakerKind::NoNodes => "no_nodes",
            BreakerKind::NotReady => "not_ready",
            BreakerKind::MaxFraction => "max_fraction",
            BreakerKind::Churn => "churn",
            BreakerKind::DuplicateListing => "duplicate_listing",
        }
    }
}

/// An open breaker and why, for the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    pub kind: BreakerKind,
    pub detail: String,
}

/// Why a candidate is not deleted this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The first pass after a start or a leader change only looks.
    FirstPass,
    /// Seen as a candidate for less than `confirm-after` (or only now).
    Unconfirmed {
        left_ms: u64,
    },
    /// It carries the protect tag.
    Protected,
    Breaker(BreakerKind),
    /// Its pool's previous victim (this ID) is not gone yet.
    InFlight(String),
    /// The per-pass cap is reached.
    Cap,
    /// The host's budget refused a deletion this pass (set by the caller).
    Budget,
    /// Its Node asks to be replaced but is schedulable: not drained.
    NotCordoned,
}

impl Skip {
    /// Its name in counts and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Skip::FirstPass => "first pass",
            Skip::Unconfirmed { .. } => "unconfirmed",
            Skip::Protected => "protected",
            Skip::Breaker(_) => "breaker",
            Skip::InFlight(_) => "in flight",
            Skip::Cap => "cap",
            Skip::Budget => "budget",
            Skip::NotCordoned => "not cordoned",
        }
    }
}

/// What the pass makes of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A Node matches it: kept.
    Registered(MatchedBy),
    /// Unregistered (or errored) and still within its timeout (grace).
    Young {
        why: Why,
        left_ms: u64,
    },
    /// Deleting, terminated, rebooting, stopped by an operator or in a state
    /// the provider's words do not say: left alone.
    Skipped(InstanceState),
    /// In error, but once a Node: reported, not deleted.
    ErroredOnceRegistered,
    Candidate {
        why: Why,
        skip: Skip,
    },
    Delete {
        why: Why,
    },
}

/// The cluster's instances, each ID once: the first of the listing's
/// entries for it.
struct Owned<'a> {
    /// In listing order, with their index into the listing.
    listed: Vec<(usize, &'a Instance)>,
    by_id: HashMap<&'a str, &'a Instance>,
    /// The IDs the listing named again.
    duplicates: BTreeSet<&'a str>,
}

fn owned_once<'a>(policy: &Policy, instances: &'a [Instance]) -> Owned<'a> {
    let mut owned = Owned {
        listed: Vec::with_capacity(instances.len()),
        by_id: HashMap::with_capacity(instances.len()),
        duplicates: BTreeSet::new(),
    };
    for (at, instance) in instances.iter().enumerate() {
        if !instance.is_owned_by(&policy.owner) {
            continue;
        }
        match owned.by_id.entry(instance.id.as_str()) {
            Entry::Vacant(first) => {
                first.insert(instance);
                owned.listed.push((at, instance));
            }
            Entry::Occupied(_) => {
                owned.duplicates.insert(instance.id.as_str());
            }
        }
    }
    owned
}

/// The duplicate-listing breaker's detail: how many, the first few IDs.
fn duplicated(ids: &BTreeSet<&str>) -> String {
    const SHOWN: usize = 5;
    let mut shown: Vec<&str> = ids.iter().take(SHOWN).copied().collect();
    if ids.len() > SHOWN {
        shown.push("...");
    }
    format!(
        "the instance listing names {} instance(s) more than once ({}): each counted once, none deleted while the listing contradicts itself",
        ids.len(),
        shown.join(", ")
    )
}

/// One instance's verdict: `index` into the instances given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub index: usize,
    pub pool: String,
    pub action: Action,
}

/// Instances by what they are, for the `instances` gauge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub registered: usize,
    /// Unregistered, within their registration timeout.
    pub unregistered: usize,
    /// Unregistered past their registration timeout.
    pub long_unregistered: usize,
    pub error: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// One per owned instance, in the order given; none when the Node
    /// listing failed.
    pub verdicts: Vec<Verdict>,
    pub counts: Counts,
    /// Open breakers (churn once per pool).
    pub breakers: Vec<Breaker>,
    pub memory: Memory,
    /// The cluster's instances listed, each ID once.
    pub instances: usize,
    /// When something waiting becomes due (a timeout, a confirmation).
    pub next_due_in_ms: Option<u64>,
    /// Instances without a Node beyond [`MAX_ABSENT`]: their clocks wait.
    pub untracked: usize,
}

/// The Nodes by every key an instance can match them by.
struct NodeIndex<'a> {
    by_instance_id: HashSet<&'a str>,
    by_name: HashSet<&'a str>,
    by_ip: HashSet<&'a str>,
    /// Instances whose Node asks to replace them, by the ID its
    /// `spec.providerID` names, when no other Node names that ID: the Node
    /// asking. (Never by a name or an address alone: a deletion asked for
    /// must name its instance exactly.)
    replacing: HashMap<&'a str, &'a NodeInfo>,
}

impl<'a> NodeIndex<'a> {
    fn new(nodes: &'a [NodeInfo]) -> Self {
        NodeIndex {
            by_instance_id: sized(nodes, nodes.iter().filter_map(|n| n.instance_id.as_deref())),
            by_name: sized(nodes, nodes.iter().map(|n| n.name.as_str())),
            by_ip: sized(
                nodes,
                (nodes.iter()).flat_map(|n| n.internal_ips.iter().map(String::as_str)),
            ),
            replacing: asking_alone(nodes),
        }
    }

    /// The provider ID first, then the name, then an InternalIP: any match
    /// keeps the instance, so extra keys only ever protect.
    fn matches(&self, instance: &Instance) -> Option<MatchedBy> {
        if self.by_instance_id.contains(instance.id.as_str()) {
            Some(MatchedBy::ProviderId)
        } else if self.by_name.contains(instance.name.as_str()) {
            Some(MatchedBy::Name)
        } else if (instance.private_addresses.iter()).any(|ip| self.by_ip.contains(ip.as_str())) {
            Some(MatchedBy::InternalIp)
        } else {
            None
        }
    }
}

/// A set sized for one key per Node up front: grown as filled, it hashed
/// every key again at each doubling.
fn sized<'a>(nodes: &[NodeInfo], keys: impl Iterator<Item = &'a str>) -> HashSet<&'a str> {
    let mut set = HashSet::with_capacity(nodes.len());
    set.extend(keys);
    set
}

/// The Nodes asking for their instance's replacement, by the instance ID
/// each names, but for an ID two Nodes name (one of them is lying).
fn asking_alone(nodes: &[NodeInfo]) -> HashMap<&str, &NodeInfo> {
    let mut asking: HashMap<&str, &NodeInfo> = (nodes.iter())
        .filter(|n| n.replace_requested)
        .filter_map(|n| Some((n.instance_id.as_deref()?, n)))
        .collect();
    if asking.is_empty() {
        return asking;
    }
    let mut named: HashMap<&str, usize> = HashMap::new();
    for id in nodes.iter().filter_map(|n| n.instance_id.as_deref()) {
        if asking.contains_key(id) {
            *named.entry(id).or_default() += 1;
        }
    }
    asking.retain(|id, _| named.get(id) == Some(&1));
    asking
}

/// Whether `node` is `instance`'s by more than its provider ID: its name or
/// one of its addresses too (a Node made with a forged provider ID names
/// another's instance, not its name or address).
fn agrees(node: &NodeInfo, instance: &Instance) -> bool {
    node.name == instance.name
        || (node.internal_ips.iter()).any(|ip| instance.private_addresses.contains(ip))
}

/// Judge every instance of the cluster against the Nodes, once.
pub fn decide(
    policy: &Policy,
    memory: &Memory,
    instances: &[Instance],
    nodes: Nodes,
    pass: Pass,
) -> Decision {
    let now = pass.now_ms;
    let nodes = match nodes {
        Nodes::Listed(nodes) => nodes,
        Nodes::Failed(why) => {
            let owned = owned_once(policy, instances).listed.len();
            return listing_failed(memory, why, now, owned);
        }
    };
    let Owned {
        listed: owned,
        by_id,
        duplicates,
    } = owned_once(policy, instances);
    let mut next = carried_over(policy, memory, now, &by_id);
    let judge = Judge {
        policy,
        memory,
        index: NodeIndex::new(nodes),
        now,
        healthy_since: next.api_healthy_since_ms.unwrap_or(now),
    };
    let mut absences = Absences::new(memory, pass, &by_id);
    let mut judged = Judged::default();
    for &(at, instance) in &owned {
        judge.instance(at, instance, &mut absences, &mut next, &mut judged);
    }
    let cluster = owned.iter().filter(|(_, i)| live(i)).count();
    // Sorted here, the set's own sort of what it collects (each ID once: the
    // listing's are) finds one run and compares each pair once.
    judged
        .ever_matched
        .sort_unstable_by(|a, b| in_str_order(a, b));
    next.ever_matched = (judged.ever_matched.drain(..)).map(String::from).collect();
    let launches = std::mem::take(&mut judged.launches);
    next.launches = merge_launches(&memory.launches, launches, policy.churn_window);
    let breakers = open_breakers(policy, &mut next, nodes, &duplicates, cluster, &judged, now);
    choose_deletions(
        policy,
        memory,
        &mut next,
        pass,
        instances,
        &breakers,
        &mut judged,
    );
    Decision {
        verdicts: judged.verdicts,
        counts: judged.counts,
        breakers,
        memory: next,
        instances: owned.len(),
        next_due_in_ms: judged.due.into_iter().min(),
        untracked: absences.untracked,
    }
}

/// An instance that still exists (a terminated one is gone soon).
fn live(instance: &Instance) -> bool {
    instance.state != InstanceState::Terminated
}

/// An instance a replace request can delete: one that runs, starts or
/// failed (one deleting, stopped by an operator or in an unknown state is
/// left alone, as everywhere).
fn replaceable(instance: &Instance) -> bool {
    matches!(
        instance.state,
        InstanceState::Running | InstanceState::Pending | InstanceState::Error
    )
}

/// What this pass keeps of the last one before judging: the API's health
/// (healthy again after an outage it saw: timeouts restart there; with no
/// outage ever seen, creation times count as they are), the latched breakers
/// while `breaker-reset` is unchanged, and deletions in flight of instances
/// still live.
fn carried_over(
    policy: &Policy,
    memory: &Memory,
    now: u64,
    by_id: &HashMap<&str, &Instance>,
) -> Memory {
    let mut next = Memory {
        api_healthy_since_ms: match (memory.api_down_since_ms, memory.api_healthy_since_ms) {
            (None, Some(since)) => Some(since),
            (None, None) => Some(0),
            (Some(_), _) => Some(now),
        },
        api_down_since_ms: None,
        breaker_reset: policy.breaker_reset.clone(),
        latched: match memory.breaker_reset == policy.breaker_reset {
            true => memory.latched.clone(),
            false => BTreeMap::new(),
        },
        ..Memory::default()
    };
    for (pool, flight) in &memory.in_flight {
        if by_id.get(flight.id.as_str()).is_some_and(|i| live(i)) {
            next.in_flight.insert(pool.clone(), flight.clone());
        }
    }
    next
}

/// What judging each instance needs of the pass.
struct Judge<'a> {
    policy: &'a Policy,
    memory: &'a Memory,
    index: NodeIndex<'a>,
    now: u64,
    /// Since when the Node listing has answered: no timeout counts from before.
    healthy_since: u64,
}

/// What judging the instances found.
#[derive(Default)]
struct Judged<'a> {
    verdicts: Vec<Verdict>,
    counts: Counts,
    /// Verdicts (by position) that would delete, and why.
    candidates: Vec<(usize, Why)>,
    /// This pass's launches by pool, for the churn breaker: the instance and
    /// whether it registered (a `Launch` is made only of the few kept).
    launches: BTreeMap<&'a str, Vec<(&'a Instance, bool)>>,
    /// When each thing waiting becomes due, from now.
    due: Vec<u64>,
    /// The IDs of the next memory's `ever_matched`, in listing order: a set
    /// built of them at the end, sorted, costs one sort, where a set grown
    /// one insert at a time searched its nodes for each.
    ever_matched: Vec<&'a str>,
}

impl<'a> Judge<'a> {
    /// One instance's verdict, and what it adds to the counts, candidates,
    /// launches and the next memory.
    fn instance(
        &self,
        at: usize,
        instance: &'a Instance,
        absences: &mut Absences,
        next: &mut Memory,
        judged: &mut Judged<'a>,
    ) {
        let (policy, now) = (self.policy, self.now);
        let pool = policy.pool_of(instance);
        let id = instance.id.as_str();
        let launch = |registered| (instance, registered);
        if let Some(by) = self.index.matches(instance) {
            judged.counts.registered += 1;
            judged.ever_matched.push(id);
            judged.launches.entry(pool).or_default().push(launch(true));
            let action = match self.index.replacing.get(id) {
                Some(node)
                    if policy.replace_requests
                        && replaceable(instance)
                        && agrees(node, instance) =>
                {
                    self.candidate(instance, Why::ReplaceRequested, node.cordoned, judged)
                }
                _ => Action::Registered(by),
            };
            judged.verdicts.push(verdict(at, pool, action));
            return;
        }
        let once_matched = self.memory.ever_matched.contains(id);
        if once_matched {
            judged.ever_matched.push(id);
        }
        let (why, due_ms) = match instance.state {
            InstanceState::Running | InstanceState::Pending => {
                let seen = absences.since(id, now, &mut next.absent_since);
                let seen = seen.max(self.healthy_since);
                no_node_due(policy, pool, instance, once_matched, seen)
            }
            InstanceState::Error => {
                judged.counts.error += 1;
                let since = self.memory.errored_since.get(id).copied().unwrap_or(now);
                next.errored_since.insert(id.to_string(), since);
                if once_matched && !policy.delete_errored_all {
                    let action = Action::ErroredOnceRegistered;
                    judged.verdicts.push(verdict(at, pool, action));
                    return;
                }
                (Why::Errored, since + policy.error_grace_ms)
            }
            state => {
                judged
                    .verdicts
                    .push(verdict(at, pool, Action::Skipped(state)));
                return;
            }
        };
        let timed_out = why != Why::Errored;
        let action = if now < due_ms {
            judged.counts.unregistered += usize::from(timed_out);
            judged.due.push(due_ms - now);
            Action::Young {
                why,
                left_ms: due_ms - now,
            }
        } else {
            judged.counts.long_unregistered += usize::from(timed_out);
            judged
                .launches
                .entry(pool)
                .or_default()
                .push(launch(once_matched));
            self.candidate(instance, why, true, judged)
        };
        judged.verdicts.push(verdict(at, pool, action));
    }

    /// A candidate's action: held when protected or (asked to be replaced)
    /// not cordoned, else to delete if confirmed and let through.
    fn candidate(
        &self,
        instance: &Instance,
        why: Why,
        cordoned: bool,
        judged: &mut Judged<'_>,
    ) -> Action {
        let skip = if instance.tag(&self.policy.protect_tag).is_some() {
            Skip::Protected
        } else if !cordoned {
            Skip::NotCordoned
        } else {
            judged.candidates.push((judged.verdicts.len(), why));
            return Action::Delete { why };
        };
        Action::Candidate { why, skip }
    }
}

/// Every breaker open this pass: a listing with duplicates, no Nodes at all,
/// too many NotReady Nodes, and the latched ones (too large a fraction of
/// candidates, a pool whose launches keep failing), latching new ones in
/// `next`.
fn open_breakers(
    policy: &Policy,
    next: &mut Memory,
    nodes: &[NodeInfo],
    duplicates: &BTreeSet<&str>,
    cluster: usize,
    judged: &Judged,
    now: u64,
) -> Vec<Breaker> {
    let mut breakers = Vec::new();
    let not_ready = nodes.iter().filter(|n| !n.ready).count();
    if !duplicates.is_empty() {
        breakers.push(Breaker {
            kind: BreakerKind::DuplicateListing,
            detail: duplicated(duplicates),
        });
    }
    if nodes.is_empty() && cluster > 0 {
        breakers.push(Breaker {
            kind: BreakerKind::NoNodes,
            detail: format!("the Node listing is empty while {cluster} instance(s) exist"),
        });
    }
    // Only Nodes count: an instance that never registered is not an
    // unhealthy Node, so this breaker cannot block its own repair.
    if !nodes.is_empty() && not_ready as f64 > policy.max_not_ready * nodes.len() as f64 {
        breakers.push(Breaker {
            kind: BreakerKind::NotReady,
            detail: format!(
                "{not_ready} of {} Node(s) are NotReady, over max-not-ready = {}",
                nodes.len(),
                policy.max_not_ready
            ),
        });
    }
    latch_fraction(policy, next, judged.candidates.len(), cluster, now);
    latch_churn(policy, next, now);
    for (key, latch) in &next.latched {
        let kind = match key.as_str() {
            MAX_FRACTION => BreakerKind::MaxFraction,
            _ => BreakerKind::Churn,
        };
        breakers.push(Breaker {
            kind,
            detail: format!("{} (latched; change breaker-reset to clear)", latch.why),
        });
    }
    breakers
}

/// Latch the fraction breaker when more than `max-fraction` of the cluster
/// (and more than `min-breaker-candidates`) would be deleted.
fn latch_fraction(policy: &Policy, next: &mut Memory, candidates: usize, cluster: usize, now: u64) {
    let tripped = candidates > policy.min_breaker_candidates
        && candidates as f64 > policy.max_fraction * cluster as f64;
    if tripped && !next.latched.contains_key(MAX_FRACTION) {
        let why = format!(
            "{candidates} candidate(s) of {cluster} instance(s), over max-fraction = {}",
            policy.max_fraction
        );
        next.latched
            .insert(MAX_FRACTION.into(), Latch { since_ms: now, why });
    }
}

/// Latch a pool's churn breaker when most of its recent launches (at least
/// `churn-min-failures`) never registered.
fn latch_churn(policy: &Policy, next: &mut Memory, now: u64) {
    for (pool, recent) in &next.launches {
        let failed = recent.iter().filter(|l| !l.registered).count();
        let key = churn_key(pool);
        if failed >= policy.churn_min_failures
            && failed * 2 > recent.len()
            && !next.latched.contains_key(&key)
        {
            let why = format!(
                "{failed} of the {} most recent launches in pool {} never registered",
                recent.len(),
                shown_pool(pool)
            );
            next.latched.insert(key, Latch { since_ms: now, why });
        }
    }
}

/// Which candidates are deleted this pass, oldest first: a candidate is held
/// back until confirmed on a later pass, by a breaker, by a deletion still in
/// flight in its pool, or by the cap per pass; at most one per pool.
fn choose_deletions(
    policy: &Policy,
    memory: &Memory,
    next: &mut Memory,
    pass: Pass,
    instances: &[Instance],
    breakers: &[Breaker],
    judged: &mut Judged,
) {
    let now = pass.now_ms;
    let global = (breakers.iter())
        .find(|b| b.kind != BreakerKind::Churn)
        .map(|b| b.kind);
    let mut candidates = std::mem::take(&mut judged.candidates);
    let verdicts = &mut judged.verdicts;
    candidates.sort_by_key(|(v, _)| instances[verdicts[*v].index].created_at_ms);
    let seen = match pass.first {
        true => &BTreeMap::new(),
        false => &memory.candidates,
    };
    let mut taken: HashMap<String, String> = HashMap::new();
    for (v, why) in candidates {
        let instance = &instances[verdicts[v].index];
        let pool = verdicts[v].pool.clone();
        let first_seen = seen.get(&instance.id).copied();
        next.candidates
            .insert(instance.id.clone(), first_seen.unwrap_or(now));
        let confirmed_at = first_seen.unwrap_or(now) + policy.confirm_after_ms;
        let skip = if pass.first {
            judged.due.push(policy.confirm_after_ms.max(1));
            Some(Skip::FirstPass)
        } else if first_seen.is_none() || now < confirmed_at {
            judged.due.push(confirmed_at.saturating_sub(now).max(1));
            Some(Skip::Unconfirmed {
                left_ms: confirmed_at.saturating_sub(now),
            })
        } else if let Some(kind) = global {
            Some(Skip::Breaker(kind))
        } else if next.latched.contains_key(&churn_key(&pool)) {
            Some(Skip::Breaker(BreakerKind::Churn))
        } else if policy.report_only {
            None
        } else if let Some(flight) = next.in_flight.get(&pool) {
            Some(Skip::InFlight(flight.id.clone()))
        } else if let Some(victim) = taken.get(&pool) {
            Some(Skip::InFlight(victim.clone()))
        } else if taken.len() >= policy.max_deletions_per_pass {
            Some(Skip::Cap)
        } else {
            taken.insert(pool, instance.id.clone());
            None
        };
        if let Some(skip) = skip {
            verdicts[v].action = Action::Candidate { why, skip };
        }
    }
}

/// Why a running instance without a Node would be a candidate, and when: a
/// former Node once its absence, first seen at `seen`, lasted the lost-node
/// grace; any other once its registration timeout passed, counted from the
/// later of `seen` and its creation (the cloud's clock alone never starts
/// it: behind, an instance would look old the moment it appears).
fn no_node_due(
    policy: &Policy,
    pool: &str,
    instance: &Instance,
    once_matched: bool,
    seen: u64,
) -> (Why, u64) {
    if once_matched {
        let grace = policy.lost_node_grace_ms(pool);
        return (Why::NodeLost, seen.saturating_add(grace));
    }
    let created = u64::try_from(instance.created_at_ms).unwrap_or(0);
    let start = created.max(seen);
    (
        Why::RegistrationTimeout,
        start.saturating_add(policy.timeout_ms(pool)),
    )
}

/// The reaper's own clock of instances without a Node: when a pass first
/// saw each so. A first pass after a start or a leader change starts every
/// clock anew: an observation from before the gap says nothing of the time
/// in between (another replica may have seen a Node meanwhile).
struct Absences<'m> {
    remembered: Option<&'m BTreeMap<String, u64>>,
    /// New clocks that still fit under [`MAX_ABSENT`].
    room: usize,
    untracked: usize,
}

impl<'m> Absences<'m> {
    fn new(memory: &'m Memory, pass: Pass, listed: &HashMap<&str, &Instance>) -> Self {
        let remembered = (!pass.first).then_some(&memory.absent_since);
        let kept = remembered.map_or(0, |clocks| {
            let listed_ids = clocks.keys().filter(|id| listed.contains_key(id.as_str()));
            listed_ids.count()
        });
        Absences {
            remembered,
            room: MAX_ABSENT.saturating_sub(kept),
            untracked: 0,
        }
    }

    /// When a pass first saw `id` without a Node (`now` when only now),
    /// kept in `next`; beyond the bound the clock is not kept and so starts
    /// again next pass.
    fn since(&mut self, id: &str, now: u64, next: &mut BTreeMap<String, u64>) -> u64 {
        if let Some(&since) = self.remembered.and_then(|clocks| clocks.get(id)) {
            next.insert(id.to_string(), since);
            return since;
        }
        if self.room > 0 {
            self.room -= 1;
            next.insert(id.to_string(), now);
        } else {
            self.untracked += 1;
        }
        now
    }
}

const MAX_FRACTION: &str = "max-fraction";

fn churn_key(pool: &str) -> String {
    format!("churn:{pool}")
}

/// A pool for operators: its tag value, or "(untagged)".
pub fn shown_pool(pool: &str) -> &str {
    if pool.is_empty() { "(untagged)" } else { pool }
}

fn verdict(index: usize, pool: &str, action: Action) -> Verdict {
    Verdict {
        index,
        pool: pool.to_string(),
        action,
    }
}

/// The Node listing failed: nothing is judged, the outage is remembered
/// (its time never counts towards a registration timeout).
fn listing_failed(memory: &Memory, why: &str, now: u64, instances: usize) -> Decision {
    let mut next = memory.clone();
    next.api_down_since_ms = memory.api_down_since_ms.or(Some(now));
    Decision {
        verdicts: vec![],
        counts: Counts::default(),
        breakers: vec![Breaker {
            kind: BreakerKind::NodeListing,
            detail: format!("listing Nodes failed: {why}"),
        }],
        memory: next,
        instances,
        next_due_in_ms: None,
        untracked: 0,
    }
}

/// Each pool's `window` most recent launches, newest first: this pass's
/// observations replace the remembered ones of the same instance. Only the
/// `window` kept are copied (a pass sees every instance of the cluster).
fn merge_launches(
    previous: &BTreeMap<String, Vec<Launch>>,
    mut now: BTreeMap<&str, Vec<(&Instance, bool)>>,
    window: usize,
) -> BTreeMap<String, Vec<Launch>> {
    let mut merged = BTreeMap::new();
    let pools: BTreeSet<&str> = (previous.keys().map(String::as_str))
        .chain(now.keys().copied())
        .collect();
    for pool in pools {
        let fresh = now.remove(pool).unwrap_or_default();
        let old = previous.get(pool).map(Vec::as_slice).unwrap_or_default();
        let old_ids: HashSet<&str> = old.iter().map(|l| l.id.as_str()).collect();
        let seen_again: HashSet<&str> = (fresh.iter())
            .map(|(instance, _)| instance.id.as_str())
            .filter(|id| old_ids.contains(id))
            .collect();
        let fresh = fresh.iter().map(|&(instance, registered)| Recent {
            id: &instance.id,
            created_at_ms: instance.created_at_ms,
            registered,
        });
        let old = (old.iter())
            .filter(|l| !seen_again.contains(l.id.as_str()))
            .map(|l| Recent {
                id: &l.id,
                created_at_ms: l.created_at_ms,
                registered: l.registered,
            });
        let mut recent: Vec<Recent> = fresh.chain(old).collect();
        if window < recent.len() {
            recent.select_nth_unstable_by(window, Recent::newest_first);
            recent.truncate(window);
        }
        recent.sort_by(Recent::newest_first);
        if !recent.is_empty() {
            merged.insert(
                pool.to_string(),
                recent.iter().map(Recent::launch).collect(),
            );
        }
    }
    merged
}

/// A launch while the pools' most recent are chosen, borrowed from the
/// listing or the memory.
struct Recent<'a> {
    id: &'a str,
    created_at_ms: i64,
    registered: bool,
}

impl Recent<'_> {
    /// Newest first: by creation time, then by ID (the same order whatever
    /// the listing's).
    fn newest_first(a: &Recent, b: &Recent) -> Ordering {
        (b.created_at_ms.cmp(&a.created_at_ms)).then_with(|| in_str_order(b.id, a.id))
    }

    fn launch(&self) -> Launch {
        Launch {
            id: self.id.to_string(),
            created_at_ms: self.created_at_ms,
            registered: self.registered,
        }
    }
}

#[cfg(test)]
mod tests;
