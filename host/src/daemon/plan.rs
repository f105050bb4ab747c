//! `POST /plan[/NAME]` (control socket): a dry-run reconcile of one or every
//! enabled plugin by the running daemon, with its state store and budgets. It
//! changes nothing: not the node, not the plugins' state (dry-run overlay), not
//! their schedule or last result in the table; the planned mutations are
//! journaled as plans, in the plan journal (they never rotate real history away).

use super::Shared;
use crate::capabilities::gate::Planned;
use crate::capabilities::tape::Tape;
use crate::runtime::CallRequest;
use crate::scheduler::{Trigger, trigger};

/// Why a plan did not run.
pub enum Refusal {
    /// No such plugin to plan.
    NotFound(String),
    /// Another plan is running: one at a time.
    Busy(String),
}

/// The summaries of the plans, or why there is nothing to plan.
pub async fn run(shared: &Shared, name: Option<&str>) -> Result<Vec<serde_json::Value>, Refusal> {
    let targets: Vec<_> = {
        let table = shared.table.read().unwrap();
        if let Some(name) = name {
            match table.plugins.get(name) {
                None => {
                    return Err(Refusal::NotFound(format!(
                        "no plugin {name:?} in the running config\n"
                    )));
                }
                Some(entry) if !entry.config.enabled => {
                    return Err(Refusal::NotFound(format!(
                        "{name} is disabled in the running config: set enabled = true to plan it\n"
                    )));
                }
                Some(_) => {}
            }
        }
        table
            .plugins
            .iter()
            .filter(|(n, e)| name.is_none_or(|name| name == *n) && e.config.enabled)
            .map(|(n, e)| (n.clone(), e.compiled.clone(), e.config.clone()))
            .collect()
    };
    // One plan at a time: a plan is a full reconcile of every plugin it names.
    let Ok(_turn) = shared.planning.try_lock() else {
        return Err(Refusal::Busy(
            "another plan is running: retry when it is done\n".into(),
        ));
    };
    let planned = Planned::default();
    let node_name = shared.host.read().unwrap().node_name.clone();
    let mut summaries = Vec::new();
    for (name, compiled, config) in targets {
        let Some(plugin) = compiled else {
            summaries.push(serde_json::json!({
                "plugin": name,
                "health": null,
                "message": "not loaded (see tend status)",
                "elapsed_ms": 0.0,
                "mutations": [],
            }));
            continue;
        };
        let request = CallRequest {
            services: &shared.services,
            planned: Some(planned.clone()),
            triggers: vec![Trigger::new(trigger::MANUAL)],
            node_name: &node_name,
            dry_run: true,
            tape: Tape::Off,
        };
        let report = shared.runtime.reconcile(&plugin, &config, request).await;
        summaries.push(report.summary(&name));
    }
    Ok(summaries)
}
