//! Reconcile reports for people: one printer for reports made in this process
//! and those a daemon answers with (both are [`ReconcileReport::summary`] JSON).

use crate::capabilities::gate::describe;
use crate::text::inert;
use serde_json::Value;

/// "mirror-gate: healthy: 1 cache mirrored (12 ms)" or the failure, then one
/// line per mutation, each planned content change as an indented diff.
pub fn print(summary: &Value, by: &str) {
    let plugin = summary["plugin"].as_str().unwrap_or_default();
    let message = inert(summary["message"].as_str().unwrap_or_default());
    let took = format!(
        "{:.0} ms{by}",
        summary["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
    match summary["health"].as_str() {
        Some(health) => println!("{plugin}: {health}: {message} ({took})"),
        None => println!("{plugin}: FAILED: {message} ({took})"),
    }
    let mutations = summary["mutations"].as_array().cloned().unwrap_or_default();
    for m in &mutations {
        let text = |key: &str| m[key].as_str().unwrap_or_default().to_string();
        println!(
            "  {}",
            describe(
                m["dry_run"].as_bool().unwrap_or(false),
                &text("capability"),
                &text("operation"),
                &text("target"),
                &text("detail"),
                &text("result"),
            )
        );
        if let Some(diff) = m["diff"].as_str() {
            for line in diff.lines() {
                println!("      {line}");
            }
        }
    }
    if mutations.is_empty() && summary["health"].is_string() {
        println!("  no changes");
    }
}

/// Whether a summary is a successful reconcile.
pub fn succeeded(summary: &Value) -> bool {
    summary["health"].is_string()
}
