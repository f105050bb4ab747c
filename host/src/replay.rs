//! Recordings of one reconcile (`tend reconcile NAME --record FILE`) and their
//! replay (`tend replay FILE [--plugin NEW.wasm]`): the file format, reading
//! it with bounds, writing it atomically, and running a plugin against it with
//! fake backends. The tape itself is [`crate::capabilities::tape`].
//!
//! The file is one JSON object, `"format": 1`:
//! `tend_version`, `recorded_at` (RFC 3339), `plugin` (`name`, `file`,
//! `sha256`), `limits` (`memory_bytes`, `timeout_ms`, `min_requeue_ms`),
//! `context` (what the reconcile export was given: config, triggers, node,
//! dry run), `calls` (each `capability`, `operation`, `args`, `answer`) and
//! `outcome` (`{"returned": {health, message, requeue_after_ms}}` or
//! `{"failed": "why"}`).

use crate::capabilities::Services;
use crate::capabilities::limits::Limits;
use crate::capabilities::tape::{Divergence, Entry, RECORD_LIMIT, Tape, TapeEnd, TooLarge};
use crate::config::PluginConfig;
use crate::runtime::{
    CallRequest, CompiledPlugin, Failure, Health, Outcome, ReconcileReport, Runtime, TapedRun,
};
use crate::scheduler::Trigger;
use crate::units::ByteSize;
use crate::wit::types;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The recording format this Tend writes and reads.
pub const FORMAT: u64 = 1;
/// The largest recording file read: the tape's bound (which counts the
/// calls' JSON text), with room for the context and the JSON around the calls.
/// What parsing it may build is bounded apart (see [`Measure`]).
pub const MAX_FILE_BYTES: u64 = RECORD_LIMIT as u64 + (16 << 20);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedPlugin {
    pub name: String,
    pub file: PathBuf,
    /// "sha256:<hex>" of the component that was recorded.
    pub sha256: String,
}

/// The limits a replay runs under: those that bound the plugin itself (the
/// others bound backends, which a replay never reaches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLimits {
    pub memory_bytes: u64,
    pub timeout_ms: u64,
    pub min_requeue_ms: u64,
}

/// What the reconcile export ended with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedOutcome {
    Returned {
        health: Health,
        message: String,
        requeue_after_ms: Option<u64>,
    },
    Failed(String),
}

impl RecordedOutcome {
    pub fn of(result: &Result<Outcome, Failure>) -> Self {
        match result {
            Ok(outcome) => RecordedOutcome::Returned {
                health: outcome.health,
                message: outcome.message.clone(),
                requeue_after_ms: outcome.requeue_after.map(|d| d.as_millis() as u64),
            },
            Err(failure) => RecordedOutcome::Failed(failure.to_string()),
        }
    }
}

impl std::fmt::Display for RecordedOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordedOutcome::Returned {
                health,
                message,
                requeue_after_ms,
            } => {
                write!(f, "{} {message:?}", health.word())?;
                match requeue_after_ms {
                    Some(ms) => write!(f, " (requeue after {ms} ms)"),
                    None => Ok(()),
                }
            }
            RecordedOutcome::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub format: u64,
    pub tend_version: String,
    pub recorded_at: String,
    pub plugin: RecordedPlugin,
    pub limits: RecordedLimits,
    pub context: types::Context,
    pub calls: Vec<Entry>,
    pub outcome: RecordedOutcome,
}

/// What a reconcile's tape produced (see [`crate::runtime::ReconcileReport`]).
#[derive(Debug)]
pub enum Taped {
    Recorded(Result<Box<Recording>, TooLarge>),
    Replayed {
        matched: usize,
        divergence: Option<Box<Divergence>>,
    },
}

/// What the daemon answers `POST /reconcile/NAME?record`: the report as
/// `tend reconcile` prints it, and the recording or why there is none.
#[derive(Debug, Serialize, Deserialize)]
pub struct RecordedAnswer {
    pub report: serde_json::Value,
    pub recording: Result<Box<Recording>, String>,
}

impl RecordedAnswer {
    /// The answer for the report of a recorded reconcile of `plugin`
    /// (configured as `config`).
    pub fn of(
        plugin: &CompiledPlugin,
        config: &PluginConfig,
        report: &mut ReconcileReport,
    ) -> Self {
        let name = &config.name;
        let recording = match Taped::of(report, plugin, config) {
            Some(Taped::Recorded(recording)) => recording.map_err(|e| e.to_string()),
            _ => Err(format!("the reconcile of {name} was not recorded")),
        };
        RecordedAnswer {
            report: report.summary(name),
            recording,
        }
    }
}

