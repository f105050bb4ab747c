//! `POST /plan[/NAME]`: a dry-run reconcile of one or every enabled plugin by
//! the running daemon, with its state store and budgets. It changes nothing:
//! not the node, not the plugins' state (dry-run overlay), not their schedule
//! or last result in the table; the planned mutations are journaled as plans.

use super::Shared;
use crate::capabilities::gate::Planned;
use crate::runtime::CallRequest;
use crate::scheduler::{Trigger, trigger};

/// The summaries of the plans, or why there is nothing to plan.
pub async fn run(shared: &Shared, name: Option<&str>) -> Result<Vec<serde_json::Value>, String> {
    let targets: Vec<_> = {
        let table = shared.table.read().unwrap();
        if let Some(name) = name {
            match table.plugins.get(name) {
                None => return Err(format!("no plugin {name:?} in the running config\n")),
                Some(entry) if !entry.config.enabled => {
                    return Err(format!(
                        "{name} is disabled in the running config: set enabled = true to plan it\n"
                    ));
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
        return Err("another plan is running; try again when it is done\n".into());
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
        };
        let report = shared.runtime.reconcile(&plugin, &config, request).await;
        summaries.push(report.summary(&name));
    }
    Ok(summaries)
}
