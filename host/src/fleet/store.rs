//! Where the fleet's shared state lives: the backend trait (the Kubernetes
//! API in [`super::kube`]) and an in-memory fake with the API server's
//! compare-and-swap, for the unit tests of [`super::Fleet`].

use super::ledger::{Ledger, NodeFacts};
use super::revision::{Publish, Published};
use crate::capabilities::CapError;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A ledger as read, with the version a write must name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Versioned {
    pub ledger: Ledger,
    /// The Lease's resourceVersion; None when it does not exist yet.
    pub version: Option<String>,
}

/// The rollout Lease as read: the leader's [`super::rollout::Rollout`]
/// text, an operator's pending command, and the version a write must name
/// (None when it does not exist yet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutLease {
    pub rollout: Option<String>,
    pub command: Option<String>,
    pub version: Option<String>,
}

#[async_trait::async_trait]
pub trait FleetStore: Send + Sync + 'static {
    /// The class's ledger (empty, unversioned, when its Lease does not exist).
    async fn ledger(&self, class: &str) -> Result<Versioned, CapError>;
    /// Write `ledger` if the Lease is still at `version` (create it when
    /// None); `conflict` when someone wrote it since.
    async fn write(
        &self,
        class: &str,
        ledger: &Ledger,
        version: Option<&str>,
    ) -> Result<(), CapError>;
    /// The rollout Lease (empty when it does not exist).
    async fn rollout(&self) -> Result<RolloutLease, CapError>;
    /// Write the rollout's text if the Lease is still at `version` (create
    /// it when None), the operator's command consumed; `conflict` when
    /// someone wrote it since.
    async fn write_rollout(&self, rollout: &str, version: Option<&str>) -> Result<(), CapError>;
    /// Leave an operator's order on the rollout Lease for the leader
    /// (`not found` when there is no rollout yet).
    async fn order(&self, order: &str) -> Result<(), CapError>;
    /// Every Node, as the rules see them.
    async fn nodes(&self) -> Result<Vec<NodeFacts>, CapError>;
    /// One Node (this host's), fresh.
    async fn node(&self, name: &str) -> Result<NodeFacts, CapError>;
    /// The node Leases of every tend: node -> resourceVersion.
    async fn node_leases(&self) -> Result<BTreeMap<String, String>, CapError>;
    /// Renew this host's node Lease (create it if missing), doing with its
    /// report ([`super::revision::Report`]'s text) what `publish` says.
    async fn renew(&self, node: &str, publish: Publish<'_>) -> Result<(), CapError>;
    /// Every node's own Lease: its report, and whether it is fresh.
    async fn reports(&self) -> Result<Vec<Published>, CapError>;
    /// Nodes another remediator holds, with who.
    async fn others(&self) -> Result<BTreeMap<String, String>, CapError>;
}

/// The fake: one process's memory, with resourceVersions and conflicts.
#[derive(Default)]
pub struct FakeStore {
    pub state: Mutex<FakeState>,
}

#[derive(Default)]
pub struct FakeState {
    pub ledgers: BTreeMap<String, (Ledger, u64)>,
    pub nodes: Vec<NodeFacts>,
    pub leases: BTreeMap<String, u64>,
    /// The reports published on node Leases, by node.
    pub reports: BTreeMap<String, String>,
    pub others: BTreeMap<String, String>,
    /// The rollout Lease: its text, a pending command, its version.
    pub rollout: Option<(String, Option<String>, u64)>,
    /// Another writer gets its write of the rollout in before the next one.
    pub interloper: bool,
    pub version: u64,
    /// Every request fails `unavailable` while set.
    pub down: bool,
    /// Requests answered so far.
    pub requests: u64,
}

impl FakeStore {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut FakeState) -> Result<T, CapError>,
    ) -> Result<T, CapError> {
        let mut state = self.state.lock().unwrap();
        if state.down {
            return Err(CapError::Unavailable("the fake API server is down".into()));
        }
        state.requests += 1;
        f(&mut state)
    }
}

