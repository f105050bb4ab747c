//! The pure part of unit-applier: what must happen to bring the node from what
//! was applied ([`Applied`], kept in `state`) to what is declared
//! ([`Desired`]), and how each step changes the record. No host calls: every
//! rule here is tested without a node.
//!
//! The record is updated after every step (by the runner, through
//! [`Applied`]'s transition methods), so it always describes the node as far
//! as unit-applier has changed it, together with what it still owes: restarts
//! earned by files already written, and a daemon-reload. Diffing that record
//! against the declaration again after a crash yields exactly the remaining
//! steps; a restart owed before the crash is still owed after it, and one
//! recorded as done is not owed any more.
//!
//! Like gardener-node-agent's `changes.go`: only changed files are written;
//! daemon-reload only when a unit file or drop-in was written or removed; only
//! units whose unit file, drop-ins or depended-on files changed are restarted,
//! new enabled units are enabled and started, and units removed from the
//! declaration are stopped, disabled and deleted, but only those unit-applier
//! created. Files and units it did not create are never deleted, stopped or
//! disabled; for a unit declared with `own = false` it manages only its own
//! drop-ins (and restarts the unit when they or its depended-on files change).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What a file is to unit-applier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A declared file (configuration a unit may depend on).
    Plain,
    /// The unit file of the named unit.
    UnitFile(String),
    /// A drop-in of the named unit.
    DropIn(String),
}

impl Kind {
    /// The unit a unit file or drop-in belongs to.
    pub fn unit(&self) -> Option<&str> {
        match self {
            Kind::Plain => None,
            Kind::UnitFile(unit) | Kind::DropIn(unit) => Some(unit),
        }
    }
}

/// A file as declared: every declared file, unit file and drop-in, by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredFile {
    pub content: String,
    /// [`digest`] of `content`.
    pub digest: String,
    pub mode: u32,
    pub owner: Option<String>,
    pub kind: Kind,
}

/// A unit as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredUnit {
    /// unit-applier writes the unit file (and enables, starts, stops,
    /// disables the unit); false: only its drop-ins, for an existing unit.
    pub own: bool,
    /// Enable and start it (owned units only).
    pub enable: bool,
    /// Paths of declared files whose change restarts the unit.
    pub files: BTreeSet<String>,
}

/// The declaration, resolved to paths (see `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    pub files: BTreeMap<String, DesiredFile>,
    pub units: BTreeMap<String, DesiredUnit>,
    /// Units whose restarts wait for the node's jitter: ordered after the others.
    pub jittered: BTreeSet<String>,
}