impl Taped {
    /// What `report`'s tape holds, taken from it: the recording of a recorded
    /// reconcile of `plugin` (configured as `config`), or how a replay went.
    pub fn of(
        report: &mut ReconcileReport,
        plugin: &CompiledPlugin,
        config: &PluginConfig,
    ) -> Option<Taped> {
        let TapedRun { end, context } = report.tape.take()?;
        Some(match end {
            TapeEnd::Recorded(calls) => Taped::Recorded(calls.map(|calls| {
                Box::new(Recording::new(
                    plugin,
                    config,
                    context,
                    calls,
                    &report.result,
                ))
            })),
            TapeEnd::Replayed {
                matched,
                divergence,
            } => Taped::Replayed {
                matched,
                divergence,
            },
        })
    }
}

impl Recording {
    pub fn new(
        plugin: &CompiledPlugin,
        config: &PluginConfig,
        context: types::Context,
        calls: Vec<Entry>,
        result: &Result<Outcome, Failure>,
    ) -> Self {
        Recording {
            format: FORMAT,
            tend_version: env!("CARGO_PKG_VERSION").to_string(),
            recorded_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            plugin: RecordedPlugin {
                name: config.name.clone(),
                file: plugin.path.clone(),
                sha256: plugin.digest.clone(),
            },
            limits: RecordedLimits {
                memory_bytes: config.limits.memory.0,
                timeout_ms: config.limits.timeout.as_millis() as u64,
                min_requeue_ms: config.limits.min_requeue.as_millis() as u64,
            },
            context,
            calls,
            outcome: RecordedOutcome::of(result),
        }
    }

    /// Read a recording, bounded, refusing what is not one of [`FORMAT`].
    pub fn read(path: &Path) -> anyhow::Result<Recording> {
        let bytes = crate::untrusted::read(path, MAX_FILE_BYTES).with_context(|| {
            format!(
                "cannot read the recording {} (at most {} MiB, more than any recording tend writes)",
                path.display(),
                MAX_FILE_BYTES >> 20
            )
        })?;
        Recording::parse(&bytes).with_context(|| path.display().to_string())
    }

    fn parse(bytes: &[u8]) -> anyhow::Result<Recording> {
        // A first pass builds nothing but these: the file is text an
        // arbitrary list of bytes could fill at 32 bytes of memory per byte.
        #[derive(Deserialize)]
        struct Header {
            format: Option<serde_json::Value>,
            tend_version: Option<serde_json::Value>,
            #[serde(default)]
            calls: Option<Measure>,
        }
        let header: Header = serde_json::from_slice(bytes).map_err(|e| {
            anyhow::anyhow!("not a tend recording (not a JSON object: {e}); record one with `tend reconcile NAME --record FILE`")
        })?;
        let Some(format) = header.format else {
            anyhow::bail!(
                "not a tend recording (no \"format\" field); record one with `tend reconcile NAME --record FILE`"
            );
        };
        if format != FORMAT {
            let by = header
                .tend_version
                .map(|v| format!(" (it was written by tend {v})"))
                .unwrap_or_default();
            anyhow::bail!(
                "a recording of format {format}{by}; this tend ({}) reads format {FORMAT}: replay it with the tend that recorded it, or record it again with this one",
                env!("CARGO_PKG_VERSION")
            );
        }
        let memory = header.calls.map_or(0, |calls| calls.0);
        if memory > RECORD_LIMIT {
            anyhow::bail!(
                "its calls would take {} MiB of memory, more than any recording tend writes ({} MiB)",
                memory >> 20,
                RECORD_LIMIT >> 20
            );
        }
        serde_json::from_slice(bytes)
            .map_err(|e| anyhow::anyhow!("a damaged recording of format {FORMAT}: {e}"))
    }

    /// Write to `path` atomically (a temporary file beside it, fsynced, then
    /// renamed), mode 0600: a recording holds whatever the plugin read.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        crate::atomic::write_with(path, 0o600, |file| {
            let mut buffered = std::io::BufWriter::new(file);
            serde_json::to_writer(&mut buffered, self)?;
            buffered.flush()
        })
        .with_context(|| format!("cannot write the recording {}", path.display()))
    }

    fn plugin_config(&self, file: &Path) -> PluginConfig {
        PluginConfig {
            name: self.context.plugin.clone(),
            enabled: true,
            file: file.to_path_buf(),
            // A replay runs the component it is given, from no registry.
            oci: None,
            interval: None,
            watch: vec![],
            grants: Default::default(),
            limits: Limits {
                memory: ByteSize(self.limits.memory_bytes),
                timeout: Duration::from_millis(self.limits.timeout_ms),
                min_requeue: Duration::from_millis(self.limits.min_requeue_ms),
                ..Limits::default()
            },
            capability_limits: Default::default(),
            scope: Default::default(),
            config_json: self.context.config.clone(),
        }
    }
}

