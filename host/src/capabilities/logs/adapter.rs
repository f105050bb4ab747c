//! The per-call face of `logs`: the matches that woke the plugin, and bounded
//! reads of what its grant covers.

use super::backend::{Entry, LogReader, Matched, Page, Position, rules_source};
use super::grants::{self, Filter, LineFacts, LogsGrant, Source};
use super::store::MatchStore;
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use std::sync::Arc;

/// The most lines one `read` looks at (those its grant or filter leave out
/// count too): a read of a busy journal for a rare unit ends, and says where
/// it stopped.
pub const SCAN: usize = 50_000;

/// The source and the store every plugin's adapter shares.
pub struct LogsHost {
    pub reader: Arc<dyn LogReader>,
    pub store: Arc<MatchStore>,
    pub counts: Arc<super::counts::Counts>,
}

pub struct PluginLogs {
    pub(super) host: Arc<LogsHost>,
    pub(super) grant: LogsGrant,
    pub(super) call: Arc<Call>,
}

impl PluginLogs {
    /// The plugin's untaken matches of the rules it still has; taken (and
    /// saved, off the async workers), except in a dry run.
    pub(super) async fn matches(&self) -> Result<Vec<Matched>, CapError> {
        self.grant.check_matches(&self.call.plugin)?;
        let rules: Vec<String> = self.grant.watch.iter().map(|r| r.rule.clone()).collect();
        let take = !self.call.dry_run;
        let (store, plugin) = (self.host.store.clone(), self.call.plugin.clone());
        tokio::task::spawn_blocking(move || {
            store.with(&plugin, take, |kept| {
                let pending = if take {
                    std::mem::take(&mut kept.pending)
                } else {
                    kept.pending.clone()
                };
                pending
                    .into_iter()
                    .filter(|m| rules.contains(&m.rule))
                    .collect()
            })
        })
        .await
        .map_err(|e| CapError::Unavailable(format!("taking the matches: {e}")))
    }

    pub(super) async fn read(
        &self,
        source: Source,
        since: Option<String>,
        filter: crate::wit::logs::Filter,
        max: u32,
    ) -> Result<Page, CapError> {
        tend_rules::logs::check_max(max)?;
        let wanted = Filter {
            units: &filter.units,
            identifiers: &filter.identifiers,
            max_priority: filter.max_priority,
        };
        grants::check_read(&self.grant, &self.call.plugin, source, &wanted)?;
        let after = since
            .as_deref()
            .map(|c| Position::parse(source, c))
            .transpose()?;
        let reader = self.host.reader.clone();
        let scanned =
            tokio::task::spawn_blocking(move || reader.read(source, after.as_ref(), SCAN))
                .await
                .map_err(|e| CapError::Unavailable(format!("reading the log: {e}")))??;
        let mut page = Page {
            entries: vec![],
            cursor: since,
            gap: scanned.gap,
        };
        for line in scanned.lines {
            page.cursor = Some(line.position.cursor());
            if self.shows(&line.entry, &wanted) {
                self.call.spend_read("logs read", size(&line.entry))?;
                page.entries.push(line.entry);
                if page.entries.len() == max as usize {
                    break;
                }
            }
        }
        Ok(page)
    }

    fn shows(&self, entry: &Entry, filter: &Filter) -> bool {
        let facts = LineFacts {
            source: rules_source(entry.source),
            priority: entry.priority,
            unit: entry.unit.as_deref(),
            identifier: entry.identifier.as_deref(),
        };
        self.grant.covers(&facts) && filter.passes(&facts)
    }
}

/// What an entry costs the plugin's `read-per-reconcile`: its texts.
fn size(entry: &Entry) -> u64 {
    let fields: usize = entry.fields.iter().map(|(k, v)| k.len() + v.len()).sum();
    (entry.message.len() + entry.cursor.len() + fields + 64) as u64
}