#[async_trait::async_trait]
impl FleetStore for FakeStore {
    async fn ledger(&self, class: &str) -> Result<Versioned, CapError> {
        self.with(|s| {
            Ok(match s.ledgers.get(class) {
                Some((ledger, version)) => Versioned {
                    ledger: ledger.clone(),
                    version: Some(version.to_string()),
                },
                None => Versioned::default(),
            })
        })
    }

    async fn write(
        &self,
        class: &str,
        ledger: &Ledger,
        version: Option<&str>,
    ) -> Result<(), CapError> {
        self.with(|s| {
            let current = s.ledgers.get(class).map(|(_, v)| v.to_string());
            if current.as_deref() != version {
                return Err(CapError::Conflict("the ledger changed".into()));
            }
            s.version += 1;
            let v = s.version;
            s.ledgers.insert(class.to_string(), (ledger.clone(), v));
            Ok(())
        })
    }

    async fn rollout(&self) -> Result<RolloutLease, CapError> {
        self.with(|s| {
            Ok(match &s.rollout {
                Some((text, command, version)) => RolloutLease {
                    rollout: Some(text.clone()),
                    command: command.clone(),
                    version: Some(version.to_string()),
                },
                None => RolloutLease::default(),
            })
        })
    }

    async fn write_rollout(&self, rollout: &str, version: Option<&str>) -> Result<(), CapError> {
        self.with(|s| {
            if std::mem::take(&mut s.interloper) {
                s.version += 1;
                if let Some((_, _, v)) = s.rollout.as_mut() {
                    *v = s.version;
                }
            }
            let current = s.rollout.as_ref().map(|(_, _, v)| v.to_string());
            if current.as_deref() != version {
                return Err(CapError::Conflict("the rollout changed".into()));
            }
            s.version += 1;
            s.rollout = Some((rollout.to_string(), None, s.version));
            Ok(())
        })
    }

    async fn order(&self, order: &str) -> Result<(), CapError> {
        self.with(|s| {
            let version = s.version + 1;
            let (_, command, v) = s
                .rollout
                .as_mut()
                .ok_or_else(|| CapError::NotFound("lease tend-rollout".into()))?;
            *command = Some(order.to_string());
            *v = version;
            s.version = version;
            Ok(())
        })
    }

    async fn nodes(&self) -> Result<Vec<NodeFacts>, CapError> {
        self.with(|s| Ok(s.nodes.clone()))
    }

    async fn node(&self, name: &str) -> Result<NodeFacts, CapError> {
        self.with(|s| {
            s.nodes
                .iter()
                .find(|n| n.name == name)
                .cloned()
                .ok_or_else(|| CapError::NotFound(format!("node {name}")))
        })
    }

    async fn node_leases(&self) -> Result<BTreeMap<String, String>, CapError> {
        self.with(|s| {
            Ok(s.leases
                .iter()
                .map(|(n, v)| (n.clone(), v.to_string()))
                .collect())
        })
    }

    async fn renew(&self, node: &str, publish: Publish<'_>) -> Result<(), CapError> {
        self.with(|s| {
            s.version += 1;
            let v = s.version;
            s.leases.insert(node.to_string(), v);
            match publish {
                Publish::Leave => None,
                Publish::Set(report) => s.reports.insert(node.to_string(), report.to_string()),
                Publish::Remove => s.reports.remove(node),
            };
            Ok(())
        })
    }

    async fn reports(&self) -> Result<Vec<Published>, CapError> {
        self.with(|s| {
            Ok(s.leases
                .keys()
                .map(|node| Published {
                    node: node.clone(),
                    report: s.reports.get(node).cloned(),
                    fresh: true,
                })
                .collect())
        })
    }

    async fn others(&self) -> Result<BTreeMap<String, String>, CapError> {
        self.with(|s| Ok(s.others.clone()))
    }
}
