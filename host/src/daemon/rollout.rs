//! The daemon's rollout task (`[host.fleet.rollout]`): every `poll`, while
//! this host leads, the leader's poll ([`RolloutLeader`]); on every host, a
//! watch of the rollout Lease and, until it is known, a read of this node's
//! place (its Node's UID, zone and pool), handed to the supervisor as a
//! [`Sighting`]. Without the API server the last sighting stays: nothing
//! widens, and nothing is taken back either.

use super::leader::Leadership;
use crate::fleet::cohort::Member;
use crate::fleet::kube::KubeFleet;
use crate::fleet::rollout::Rollout;
use crate::fleet::rollout_leader::{RolloutLeader, member};
use crate::fleet::settings::FleetSettings;
use crate::fleet::store::FleetStore;
use crate::fleet::{CALL_TIMEOUT, bounded};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// What the supervisor follows: the rollout as last read, and this node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sighting {
    /// The rollout Lease has been read (a rollout of None is "none").
    pub known: bool,
    pub rollout: Option<Rollout>,
    pub me: Option<Member>,
}

/// How often this node's Node is read again, for its zone and pool.
const NODE_READ_EVERY: Duration = Duration::from_secs(300);

pub fn spawn(
    settings: FleetSettings,
    node: String,
    kubeconfig: Option<PathBuf>,
    leadership: watch::Receiver<Leadership>,
    seen: watch::Sender<Sighting>,
) -> Option<tokio::task::JoinHandle<()>> {
    let rollout = settings.rollout.clone()?;
    let store = KubeFleet::new(&settings, node.clone(), kubeconfig);
    let leader = RolloutLeader::new(rollout.rules, rollout.steps);
    Some(tokio::spawn(follow(
        store,
        node,
        leader,
        rollout.poll,
        leadership,
        seen,
    )))
}

async fn follow(
    store: KubeFleet,
    node: String,
    mut leader: RolloutLeader,
    poll: Duration,
    leadership: watch::Receiver<Leadership>,
    seen: watch::Sender<Sighting>,
) {
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut led = false;
    let mut changes: Option<BoxStream<'static, Result<Option<String>, String>>> = None;
    // Why each part last failed (cleared when it works again).
    let mut notes: BTreeMap<&str, String> = BTreeMap::new();
    let mut sighting = Sighting::default();
    let mut node_read = Instant::now();
    loop {
        let change = async {
            match &mut changes {
                Some(changes) => changes.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {
                let leading = leadership.borrow().leading;
                if leading && !led {
                    // A new term opens new windows: a step bakes again from now.
                    leader.forget();
                }
                led = leading;
                if leading {
                    let polled = tokio::time::timeout(poll.max(CALL_TIMEOUT), leader.poll(&store, Instant::now())).await;
                    let failed = match polled {
                        Ok(Ok(polled)) => {
                            if polled.wrote {
                                let rollout = polled.rollout.as_ref();
                                tracing::info!(
                                    revision = rollout.map_or("", |r| r.revision.as_str()),
                                    state = ?rollout.map(|r| r.state),
                                    reason = rollout.map_or("", |r| r.reason.as_str()),
                                    "rollout: the leader published"
                                );
                            }
                            None
                        }
                        Ok(Err(e)) => Some(format!("the leader's poll failed: {e}")),
                        Err(_) => Some("the leader's poll took longer than a poll".into()),
                    };
                    note(&mut notes, "leader", failed);
                }
                // Its zone and pool labels may come late (a cloud
                // controller labels a new Node after tend starts).
                if sighting.me.is_none() || node_read.elapsed() >= NODE_READ_EVERY {
                    node_read = Instant::now();
                    let read = bounded(CALL_TIMEOUT, store.node(&node)).await;
                    if let Ok(facts) = &read {
                        sighting.me = member(facts);
                    }
                    note(&mut notes, "node", read.err().map(|e| format!("cannot read this node: {e}")));
                }
                if changes.is_none() {
                    match bounded(CALL_TIMEOUT, store.rollout_changes()).await {
                        Ok(stream) => changes = Some(stream.boxed()),
                        Err(e) => note(&mut notes, "watch", Some(format!("cannot watch the rollout: {e}"))),
                    }
                }
            }
            Some(change) = change => match change {
                Ok(text) => {
                    sighting.known = true;
                    sighting.rollout = text.as_deref().and_then(Rollout::parse);
                    note(&mut notes, "watch", None);
                }
                Err(e) => note(&mut notes, "watch", Some(format!("the rollout's watch failed: {e}"))),
            },
        }
        seen.send_if_modified(|now| {
            let changed = *now != sighting;
            if changed {
                *now = sighting.clone();
            }
            changed
        });
    }
}

/// Record why `part` failed (None: it works), logging a new failure once.
fn note(notes: &mut BTreeMap<&'static str, String>, part: &'static str, failed: Option<String>) {
    match failed {
        Some(why) => {
            // The API server's words: bounded and inert.
            let why = crate::text::cut(crate::text::inert(&why).into_owned(), 600);
            if notes.get(part) != Some(&why) {
                tracing::warn!("rollout: {why}");
            }
            notes.insert(part, why);
        }
        None => {
            notes.remove(part);
        }
    }
}
