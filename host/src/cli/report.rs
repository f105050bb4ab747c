//! Reconcile reports for people.

use crate::capabilities::Mutation;
use crate::runtime::{Health, ReconcileReport};

pub fn health_word(health: Health) -> &'static str {
    match health {
        Health::Healthy => "healthy",
        Health::Progressing => "progressing",
        Health::Degraded => "degraded",
    }
}

/// "mirror-gate: healthy: 1 cache mirrored (12 ms)" or the failure, then one
/// line per mutation.
pub fn print(plugin: &str, report: &ReconcileReport) {
    let took = format!("{} ms", report.elapsed.as_millis());
    match &report.result {
        Ok(outcome) => println!(
            "{plugin}: {}: {} ({took})",
            health_word(outcome.health),
            outcome.message
        ),
        Err(failure) => println!("{plugin}: FAILED: {failure} ({took})"),
    }
    for mutation in &report.mutations {
        println!("  {}", describe(mutation));
    }
    if report.mutations.is_empty() && report.result.is_ok() {
        println!("  no changes");
    }
}

pub fn describe(m: &Mutation) -> String {
    describe_parts(
        m.performed,
        m.capability,
        &m.operation,
        &m.target,
        &m.detail,
        &m.result,
    )
}

/// "did files.write /path (120 bytes): error": one mutation, for the report
/// and for `tend journal`.
pub fn describe_parts(
    performed: bool,
    capability: &str,
    operation: &str,
    target: &str,
    detail: &str,
    result: &str,
) -> String {
    let verb = if performed { "did" } else { "would" };
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    };
    let result = if result == "ok" {
        String::new()
    } else {
        format!(": {result}")
    };
    format!("{verb} {capability}.{operation} {target}{detail}{result}")
}