/// The memory the calls' arguments and answers take once parsed, as the tape
/// counts it against [`RECORD_LIMIT`], found by visiting the text without
/// building anything. A shape that is not a list of calls measures whatever:
/// the parse after it refuses it.
struct Measure(usize);

/// What a [`Measure`] visits: the list of calls, one call, or a value in one.
#[derive(Clone, Copy)]
enum Level {
    Calls,
    Call,
    Value,
}

impl<'de> Deserialize<'de> for Measure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::DeserializeSeed::deserialize(Level::Calls, d).map(Measure)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Level {
    type Value = usize;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Level {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_i64<E>(self, _: i64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_u64<E>(self, _: u64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_f64<E>(self, _: f64) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_unit<E>(self) -> Result<usize, E> {
        Ok(NODE)
    }

    fn visit_str<E>(self, text: &str) -> Result<usize, E> {
        Ok(NODE + text.len())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<usize, A::Error> {
        let (item, mut total) = match self {
            Level::Calls => (Level::Call, 0),
            Level::Call | Level::Value => (Level::Value, NODE),
        };
        while let Some(memory) = items.next_element_seed(item)? {
            total += memory;
        }
        Ok(total)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut fields: A) -> Result<usize, A::Error> {
        let mut total = 0;
        while let Some(key) = fields.next_key::<std::borrow::Cow<str>>()? {
            total += match self {
                Level::Call if key != "args" && key != "answer" => {
                    fields.next_value::<serde::de::IgnoredAny>()?;
                    0
                }
                Level::Call => fields.next_value_seed(Level::Value)?,
                Level::Calls | Level::Value => {
                    NODE + key.len() + fields.next_value_seed(Level::Value)?
                }
            };
        }
        Ok(match self {
            Level::Call => total,
            Level::Calls | Level::Value => NODE + total,
        })
    }
}

/// The memory of one parsed JSON value, without what it holds.
const NODE: usize = std::mem::size_of::<serde_json::Value>();

/// How a replay went.
#[derive(Debug)]
pub struct Replayed {
    /// Calls answered from the tape.
    pub matched: usize,
    /// The first call that left the tape.
    pub divergence: Option<Box<Divergence>>,
    /// The plugin's outcome under replay.
    pub outcome: RecordedOutcome,
}

impl Replayed {
    /// The one line `tend replay` prints, and whether the replay matched.
    pub fn verdict(&self, recorded: &RecordedOutcome) -> (bool, String) {
        if let Some(divergence) = &self.divergence {
            return (false, divergence.to_string());
        }
        let calls = self.matched;
        if &self.outcome == recorded {
            return (
                true,
                format!("replayed {calls} calls identically; outcome matches"),
            );
        }
        (
            false,
            format!(
                "replayed {calls} calls identically; outcome differs: expected {recorded}, plugin returned {}",
                self.outcome
            ),
        )
    }
}

/// Run `plugin` (compiled from `file`) against `recording`: every backend a
/// fake, every capability call answered from the tape, the recorded limits.
pub async fn replay(runtime: &Runtime, plugin: &CompiledPlugin, recording: &Recording) -> Replayed {
    // Nothing on the node is reachable, even by a call that were answered
    // for real: the tape answers all of them, and these are fakes.
    let (services, _fakes) = Services::fake();
    let config = recording.plugin_config(&plugin.path);
    let context = &recording.context;
    let request = CallRequest {
        services: &services,
        planned: None,
        triggers: context
            .triggers
            .iter()
            .map(|t| Trigger {
                kind: t.kind.clone(),
                subject: t.subject.clone(),
            })
            .collect(),
        node_name: &context.node_name,
        dry_run: context.dry_run,
        tape: Tape::replay(recording.calls.clone()),
    };
    let mut report = runtime.reconcile(plugin, &config, request).await;
    let outcome = RecordedOutcome::of(&report.result);
    match Taped::of(&mut report, plugin, &config) {
        Some(Taped::Replayed {
            matched,
            divergence,
        }) => Replayed {
            matched,
            divergence,
            outcome,
        },
        other => unreachable!("a replay's tape ends replayed: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording() -> Recording {
        Recording {
            format: FORMAT,
            tend_version: "0.1.0".into(),
            recorded_at: "2026-11-26T03:00:00.000Z".into(),
            plugin: RecordedPlugin {
                name: "p".into(),
                file: "/plugins/p.wasm".into(),
                sha256: "sha256:00".into(),
            },
            limits: RecordedLimits {
                memory_bytes: 1 << 20,
                timeout_ms: 1000,
                min_requeue_ms: 500,
            },
            context: types::Context {
                plugin: "p".into(),
                config: "{}".into(),
                triggers: vec![],
                node_name: "n".into(),
                dry_run: false,
            },
            calls: vec![crate::capabilities::tape::entry("files", "read", &("/x",))],
            outcome: RecordedOutcome::Returned {
                health: Health::Healthy,
                message: "ok".into(),
                requeue_after_ms: None,
            },
        }
    }

    #[test]
    fn a_recording_survives_its_file_and_the_file_is_private() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, "old").unwrap();
        recording().write(&path).unwrap();
        assert_eq!(Recording::read(&path).unwrap(), recording());
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }

    fn read_error(contents: &[u8]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, contents).unwrap();
        format!("{:#}", Recording::read(&path).unwrap_err())
    }

    #[test]
    fn what_is_not_a_recording_of_this_format_is_refused_by_name() {
        let err = read_error(b"\x00\x01garbage");
        assert!(
            err.contains("r.json: not a tend recording (not a JSON object"),
            "{err}"
        );
        let err = read_error(br#"{"calls": []}"#);
        assert!(err.contains("no \"format\" field"), "{err}");
        let err = read_error(br#"{"format": 2, "tend_version": "9.0.0"}"#);
        assert!(
            err.contains("a recording of format 2 (it was written by tend \"9.0.0\"); this tend")
                && err.contains("reads format 1"),
            "{err}"
        );
        let mut damaged = serde_json::to_value(recording()).unwrap();
        damaged["calls"] = serde_json::json!("not a list");
        let err = read_error(damaged.to_string().as_bytes());
        assert!(err.contains("a damaged recording of format 1"), "{err}");
    }

    #[test]
    fn a_huge_file_is_refused_before_it_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.json");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_FILE_BYTES + 1).unwrap();
        let err = format!("{:#}", Recording::read(&path).unwrap_err());
        assert!(err.contains("larger than the 80 MiB read here"), "{err}");
    }

    #[test]
    fn calls_that_would_parse_past_the_bound_are_refused_before_they_are_built() {
        let mut calls = serde_json::to_value(recording()).unwrap();
        let calls_alone = serde_json::to_vec(&calls["calls"]).unwrap();
        let measured: Measure = serde_json::from_slice(&calls_alone).unwrap();
        let entries: Vec<Entry> = serde_json::from_slice(&calls_alone).unwrap();
        let counted: usize = entries
            .iter()
            .map(|e| memory(&e.args) + e.answer.as_ref().map_or(0, memory))
            .sum();
        assert_eq!(measured.0, counted);

        // Within the file cap, but a list of bytes as JSON takes 16 times its
        // text (written as text here, so the test builds no such value).
        calls["calls"][0]["args"] = serde_json::json!("bytes");
        let bytes = format!("[[{}0]]", "0,".repeat(RECORD_LIMIT / 16));
        let text = calls.to_string().replace("\"bytes\"", &bytes);
        let err = read_error(text.as_bytes());
        assert!(err.contains("more than any recording tend writes"), "{err}");
    }

    /// What the tape counts for a value's memory.
    fn memory(value: &serde_json::Value) -> usize {
        NODE + match value {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(items) => items.iter().map(memory).sum(),
            serde_json::Value::Object(fields) => {
                fields.iter().map(|(k, v)| k.len() + NODE + memory(v)).sum()
            }
            _ => 0,
        }
    }

    #[test]
    fn the_verdict_names_the_divergence_or_the_outcome_that_differs() {
        let recorded = recording().outcome;
        let same = Replayed {
            matched: 3,
            divergence: None,
            outcome: recorded.clone(),
        };
        assert_eq!(
            same.verdict(&recorded),
            (true, "replayed 3 calls identically; outcome matches".into())
        );
        let other = Replayed {
            outcome: RecordedOutcome::Failed("trapped: x".into()),
            ..same
        };
        assert_eq!(
            other.verdict(&recorded),
            (
                false,
                "replayed 3 calls identically; outcome differs: expected healthy \"ok\", plugin returned failed: trapped: x".into()
            )
        );
        let diverged = Replayed {
            divergence: Some(Box::new(Divergence {
                index: 0,
                expected: Some(recording().calls[0].clone()),
                got: None,
            })),
            ..other
        };
        assert_eq!(
            diverged.verdict(&recorded).1,
            "diverged at call 1: expected files.read(\"/x\"), the plugin made no more calls"
        );
    }
}
