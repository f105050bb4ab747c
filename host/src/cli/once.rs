//! `tend plan` and `tend reconcile`: one reconcile, printed. Both go through a
//! running daemon when one answers on its control socket
//! (`<state-dir>/tend.sock`, mode 0600: it holds the state store and the
//! budgets), and otherwise run in this process.

use super::node::{Node, plugin_named};
use super::report;
use crate::capabilities::gate;
use crate::capabilities::tape::Tape;
use crate::config::Config;
use crate::replay::{RecordedAnswer, Recording, Taped};
use crate::runtime::CallRequest;
use crate::scheduler::{Trigger, trigger};
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One dry-run reconcile of `name`, or of every enabled plugin. Changes nothing.
pub async fn plan(config_path: &Path, name: Option<&str>) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    if let Some(name) = name {
        plugin_named(&config, name)?;
    }
    let path = match name {
        Some(name) => format!("/plan/{name}"),
        None => "/plan".to_string(),
    };
    if let Some(answer) = via_daemon(&config.host.state_dir, &path).await? {
        let summaries = answer.as_array().cloned().unwrap_or_default();
        let by = by_daemon(&config.host.state_dir);
        for summary in &summaries {
            report::print(summary, &by);
        }
        return Ok(exit(summaries.iter().all(report::succeeded)));
    }
    let node = Node::new(config)?;
    let plugins = match name {
        Some(name) => vec![node.config.plugins[name].clone()],
        None => node.config.enabled_plugins().cloned().collect(),
    };
    let mut ok = true;
    let planned = gate::Planned::default();
    for loaded in node.load(plugins).await {
        let plugin = match loaded.plugin {
            Ok(plugin) => plugin,
            Err(e) => {
                report::line(&format!("{}: FAILED to load: {e}", loaded.config.name));
                ok = false;
                continue;
            }
        };
        let request = CallRequest {
            services: &node.services,
            planned: Some(planned.clone()),
            triggers: vec![Trigger::new(trigger::MANUAL)],
            node_name: &node.config.host.node_name,
            dry_run: true,
            tape: Tape::Off,
        };
        let result = node
            .runtime
            .reconcile(&plugin, &loaded.config, request)
            .await;
        let summary = result.summary(&loaded.config.name);
        ok &= report::succeeded(&summary);
        report::print(&summary, "");
    }
    Ok(exit(ok))
}

/// One reconcile of `name` now (a dry run if the config says so); with
/// `record`, its capability calls and their answers are written there (the
/// daemon sends them back: it never writes a path a client chose).
pub async fn reconcile(
    config_path: &Path,
    name: &str,
    record: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let path = match record {
        Some(_) => format!("/reconcile/{name}?record"),
        None => format!("/reconcile/{name}"),
    };
    if let Some(answer) = via_daemon(&config.host.state_dir, &path).await? {
        let by = by_daemon(&config.host.state_dir);
        let Some(file) = record else {
            report::print(&answer, &by);
            return Ok(exit(report::succeeded(&answer)));
        };
        let recorded: RecordedAnswer = serde_json::from_value(answer).map_err(|e| {
            anyhow::anyhow!("the tend daemon{by} sent no recording ({e}): is it an older tend? restart it with this version, or stop it to record in this process")
        })?;
        report::print(&recorded.report, &by);
        let recording = recorded.recording.map_err(|e| anyhow::anyhow!(e))?;
        return write_recording(&recording, file, report::succeeded(&recorded.report));
    }
    let plugin_config = plugin_named(&config, name)?.clone();
    let node = Node::new(config)?;
    let runtime = node.runtime.clone();
    let host = &node.config.host;
    let plugin = crate::oci::load(
        runtime,
        &plugin_config.file,
        plugin_config.oci.as_ref(),
        &host.oci,
        &host.cache_dir,
    )
    .await?;
    let dry_run = node.config.host.dry_run;
    if dry_run {
        report::line("(dry run: [host] dry-run = true)");
    }
    let request = CallRequest {
        services: &node.services,
        planned: None,
        triggers: vec![Trigger::new(trigger::MANUAL)],
        node_name: &node.config.host.node_name,
        dry_run,
        tape: if record.is_some() {
            Tape::record()
        } else {
            Tape::Off
        },
    };
    let mut result = node
        .runtime
        .reconcile(&plugin, &plugin_config, request)
        .await;
    let summary = result.summary(name);
    report::print(&summary, "");
    match (record, Taped::of(&mut result, &plugin, &plugin_config)) {
        (Some(file), Some(Taped::Recorded(recording))) => {
            let recording = recording.map_err(|e| anyhow::anyhow!("{e}"))?;
            write_recording(&recording, file, report::succeeded(&summary))
        }
        _ => Ok(exit(report::succeeded(&summary))),
    }
}

/// Write the recording of a reconcile that `succeeded` (or not) to `file`.
fn write_recording(
    recording: &Recording,
    file: &Path,
    succeeded: bool,
) -> anyhow::Result<ExitCode> {
    recording.write(file)?;
    report::line(&format!(
        "recorded {} calls to {}; replay with `tend replay {}`",
        recording.calls.len(),
        file.display(),
        file.display()
    ));
    Ok(exit(succeeded))
}

/// ", by the tend daemon at /var/lib/tend/tend.sock": who made a report.
fn by_daemon(state_dir: &Path) -> String {
    format!(
        ", by the tend daemon at {}",
        crate::daemon::control::socket_path(state_dir).display()
    )
}

/// POST `path` to the daemon of `state_dir` over its control socket; None
/// when no daemon runs there.
async fn via_daemon(state_dir: &Path, path: &str) -> anyhow::Result<Option<Value>> {
    let Some((status, body)) = crate::daemon::control::post(state_dir, path).await? else {
        return Ok(None);
    };
    if !status.is_success() {
        anyhow::bail!("the tend daemon answered {status}: {}", body.trim_end());
    }
    Ok(Some(serde_json::from_str(&body)?))
}
