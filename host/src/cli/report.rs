//! The one printer of every command that shows plugin text (`status`,
//! `journal`, `plan`, `reconcile`): every line reaches stdout through [`line`]
//! (control characters escaped) or [`json`] (raw controls escaped the JSON
//! way), so no message, target or trigger a plugin chose can drive the
//! operator's terminal. Reconcile reports are printed alike whether made in
//! this process or answered by a daemon (both are
//! [`ReconcileReport::summary`](crate::runtime::ReconcileReport::summary) JSON).

use crate::capabilities::gate::describe;
use crate::text::{inert, inert_json};
use serde_json::Value;
use tend_rules::reason::Reason;

/// Print one line for people, made inert.
pub fn line(text: &str) {
    print_line(&inert(text));
}

/// Print JSON text (one value, possibly pretty), made inert.
pub fn json(text: &str) {
    print_line(&inert_json(text));
}

/// A reader that stopped reading (`tend journal | head`) ends the command
/// quietly and successfully, as coreutils do; any other write error ends it
/// with the error (where `println!` would panic on both).
fn print_line(text: &str) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{text}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// "mirror-gate: healthy: 1 cache mirrored (12 ms)" or the failure, then one
/// line per mutation, each planned content change as an indented diff.
pub fn print(summary: &Value, by: &str) {
    let plugin = summary["plugin"].as_str().unwrap_or_default();
    let message = summary["message"].as_str().unwrap_or_default();
    let took = format!(
        "{:.0} ms{by}",
        summary["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
    match summary["health"].as_str() {
        Some(health) => line(&format!("{plugin}: {health}: {message} ({took})")),
        None => line(&format!("{plugin}: FAILED: {message} ({took})")),
    }
    let mutations = summary["mutations"].as_array().cloned().unwrap_or_default();
    for m in &mutations {
        let text = |key: &str| m[key].as_str().unwrap_or_default().to_string();
        line(&format!(
            "  {}",
            describe(
                m["dry_run"].as_bool().unwrap_or(false),
                &text("capability"),
                &text("operation"),
                &text("target"),
                &text("detail"),
                &text("result"),
            )
        ));
        if let Some(diff) = m["diff"].as_str() {
            for diff_line in diff.lines() {
                line(&format!("      {diff_line}"));
            }
        }
    }
    if mutations.is_empty() && summary["health"].is_string() {
        line("  no changes");
    }
    let (host, plugin) = reasons(message, &mutations);
    if !host.is_empty() {
        line(&format!("  held back by: {}", host.join(", ")));
    }
    if !plugin.is_empty() {
        line(&format!(
            "  held back by (the plugin says): {}",
            plugin.join(", ")
        ));
    }
}

/// The named reasons (`window`, `pdb:default/web`, ...): those the host's
/// refusals of the mutations begin with, and apart, those only the outcome
/// names (a plugin's own word: it could name any), each once, in the order
/// first met.
fn reasons(message: &str, mutations: &[Value]) -> (Vec<String>, Vec<String>) {
    let once = |texts: &mut dyn Iterator<Item = &str>, besides: &[String]| {
        let mut named: Vec<String> = Vec::new();
        for reason in texts.flat_map(Reason::all) {
            let name = reason.name();
            if !named.contains(&name) && !besides.contains(&name) {
                named.push(name);
            }
        }
        named
    };
    let host = once(
        &mut mutations.iter().filter_map(|m| m["result"].as_str()),
        &[],
    );
    let plugin = once(&mut std::iter::once(message), &host);
    (host, plugin)
}

/// Whether a summary is a successful reconcile.
pub fn succeeded(summary: &Value) -> bool {
    summary["health"].is_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_reasons_held_back_are_named_once_and_the_plugins_word_apart() {
        let mutations = [
            json!({"result": "budget-exhausted: [pdb:default/web-pdb] blocked by PodDisruptionBudget default/web-pdb: ..."}),
            json!({"result": "ok"}),
            json!({"result": "budget-exhausted: [window] fleet budget reboots: closed"}),
            json!({"result": "budget-exhausted: [pdb:default/web-pdb] again"}),
            json!({"result": "denied: [budget] not a refusal"}),
        ];
        let (host, plugin) = reasons("[unverified] [window] step 1/2 taken 1m ago", &mutations);
        assert_eq!(host, ["pdb:default/web-pdb", "window"]);
        assert_eq!(plugin, ["unverified"], "the plugin's word apart");
        let (host, plugin) = reasons("all clear", &[json!({"result": "ok"})]);
        assert!(host.is_empty() && plugin.is_empty());
    }
}
