//! unit-applier: apply declared files and systemd units the way
//! gardener-node-agent does, instead of a poll loop that restarts everything
//! on every change.
//!
//! The declaration (files with content, mode and owner; units with content,
//! drop-ins, an enable flag and the files each depends on) comes from the
//! plugin config or from a file it names. It is diffed against what was last
//! applied, kept in `state` ([`diff`], pure), then applied through the host
//! ([`apply`]): changed files written atomically; daemon-reload only when a
//! unit file or drop-in changed; only units whose unit file, drop-ins or
//! depended-on files changed restarted, new enabled units enabled and
//! started; units and files that left the declaration stopped, disabled and
//! deleted, but only those unit-applier created. Progress is recorded after
//! every step, so a crash mid-apply resumes instead of redoing or skipping.
//! Restarts of listed units can wait a fixed per-node offset (jitter) so a
//! fleet does not restart its kubelets at once.
//!
//! ```toml
//! [plugins.unit-applier.grants]
//! files = [{ path = "/etc/systemd/system", write = true }, { path = "/etc/app", write = true }]
//! systemd = { units = ["app-*.service", "kubelet.service"], operations = ["start", "stop", "restart", "enable", "disable", "daemon-reload"] }
//! [plugins.unit-applier.config]
//! jitter = { window-ms = 300000, units = ["kubelet.service"] }
//! [[plugins.unit-applier.config.files]]
//! path = "/etc/app/app.conf"
//! content = "port = 8080\n"
//! mode = 0o640
//! [[plugins.unit-applier.config.units]]
//! name = "app-web.service"
//! content = "[Service]\nExecStart=/usr/bin/app --config /etc/app/app.conf\n[Install]\nWantedBy=multi-user.target\n"
//! files = ["/etc/app/app.conf"]
//! [[plugins.unit-applier.config.units]]
//! name = "kubelet.service"
//! own = false
//! drop-ins = [{ name = "50-tend.conf", content = "[Service]\nEnvironment=KUBELET_EXTRA_ARGS=--v=2\n" }]
//! ```

pub mod apply;
pub mod config;
pub mod diff;

use config::Config;
use tend_sdk::{Context, Host, Outcome, Plugin, PluginInfo, Result};

pub struct UnitApplier;

impl Plugin for UnitApplier {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "unit-applier",
            env!("CARGO_PKG_VERSION"),
            "applies declared files and systemd units, restarting only what changed",
        )
    }

    fn reconcile(ctx: &Context, host: &dyn Host) -> Result<Outcome> {
        run(ctx, host, tend_sdk::wall_clock_ms())
    }
}

/// One reconcile at wall-clock time `now_ms` (ms since the epoch).
pub fn run(ctx: &Context, host: &dyn Host, now_ms: u64) -> Result<Outcome> {
    let mut config: Config = ctx.config()?;
    let declaration = match config.inline(&ctx.plugin)? {
        Some(declaration) => declaration,
        None => {
            let path = config.declaration_file.clone().unwrap_or_default();
            match host.files().read_string(&path)? {
                // Never an empty declaration: that would remove everything.
                None => {
                    return Ok(Outcome::progressing(format!(
                        "waiting for the declaration file {path}: it does not exist"
                    )));
                }
                Some(text) => config::parse_declaration(&path, &text)?,
            }
        }
    };
    let desired = config::desired(&config, declaration)?;
    let jitter = config
        .jitter
        .as_ref()
        .map(|j| apply::Jitter::for_node(&ctx.node_name, j.window_ms));
    apply::apply(ctx, host, &desired, jitter, now_ms)
}

tend_sdk::export_plugin!(UnitApplier, uses: [files, state, systemd]);

#[cfg(test)]
mod tests;
