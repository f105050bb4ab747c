//! What every adapter of one reconcile shares: who calls, whether it is a dry
//! run, the mutation gate, how often each operation was called, and the tape
//! every capability call passes ([`Call::answer`]).

use super::error::CapError;
use super::gate::Gate;
use super::limits::{Limits, raise};
use super::tape::{self, Tape};
use crate::capabilities::limits::over_limit;
use crate::wit::types;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a reconcile called one capability operation with one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallCount {
    pub capability: &'static str,
    pub operation: &'static str,
    /// "ok" or the error case.
    pub result: &'static str,
    pub count: u64,
}

type CountKey = (&'static str, &'static str, &'static str);

pub struct Call {
    pub plugin: String,
    pub dry_run: bool,
    pub limits: Limits,
    pub gate: Gate,
    counts: Mutex<BTreeMap<CountKey, u64>>,
    /// Bytes handed to the plugin by reads so far.
    read_bytes: AtomicU64,
    /// When the reconcile's deadline ([`Limits::timeout`]) started counting.
    started: Instant,
    /// Off, or recording or replaying this reconcile's capability calls.
    pub tape: Tape,
}

impl Call {
    pub fn new(gate: Gate, limits: Limits) -> Arc<Call> {
        Call::taped(gate, limits, Tape::Off)
    }

    pub fn taped(gate: Gate, limits: Limits, tape: Tape) -> Arc<Call> {
        Arc::new(Call {
            plugin: gate.plugin().to_string(),
            dry_run: gate.dry_run(),
            limits,
            gate,
            counts: Mutex::default(),
            read_bytes: AtomicU64::new(0),
            started: Instant::now(),
            tape,
        })
    }

    /// What is left of the reconcile's deadline: a host call that needs longer
    /// (a long pull) is refused up front instead of being cut off.
    pub fn remaining(&self) -> Duration {
        self.limits.timeout.saturating_sub(self.started.elapsed())
    }

    /// Would `bytes` more still fit in the reconcile's read allowance? For a
    /// read that arrives in parts, checked before holding the next part; the
    /// whole is spent once with [`Call::spend_read`].
    pub fn check_read(&self, what: &str, bytes: u64) -> Result<(), CapError> {
        let cap = self.limits.read_per_reconcile;
        let total = self.read_bytes.load(Ordering::Relaxed) + bytes;
        if total > cap.0 {
            return Err(over_limit(&format!(
                "{what}: this reconcile would have read {total} bytes; {}",
                raise(&self.plugin, "read-per-reconcile", cap)
            )));
        }
        Ok(())
    }

    /// Spend `bytes` of the reconcile's read allowance.
    pub fn spend_read(&self, what: &str, bytes: u64) -> Result<(), CapError> {
        let cap = self.limits.read_per_reconcile;
        let total = self.read_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total > cap.0 {
            return Err(over_limit(&format!(
                "{what}: this reconcile has read {total} bytes; {}",
                raise(&self.plugin, "read-per-reconcile", cap)
            )));
        }
        Ok(())
    }

    /// Answer one capability call: `work(args)` is the real work, run only
    /// when the tape is off or recording; a replay answers from the tape
    /// without polling it. The call is counted by its result either way; the
    /// error is what the guest sees, a trap only when a replay diverged.
    pub async fn answer<A, T, F>(
        &self,
        capability: &'static str,
        operation: &'static str,
        args: A,
        work: impl FnOnce(A) -> F,
    ) -> wasmtime::Result<Result<T, types::Error>>
    where
        A: Serialize,
        T: Serialize + DeserializeOwned,
        F: Future<Output = Result<T, CapError>>,
    {
        let (label, result) = match &self.tape {
            Tape::Off => labelled(work(args).await),
            Tape::Record(recorder) => {
                let slot = Tape::begin(recorder, capability, operation, &args);
                let (label, result) = labelled(work(args).await);
                Tape::end(recorder, slot, &result);
                (label, result)
            }
            Tape::Replay(player) => {
                let result = Tape::play(player, tape::entry(capability, operation, &args))?;
                let label = match &result {
                    Ok(_) => "ok",
                    Err(e) => CapError::from(e.clone()).kind(),
                };
                (label, result)
            }
        };
        *self
            .counts
            .lock()
            .unwrap()
            .entry((capability, operation, label))
            .or_default() += 1;
        Ok(result)
    }

    pub fn counts(&self) -> Vec<CallCount> {
        self.counts
            .lock()
            .unwrap()
            .iter()
            .map(|(&(capability, operation, result), &count)| CallCount {
                capability,
                operation,
                result,
                count,
            })
            .collect()
    }
}

/// A call's result as the guest sees it, with its count label ("ok" or the error case).
fn labelled<T>(result: Result<T, CapError>) -> (&'static str, Result<T, types::Error>) {
    let label = result.as_ref().map_or_else(CapError::kind, |_| "ok");
    (label, result.map_err(types::Error::from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::tape::TapeEnd;
    use crate::capabilities::testing::{call, call_on_tape};

    async fn get(call: &Call, key: &str, work: Result<u32, CapError>) -> Result<u32, types::Error> {
        call.answer("state", "get", (key.to_string(),), |_| async { work })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn every_call_is_counted_by_its_result_with_the_tape_off() {
        let call = call("p", false);
        assert_eq!(get(&call, "a", Ok(1)).await, Ok(1));
        let missing = get(&call, "b", Err(CapError::NotFound("b".into()))).await;
        assert_eq!(missing, Err(types::Error::NotFound("b".into())));
        let labels: Vec<_> = call.counts().iter().map(|c| (c.result, c.count)).collect();
        assert_eq!(labels, [("not-found", 1), ("ok", 1)]);
        assert!(call.tape.finish().is_none());
    }

    #[tokio::test]
    async fn a_replay_answers_from_the_recording_and_never_runs_the_work() {
        let recording = call_on_tape("p", Tape::record());
        get(&recording, "a", Ok(7)).await.unwrap();
        let Some(TapeEnd::Recorded(Ok(calls))) = recording.tape.finish() else {
            panic!("not recorded")
        };
        let replay = call_on_tape("p", Tape::replay(calls));
        let answered = replay
            .answer("state", "get", ("a".to_string(),), |_| async {
                unreachable!("a replay ran the real work")
            })
            .await
            .unwrap();
        assert_eq!(answered, Ok::<u32, _>(7));
        assert_eq!(replay.counts()[0].result, "ok");
        // A call off the tape traps, and its work is not run either.
        let diverged = replay
            .answer("state", "set", ("a".to_string(),), |_| async {
                unreachable!("a replay ran the real work")
            })
            .await;
        let trap: wasmtime::Error = diverged.map(|_: Result<(), _>| ()).unwrap_err();
        assert!(trap.to_string().starts_with("diverged at call 2"), "{trap}");
    }
}
