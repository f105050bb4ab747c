//! The per-call face of `conditions`: a report is checked against the
//! grant (type first, then reason, message and TTL), passes the gate as a
//! change of the Node (a dry run shows it and holds nothing), and is handed
//! to the host's writer. A renewal of the same report only moves its TTL:
//! it changes nothing on the Node, so it is not journaled.

use super::book::{self, Shown};
use super::grants::{
    ConditionsGrant, Granted, MAX_MESSAGE, check_condition, check_list, check_note, check_ttl,
};
use super::writer::{ConditionsHost, now};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Intent;
use crate::text::{cut, inert};
use crate::wit::conditions::{Held, Report};
use std::sync::Arc;

pub struct PluginConditions {
    pub(super) host: Arc<ConditionsHost>,
    pub(super) grant: ConditionsGrant,
    pub(super) call: Arc<Call>,
}

/// A condition's status as the Node shows it.
fn status(active: bool) -> &'static str {
    if active { "True" } else { "False" }
}

fn said(shown: &Shown) -> String {
    format!(
        "{} {}: {}",
        status(shown.active),
        shown.reason,
        shown.message
    )
}

impl PluginConditions {
    pub(super) async fn set(&self, report: Report) -> Result<(), CapError> {
        let granted = check_condition(&self.grant, &report.condition)?;
        check_note(&report.reason, &report.message)?;
        check_ttl(report.ttl_seconds)?;
        self.report(
            granted,
            true,
            report.reason,
            &report.message,
            report.ttl_seconds,
        )
        .await
    }

    pub(super) async fn clear(
        &self,
        condition: String,
        reason: String,
        message: String,
    ) -> Result<(), CapError> {
        let granted = check_condition(&self.grant, &condition)?;
        check_note(&reason, &message)?;
        self.report(granted, false, reason, &message, None).await
    }

    pub(super) async fn list(&self) -> Result<Vec<Held>, CapError> {
        check_list(&self.grant)?;
        let now = now();
        let book = self.host.book.lock().unwrap();
        Ok(book
            .of(&self.call.plugin)
            .map(|(condition, held)| Held {
                condition: condition.clone(),
                active: held.now.active,
                reason: held.now.reason.clone(),
                message: held.now.message.clone(),
                since: held.now.since,
                expires_in: held
                    .expires
                    .map(|at| at.saturating_sub(now).min(u64::from(u32::MAX)) as u32),
                written: held.written.as_ref() == Some(&held.now),
            })
            .collect())
    }

    async fn report(
        &self,
        granted: &Granted,
        active: bool,
        reason: String,
        message: &str,
        ttl: Option<u32>,
    ) -> Result<(), CapError> {
        let report = book::Report {
            owner: &self.call.plugin,
            granted,
            active,
            reason,
            // Shown on the Node and in kubectl: inert, and bounded again
            // once escaped.
            message: cut(inert(message).into_owned(), MAX_MESSAGE),
            ttl,
        };
        let now = now();
        // What the Node shows of it now; None: a renewal, which changes nothing.
        let before = {
            let book = self.host.book.lock().unwrap();
            book.changes(&report).then(|| {
                book.conditions
                    .get(&granted.condition)
                    .filter(|held| !held.orphaned)
                    .map(|held| said(&held.now))
                    .unwrap_or_else(|| "(not on the Node)".to_string())
            })
        };
        let Some(before) = before else {
            if !self.call.dry_run {
                self.host.take(report, now);
            }
            return Ok(());
        };
        let after = format!("{} {}: {}", status(active), report.reason, report.message);
        let intent = Intent {
            capability: "conditions",
            operation: if active { "set" } else { "clear" },
            target: granted.condition.clone(),
            detail: after.clone(),
            diff: Some(format!(
                "condition {}\n- {before}\n+ {after}\n",
                granted.condition
            )),
        };
        self.call
            .gate
            .mutate(intent, Ok(()), |_permit| async {
                self.host.take(report, now);
                Ok(())
            })
            .await
    }
}
