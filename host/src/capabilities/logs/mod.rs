//! `tend:plugin/logs`: the node's kernel log and journal, read only, within
//! the plugin's granted sources, units and identifiers; and log triggers (the
//! grant's `watch` rules, matched by the host). Not `log`, the plugin's own
//! output.

mod adapter;
mod backend;
mod counts;
mod fake;
mod grants;
mod journal;
mod kmsg;
mod real;
mod source;
mod store;
mod wit;

pub use adapter::{LogsHost, PluginLogs};
pub use backend::{LogReader, Position};
pub use fake::{FAKE_BOOT, FakeLogs};
pub use grants::{LogsGrant, Source};
pub use source::LOG_TRIGGER;

use crate::capabilities::CapError;
use crate::capabilities::call::Call;
use crate::capabilities::capability::{BackendEnv, Capability, NoLimits};
use crate::capabilities::watch::Watch;
use crate::wit::logs;
use std::path::PathBuf;
use std::sync::Arc;
use store::MatchStore;
use wasmtime::component::{HasSelf, Linker};

/// `[host.logs]`: where the node's logs are.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LogsSettings {
    /// The kernel log: `/dev/kmsg`, or a file in its record format.
    pub kernel_path: PathBuf,
    /// The journal to read (`journalctl --directory`); the system's when unset.
    pub journal_directory: Option<PathBuf>,
    pub journalctl: PathBuf,
    /// Where this boot's ID is read (it scopes cursors).
    pub boot_id_path: PathBuf,
}

impl Default for LogsSettings {
    fn default() -> Self {
        LogsSettings {
            kernel_path: "/dev/kmsg".into(),
            journal_directory: None,
            journalctl: "journalctl".into(),
            boot_id_path: "/proc/sys/kernel/random/boot_id".into(),
        }
    }
}

impl Capability for PluginLogs {
    const NAME: &'static str = "logs";
    const MUTATIONS: &'static [&'static str] = tend_rules::logs::MUTATIONS;
    type Grant = LogsGrant;
    type Settings = LogsSettings;
    type Limits = NoLimits;
    type Backend = LogsHost;
    type Fake = FakeLogs;

    /// Watch rules reconcile the plugin on matching lines.
    fn host_uses(grant: &LogsGrant) -> bool {
        !grant.watch.is_empty()
    }

    fn describe_grant(grant: &LogsGrant) -> Vec<String> {
        let mut lines = vec![];
        if grant.kernel {
            lines.push("the kernel log".to_string());
        }
        let names: Vec<&str> = grant
            .units
            .iter()
            .map(|u| u.0.as_str())
            .chain(grant.identifiers.iter().map(|i| i.0.as_str()))
            .collect();
        if !names.is_empty() {
            lines.push(format!("journal entries of {}", names.join(", ")));
        }
        for rule in &grant.watch {
            lines.push(format!(
                "watch {}: {} lines matching {:?}",
                rule.rule,
                rule.source.name(),
                rule.pattern.0.as_str()
            ));
        }
        lines
    }

    fn real(settings: &LogsSettings, env: &BackendEnv) -> anyhow::Result<Arc<LogsHost>> {
        let reader = real::RealLogs {
            kmsg: kmsg::Kmsg {
                path: settings.kernel_path.clone(),
            },
            journal: journal::Journalctl {
                program: settings.journalctl.clone(),
                directory: settings.journal_directory.clone(),
            },
            boot_id_path: settings.boot_id_path.clone(),
        };
        Ok(Arc::new(LogsHost {
            reader: Arc::new(reader),
            store: Arc::new(MatchStore::open(Some(env.state_dir.join("logs")))?),
            counts: Arc::default(),
        }))
    }

    fn fake() -> (Arc<LogsHost>, Arc<FakeLogs>) {
        let fake = Arc::new(FakeLogs::default());
        let host = LogsHost {
            reader: fake.clone(),
            store: Arc::new(MatchStore::open(None).expect("an in-memory store opens")),
            counts: Arc::default(),
        };
        (Arc::new(host), fake)
    }

    fn for_call(
        backend: &Arc<LogsHost>,
        grant: &LogsGrant,
        _: &NoLimits,
        call: &Arc<Call>,
    ) -> Self {
        PluginLogs {
            host: backend.clone(),
            grant: grant.clone(),
            call: call.clone(),
        }
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Self,
    ) -> wasmtime::Result<()> {
        logs::add_to_linker::<T, HasSelf<Self>>(linker, get)
    }

    fn watch(backend: &Arc<LogsHost>) -> Option<Box<dyn Watch<LogsGrant>>> {
        Some(Box::new(source::LogSource::new(
            backend.reader.clone(),
            backend.store.clone(),
            backend.counts.clone(),
        )))
    }

    fn render_metrics(backend: &LogsHost, configured: &dyn Fn(&str) -> bool) -> String {
        backend.counts.render(configured)
    }
}

/// The WIT's functions, each on the adapter method that does it.
impl wit::Functions for PluginLogs {
    async fn matches(&self) -> Result<Vec<logs::Matched>, CapError> {
        self.matches().await
    }
    async fn read(
        &self,
        source: logs::Source,
        since: Option<String>,
        filter: logs::Filter,
        max: u32,
    ) -> Result<logs::Page, CapError> {
        self.read(backend::rules_source(source), since, filter, max)
            .await
    }
}
