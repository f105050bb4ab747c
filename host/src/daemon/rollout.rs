//! The daemon's rollout task (`[host.fleet.rollout]`): every `poll`, while
//! this host leads, the leader's poll ([`RolloutLeader`]); on every host,
//! a read of the rollout Lease and, until it is known, of this node's place
//! (its Node's UID, zone and pool), handed to the supervisor as a
//! [`Sighting`]. A read that fails keeps the last sighting: nothing widens
//! without the API server, and nothing is taken back either.

use super::leader::Leadership;
use crate::fleet::cohort::Member;
use crate::fleet::kube::KubeFleet;
use crate::fleet::rollout::Rollout;
use crate::fleet::rollout_leader::{RolloutLeader, member};
use crate::fleet::settings::FleetSettings;
use crate::fleet::store::FleetStore;
use std::path::PathBuf;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// What the supervisor follows: the rollout as last read, and this node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sighting {
    pub rollout: Option<Rollout>,
    pub me: Option<Member>,
    /// Why the last read or the leader's poll failed, for `/status`.
    pub note: String,
}

/// One answer of the API server is waited for at most this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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
    loop {
        tick.tick().await;
        let mut notes = Vec::new();
        let leading = leadership.borrow().leading;
        if leading && !led {
            // A new term opens new windows: a step bakes again from now.
            leader.forget();
        }
        led = leading;
        if leading {
            match tokio::time::timeout(poll.max(CALL_TIMEOUT), leader.poll(&store, Instant::now()))
                .await
            {
                Ok(Ok(polled)) if polled.wrote => {
                    let rollout = polled.rollout.as_ref();
                    tracing::info!(
                        revision = rollout.map_or("", |r| r.revision.as_str()),
                        state = ?rollout.map(|r| r.state),
                        reason = rollout.map_or("", |r| r.reason.as_str()),
                        "rollout: the leader published"
                    );
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => notes.push(format!("the leader's poll failed: {e}")),
                Err(_) => notes.push("the leader's poll took longer than a poll".into()),
            }
        }
        let mut sighting = seen.borrow().clone();
        if sighting.me.is_none() {
            match bounded(store.node(&node)).await {
                Ok(facts) => sighting.me = member(&facts),
                Err(e) => notes.push(format!("cannot read this node: {e}")),
            }
        }
        match bounded(store.rollout()).await {
            Ok(lease) => sighting.rollout = lease.rollout.as_deref().and_then(Rollout::parse),
            Err(e) => notes.push(format!("cannot read the rollout: {e}")),
        }
        // Peers' text, bounded and inert.
        sighting.note = crate::text::cut(crate::text::inert(&notes.join("; ")).into_owned(), 600);
        if !sighting.note.is_empty() {
            tracing::warn!("rollout: {}", sighting.note);
        }
        seen.send_if_modified(|now| {
            let changed = *now != sighting;
            *now = sighting;
            changed
        });
    }
}

async fn bounded<T>(
    call: impl Future<Output = Result<T, crate::capabilities::CapError>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("the API server did not answer in time".into()),
    }
}
