//! `POST /plan[/NAME]`: a dry-run reconcile of one or every enabled plugin by
//! the running daemon, with its state store and budgets. It changes nothing:
//! not the node, not the plugins' state (dry-run overlay), not their schedule
//! or last result in the table; the planned mutations are journaled as plans.

use super::Shared;
use crate::runtime::CallRequest;
use crate::scheduler::{Trigger, trigger};

/// The summaries of the plans, or why there is nothing to plan.
pub async fn run(shared: &Shared, name: Option<&str>) -> Result<Vec<serde_json::Value>, String> {
    let targets: Vec<_> = {
        let table = shared.table.read().unwrap();
        if let Some(name) = name
            && !table.plugins.contains_key(name)
        {
            return Err(format!("no plugin {name:?} in the running config\n"));
        }
        table
            .plugins
            .iter()
            .filter(|(n, e)| name.is_none_or(|name| name == *n) && e.config.enabled)
            .map(|(n, e)| (n.clone(), e.compiled.clone(), e.config.clone()))
            .collect()
    };
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
            triggers: vec![Trigger::new(trigger::MANUAL)],
            node_name: &node_name,
            dry_run: true,
        };
        let report = shared.runtime.reconcile(&plugin, &config, request).await;
        summaries.push(report.summary(&name));
    }
    Ok(summaries)
}