/// The hex SHA-256 of `content`: what `state` keeps instead of the content.
pub fn digest(content: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What unit-applier has applied and still owes: the one `state` document
/// (key "applied"), rewritten after every step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Applied {
    /// Files written by unit-applier, by path.
    pub files: BTreeMap<String, AppliedFile>,
    /// Units in the declaration as last applied, by name.
    pub units: BTreeMap<String, AppliedUnit>,
    /// Restarts earned by files already written or removed, not done yet.
    pub restart: BTreeSet<String>,
    /// A unit file or drop-in changed since the last daemon-reload.
    pub reload: bool,
    /// A restart was issued and the reconcile ended before it was recorded
    /// (the process was killed during the job): see the runner.
    pub in_flight: Option<InFlight>,
    /// Jittered restarts wait until this time (ms since the epoch).
    pub jitter_until_ms: Option<u64>,
    /// Jobs of the last apply that did not end "done".
    pub problems: Vec<String>,
    /// Applies in a row that stopped on an error (for the retry backoff).
    pub retries: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AppliedFile {
    /// None while the first write is in progress.
    pub digest: Option<String>,
    pub mode: u32,
    pub owner: Option<String>,
    pub kind: Kind,
    /// Nothing was at the path before unit-applier wrote it: it may delete it.
    pub created: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AppliedUnit {
    pub own: bool,
    /// systemd did not know the unit before unit-applier declared it: it may
    /// stop, disable and delete it once it leaves the declaration.
    pub created: bool,
    /// Enabled (by unit-applier, or found enabled when adopted).
    pub enabled: bool,
    /// Started (by unit-applier, or found running when adopted).
    pub started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct InFlight {
    pub unit: String,
    /// The unit's ActiveEnterTimestamp before the restart was issued.
    pub active_enter_ms: Option<u64>,
}

impl Applied {
    /// True when an apply was interrupted: something is owed or half done.
    pub fn interrupted(&self) -> bool {
        !self.restart.is_empty()
            || self.reload
            || self.in_flight.is_some()
            || self.files.values().any(|f| f.digest.is_none())
    }
}

/// One step of a plan, in the order the plan lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Start tracking a declared unit (or re-track one whose `own` changed):
    /// for an owned unit the runner asks systemd whether it exists already.
    Track {
        unit: String,
        own: bool,
        enable: bool,
    },
    /// Write a declared file, unit file or drop-in. `new`: no record yet (the
    /// runner checks whether something is at the path). `restarts` and
    /// `reload` are owed once the write begins.
    Write {
        path: String,
        new: bool,
        restarts: Vec<String>,
        reload: bool,
    },
    Stop {
        unit: String,
    },
    Disable {
        unit: String,
    },
    /// A file left the declaration. `delete`: unit-applier created it, so it
    /// deletes it; otherwise it only forgets it.
    Remove {
        path: String,
        delete: bool,
        restarts: Vec<String>,
        reload: bool,
    },
    DaemonReload,
    Enable {
        unit: String,
    },
    Start {
        unit: String,
    },
    Restart {
        unit: String,
    },
    /// A restart owed for a unit that no longer needs one (state only).
    SkipRestart {
        unit: String,
    },
    /// A unit left the declaration and is dealt with (state only).
    Forget {
        unit: String,
    },
}

impl Step {
    /// Whether the step calls the host (the others only update the record).
    pub fn acts(&self) -> bool {
        match self {
            Step::Track { .. } | Step::SkipRestart { .. } | Step::Forget { .. } => false,
            Step::Remove { delete, .. } => *delete,
            _ => true,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Track { unit, .. } => write!(f, "track {unit}"),
            Step::Write { path, .. } => write!(f, "write {path}"),
            Step::Stop { unit } => write!(f, "stop {unit}"),
            Step::Disable { unit } => write!(f, "disable {unit}"),
            Step::Remove {
                path, delete: true, ..
            } => write!(f, "remove {path}"),
            Step::Remove { path, .. } => write!(f, "forget {path} (not created by unit-applier)"),
            Step::DaemonReload => write!(f, "daemon-reload"),
            Step::Enable { unit } => write!(f, "enable {unit}"),
            Step::Start { unit } => write!(f, "start {unit}"),
            Step::Restart { unit } => write!(f, "restart {unit}"),
            Step::SkipRestart { unit } => write!(f, "skip the restart of {unit}"),
            Step::Forget { unit } => write!(f, "forget {unit}"),
        }
    }
}

/// The steps from `applied` to `desired`, in order; empty when nothing is to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The steps that call the host, as text ("write /etc/a", "restart a.service").
    pub fn actions(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter(|s| s.acts())
            .map(|s| s.to_string())
            .collect()
    }

    /// The units the plan restarts.
    pub fn restarts(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Restart { unit } => Some(unit.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Why the declaration cannot be applied from this record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Whether `unit` gets a restart when a file it depends on changes.
fn restart_wanted(rec: Option<&AppliedUnit>, desired: Option<&DesiredUnit>) -> bool {
    let Some(rec) = rec else { return false };
    match desired {
        Some(d) if !d.own => true,
        Some(d) => d.enable && rec.started,
        // Our drop-ins left a unit that stays: restart it so it drops them too.
        None if !rec.own => true,
        // An owned unit unit-applier created is stopped instead.
        None => !rec.created && rec.started,
    }
}

/// The plan from `applied` to `desired`.
pub fn diff(applied: &Applied, desired: &Desired) -> Result<Plan, Refused> {
    let mut steps = Vec::new();

    // Units: tracked (records predicted for the rest of the plan).
    let mut units = applied.units.clone();
    for (name, d) in &desired.units {
        match applied.units.get(name) {
            Some(rec) if rec.own == d.own => continue,
            Some(rec) if rec.own && rec.created => {
                return Err(Refused(format!(
                    "unit {name} was created by unit-applier and cannot become own = false: \
                     remove it from the declaration (it is stopped, disabled and deleted) before declaring only drop-ins for it"
                )));
            }
            _ => {}
        }
        steps.push(Step::Track {
            unit: name.clone(),
            own: d.own,
            enable: d.enable,
        });
        // Predicted: an owned unit is new to systemd; corrected by the runner.
        units.insert(
            name.clone(),
            AppliedUnit {
                own: d.own,
                created: d.own,
                ..AppliedUnit::default()
            },
        );
    }

    // Writes: declared files first, then unit files, then drop-ins.
    let mut owed = applied.restart.clone();
    let mut reload = applied.reload;
    let rank = |kind: &Kind| match kind {
        Kind::Plain => 0,
        Kind::UnitFile(_) => 1,
        Kind::DropIn(_) => 2,
    };
    let mut writes: Vec<(&String, &DesiredFile)> = desired.files.iter().collect();
    writes.sort_by_key(|(path, f)| (rank(&f.kind), *path));
    for (path, f) in writes {
        let current = applied.files.get(path);
        let changed = current
            .is_none_or(|a| a.digest.as_deref() != Some(f.digest.as_str()) || a.mode != f.mode);
        // An owner change alone is recorded (a no-op write), nothing more.
        if !changed && current.is_some_and(|a| a.owner == f.owner) {
            continue;
        }
        let affected: Vec<&String> = match f.kind.unit() {
            Some(unit) => desired
                .units
                .get_key_value(unit)
                .map(|(k, _)| k)
                .into_iter()
                .collect(),
            None => desired
                .units
                .iter()
                .filter(|(_, d)| d.files.contains(path))
                .map(|(name, _)| name)
                .collect(),
        };
        let restarts: Vec<String> = affected
            .into_iter()
            .filter(|u| changed && restart_wanted(units.get(*u), desired.units.get(*u)))
            .cloned()
            .collect();
        owed.extend(restarts.iter().cloned());
        let unit_kind = changed && f.kind != Kind::Plain;
        reload |= unit_kind;
        steps.push(Step::Write {
            path: path.clone(),
            new: current.is_none(),
            restarts,
            reload: unit_kind,
        });
    }

    // Stops and disables: owned units unit-applier created that left the
    // declaration, and owned units whose enable turned false.
    let mut stopping = BTreeSet::new();
    for (name, rec) in &units {
        let off = match desired.units.get(name) {
            None => rec.own && rec.created,
            Some(d) => d.own && !d.enable,
        };
        if off && rec.started {
            stopping.insert(name.clone());
            steps.push(Step::Stop { unit: name.clone() });
        }
    }
    for (name, rec) in &units {
        let off = match desired.units.get(name) {
            None => rec.own && rec.created,
            Some(d) => d.own && !d.enable,
        };
        if off && rec.enabled {
            steps.push(Step::Disable { unit: name.clone() });
        }
    }

    // Removals of unit files and drop-ins (declared files go last).
    let removed = |plain: bool| {
        applied.files.iter().filter(move |(path, a)| {
            !desired.files.contains_key(*path) && (a.kind == Kind::Plain) == plain
        })
    };
    for (path, a) in removed(false) {
        let restarts: Vec<String> = match a.kind.unit() {
            Some(unit) if a.created && restart_wanted(units.get(unit), desired.units.get(unit)) => {
                vec![unit.to_string()]
            }
            _ => Vec::new(),
        };
        owed.extend(restarts.iter().cloned());
        reload |= a.created;
        steps.push(Step::Remove {
            path: path.clone(),
            delete: a.created,
            restarts,
            reload: a.created,
        });
    }

    if reload {
        steps.push(Step::DaemonReload);
    }

    // Enables and starts of owned, enabled units.
    let mut starting = BTreeSet::new();
    for (name, d) in &desired.units {
        let rec = &units[name];
        if d.own && d.enable && !rec.enabled {
            steps.push(Step::Enable { unit: name.clone() });
        }
    }
    for (name, d) in &desired.units {
        let rec = &units[name];
        if d.own && d.enable && !rec.started {
            starting.insert(name.clone());
            steps.push(Step::Start { unit: name.clone() });
        }
    }

    // Restarts: owed and earned above; jittered units last. A start or stop
    // in this plan settles a unit's restart.
    let (mut now, mut later) = (Vec::new(), Vec::new());
    for unit in &owed {
        if starting.contains(unit) || stopping.contains(unit) {
            continue;
        }
        if restart_wanted(units.get(unit), desired.units.get(unit)) {
            let step = Step::Restart { unit: unit.clone() };
            if desired.jittered.contains(unit) {
                later.push(step);
            } else {
                now.push(step);
            }
        } else if applied.restart.contains(unit) {
            now.push(Step::SkipRestart { unit: unit.clone() });
        }
    }
    steps.extend(now);
    steps.extend(later);

    for (path, a) in removed(true) {
        steps.push(Step::Remove {
            path: path.clone(),
            delete: a.created,
            restarts: Vec::new(),
            reload: false,
        });
    }
    for name in applied.units.keys() {
        if !desired.units.contains_key(name) {
            steps.push(Step::Forget { unit: name.clone() });
        }
    }
    Ok(Plan { steps })
}

/// The record's transitions: the runner calls `begin` before a step's host
/// call and `finish` after it, persisting the record each time it changed.
impl Applied {
    /// A unit is tracked: `rec` as the runner found it.
    pub fn track(&mut self, unit: &str, rec: AppliedUnit) {
        self.units.insert(unit.to_string(), rec);
    }

    /// Before a write or removal: its restarts and reload are owed from now
    /// on, and the file's content is unknown until [`Applied::finish`] (no
    /// digest: whatever the next declaration says, it is written again). A
    /// new file is recorded with whether unit-applier creates it, so that a
    /// crash after the write still knows it as its own.
    pub fn begin(&mut self, step: &Step, desired: &Desired, created: bool) {
        match step {
            Step::Write {
                path,
                restarts,
                reload,
                ..
            } => {
                self.restart.extend(restarts.iter().cloned());
                self.reload |= reload;
                if let Some(f) = desired.files.get(path) {
                    self.files
                        .entry(path.clone())
                        .or_insert_with(|| AppliedFile {
                            digest: None,
                            mode: f.mode,
                            owner: f.owner.clone(),
                            kind: f.kind.clone(),
                            created,
                        })
                        .digest = None;
                }
            }
            Step::Remove {
                path,
                restarts,
                reload,
                ..
            } => {
                self.restart.extend(restarts.iter().cloned());
                self.reload |= reload;
                if let Some(file) = self.files.get_mut(path) {
                    file.digest = None;
                }
            }
            _ => {}
        }
    }

    /// After a step's host call succeeded (or, for state-only steps, at once).
    pub fn finish(&mut self, step: &Step, desired: &Desired) {
        match step {
            Step::Track { .. } => {}
            Step::Write { path, .. } => {
                if let Some(f) = desired.files.get(path) {
                    let created = self.files.get(path).is_none_or(|a| a.created);
                    self.files.insert(
                        path.clone(),
                        AppliedFile {
                            digest: Some(f.digest.clone()),
                            mode: f.mode,
                            owner: f.owner.clone(),
                            kind: f.kind.clone(),
                            created,
                        },
                    );
                }
            }
            Step::Remove { path, .. } => {
                self.files.remove(path);
            }
            Step::Stop { unit } => {
                if let Some(rec) = self.units.get_mut(unit) {
                    rec.started = false;
                }
                self.restart.remove(unit);
            }
            Step::Disable { unit } => {
                if let Some(rec) = self.units.get_mut(unit) {
                    rec.enabled = false;
                }
            }
            Step::DaemonReload => self.reload = false,
            Step::Enable { unit } => {
                if let Some(rec) = self.units.get_mut(unit) {
                    rec.enabled = true;
                }
            }
            Step::Start { unit } => {
                if let Some(rec) = self.units.get_mut(unit) {
                    rec.started = true;
                }
                self.restart.remove(unit);
            }
            Step::Restart { unit } | Step::SkipRestart { unit } => {
                self.restart.remove(unit);
                if self.in_flight.as_ref().is_some_and(|f| &f.unit == unit) {
                    self.in_flight = None;
                }
            }
            Step::Forget { unit } => {
                self.units.remove(unit);
                self.restart.remove(unit);
            }
        }
    }
}

#[cfg(test)]
mod tests;
