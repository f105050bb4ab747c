//! A reconcile's capability calls on tape, for `tend reconcile --record` and
//! `tend replay`. Every capability call passes [`Call::answer`](super::Call::answer),
//! which hands it to the call's tape:
//!
//! - off (every scheduled reconcile): the real work runs; nothing is kept;
//! - record: the real work runs, and (capability, operation, arguments,
//!   answer) are kept as JSON in call order, up to [`RECORD_LIMIT`] bytes;
//! - replay: the real work is never run (not even polled); the call must be
//!   the next one on the tape, and gets the recorded answer. The first call
//!   that differs (or a call past the end) is the divergence: it traps the
//!   plugin, and every later call traps too.
//!
//! Calls are ordered when they start (`http.send-all` starts its sends in
//! list order), so concurrent calls record and replay in a stable order.

use crate::wit::types;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Mutex;

/// What a recording may hold, arguments and answers together: the bytes of
/// their JSON text plus the memory of their parsed values (a `list<u8>` is a
/// JSON array, about 32 bytes of memory per byte), so that both the file and
/// what the recording daemon holds are bounded. Each argument list and answer
/// is measured against what is left before its JSON value is built (see
/// [`fits`]), so a call past the bound costs no memory for its recording.
pub const RECORD_LIMIT: usize = 64 << 20;

/// Characters of a call's arguments shown in a divergence.
const SHOWN_ARGS: usize = 200;

/// The arguments of an operation that takes none: `[]`.
pub const NO_ARGS: [(); 0] = [];

/// One capability call and what it answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub capability: String,
    pub operation: String,
    /// The call's arguments, a JSON array in WIT order.
    pub args: Value,
    /// `{"Ok": ...}` or `{"Err": {"<error case>": "..."}}`; absent when the
    /// call never returned (the reconcile was cut off while it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
}

impl Entry {
    /// `files.read("/x")`, the arguments cut at [`SHOWN_ARGS`] characters.
    pub fn shown(&self) -> String {
        let mut args = match &self.args {
            Value::Array(args) => args
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        if args.len() > SHOWN_ARGS {
            let cut = (0..=SHOWN_ARGS)
                .rev()
                .find(|&i| args.is_char_boundary(i))
                .unwrap_or(0);
            args.truncate(cut);
            args.push_str("...");
        }
        format!("{}.{}({args})", self.capability, self.operation)
    }
}

/// Where a replay left its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// 0-based position on the tape.
    pub index: usize,
    /// The recorded call there; None past the end of the tape.
    pub expected: Option<Entry>,
    /// What the plugin called instead; None when it made no more calls.
    pub got: Option<Entry>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let expected = match &self.expected {
            Some(entry) => format!("expected {}", entry.shown()),
            None => "expected no more calls".to_string(),
        };
        let got = match &self.got {
            Some(entry) => format!("plugin called {}", entry.shown()),
            None => "the plugin made no more calls".to_string(),
        };
        write!(f, "diverged at call {}: {expected}, {got}", self.index + 1)
    }
}

/// The recording went past [`RECORD_LIMIT`]: it stopped at `call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// 0-based index of the first call not kept.
    pub call: usize,
    pub limit: usize,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recording too large: it passed {} MiB at call {}; a reconcile that reads or writes this much cannot be recorded",
            self.limit >> 20,
            self.call + 1
        )
    }
}

/// What a tape holds when its reconcile is over.
#[derive(Debug, Clone, PartialEq)]
pub enum TapeEnd {
    Recorded(Result<Vec<Entry>, TooLarge>),
    Replayed {
        /// Calls that matched the tape.
        matched: usize,
        divergence: Option<Box<Divergence>>,
    },
}

#[derive(Default)]
pub struct Recorder {
    limit: usize,
    calls: Vec<Entry>,
    bytes: usize,
    too_large: Option<TooLarge>,
}

impl Recorder {
    /// Whether `value` (with `extra` bytes) still fits the recording, which
    /// stops at `call` when it does not (or stopped already).
    fn fits(&mut self, call: usize, value: &impl Serialize, extra: usize) -> bool {
        if self.too_large.is_some() {
            return false;
        }
        let left = self.limit.checked_sub(self.bytes + extra);
        if !left.is_some_and(|left| fits(value, left)) {
            self.too_large = Some(TooLarge {
                call,
                limit: self.limit,
            });
            return false;
        }
        true
    }
}

pub struct Player {
    calls: Vec<Entry>,
    next: usize,
    divergence: Option<Divergence>,
}

pub enum Tape {
    Off,
    Record(Mutex<Recorder>),
    Replay(Mutex<Player>),
}

/// The JSON of `value`; a WIT value always serializes.
fn json(value: &impl Serialize) -> Value {
    serde_json::to_value(value).expect("a WIT value serializes to JSON")
}

/// Whether the JSON value of `value` would cost at most `budget`, found
/// without building it: serialized into a counter that stops at the budget.
/// The count is an upper bound of [`cost`]: serde_json writes every node with
/// at least one write (so a node per write bounds the nodes), and a string's
/// memory is at most its text (so the text twice bounds text and strings).
fn fits(value: &impl Serialize, budget: usize) -> bool {
    struct Bound {
        count: usize,
        budget: usize,
    }
    impl std::io::Write for Bound {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.count += std::mem::size_of::<Value>() + 2 * buf.len();
            if self.count > self.budget {
                return Err(std::io::Error::other("past the recording's bound"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Bound { count: 0, budget }, value).is_ok()
}

/// What `value` costs a recording: its JSON text and its memory.
fn cost(value: &Value) -> usize {
    json_len(value) + memory(value)
}

/// Bytes of memory `value` holds (the nodes and their strings).
fn memory(value: &Value) -> usize {
    let node = std::mem::size_of::<Value>();
    node + match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(memory).sum(),
        Value::Object(fields) => fields.iter().map(|(k, v)| k.len() + node + memory(v)).sum(),
        _ => 0,
    }
}

/// Bytes of `value` as JSON text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("counting cannot fail");
    count.0
}

/// Where a recorded call goes on the tape; None once the recording is too large.
pub struct Slot(Option<usize>);

impl Tape {
    pub fn record() -> Tape {
        Tape::record_up_to(RECORD_LIMIT)
    }

    fn record_up_to(limit: usize) -> Tape {
        Tape::Record(Mutex::new(Recorder {
            limit,
            ..Recorder::default()
        }))
    }

    pub fn replay(calls: Vec<Entry>) -> Tape {
        Tape::Replay(Mutex::new(Player {
            calls,
            next: 0,
            divergence: None,
        }))
    }

    /// Record mode: keep a call as it starts.
    pub fn begin(
        recorder: &Mutex<Recorder>,
        capability: &str,
        operation: &str,
        args: &impl Serialize,
    ) -> Slot {
        let mut recorder = recorder.lock().unwrap();
        let index = recorder.calls.len();
        let names = capability.len() + operation.len();
        if !recorder.fits(index, args, names) {
            return Slot(None);
        }
        let entry = entry(capability, operation, args);
        recorder.bytes += cost(&entry.args) + names;
        recorder.calls.push(entry);
        Slot(Some(index))
    }

    /// Record mode: keep what a call answered.
    pub fn end<T: Serialize>(
        recorder: &Mutex<Recorder>,
        slot: Slot,
        answer: &Result<T, types::Error>,
    ) {
        let Slot(Some(index)) = slot else { return };
        let mut recorder = recorder.lock().unwrap();
        if !recorder.fits(index, answer, 0) {
            return;
        }
        let answer = json(answer);
        recorder.bytes += cost(&answer);
        recorder.calls[index].answer = Some(answer);
    }

    /// Replay mode: the recorded answer to `got` if it is the next call on
    /// the tape; otherwise the divergence, as a trap.
    pub fn play<T: DeserializeOwned>(
        player: &Mutex<Player>,
        got: Entry,
    ) -> wasmtime::Result<Result<T, types::Error>> {
        let mut player = player.lock().unwrap();
        if let Some(divergence) = &player.divergence {
            return Err(wasmtime::Error::msg(format!(
                "replay stopped earlier: {divergence}"
            )));
        }
        let index = player.next;
        let expected = player.calls.get(index);
        let same = expected.is_some_and(|e| {
            e.capability == got.capability && e.operation == got.operation && e.args == got.args
        });
        if !same {
            let divergence = Divergence {
                index,
                expected: expected.cloned(),
                got: Some(got),
            };
            let message = divergence.to_string();
            player.divergence = Some(divergence);
            return Err(wasmtime::Error::msg(message));
        }
        player.next += 1;
        let entry = &player.calls[index];
        let Some(answer) = &entry.answer else {
            return Err(wasmtime::Error::msg(format!(
                "call {} ({}) never returned when it was recorded: the recorded reconcile was cut off there",
                index + 1,
                entry.shown()
            )));
        };
        serde_json::from_value(answer.clone()).map_err(|e| {
            wasmtime::Error::msg(format!(
                "call {} ({}): the recorded answer does not fit the call: {e}",
                index + 1,
                entry.shown()
            ))
        })
    }

    /// What the tape holds now that its reconcile is over; None when off.
    pub fn finish(&self) -> Option<TapeEnd> {
        match self {
            Tape::Off => None,
            Tape::Record(recorder) => {
                let mut recorder = recorder.lock().unwrap();
                let calls = std::mem::take(&mut recorder.calls);
                Some(TapeEnd::Recorded(match recorder.too_large.take() {
                    Some(too_large) => Err(too_large),
                    None => Ok(calls),
                }))
            }
            Tape::Replay(player) => {
                let mut player = player.lock().unwrap();
                let left = player.calls.get(player.next).cloned();
                let divergence = player.divergence.take().or_else(|| {
                    left.map(|expected| Divergence {
                        index: player.next,
                        expected: Some(expected),
                        got: None,
                    })
                });
                let divergence = divergence.map(Box::new);
                Some(TapeEnd::Replayed {
                    matched: player.next,
                    divergence,
                })
            }
        }
    }
}

/// The entry of a call as it starts: its arguments as JSON, no answer yet.
pub fn entry(capability: &str, operation: &str, args: &impl Serialize) -> Entry {
    Entry {
        capability: capability.to_string(),
        operation: operation.to_string(),
        args: json(args),
        answer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Answer = Result<Option<Vec<u8>>, types::Error>;

    fn record(tape: &Tape, operation: &str, key: &str, answer: Answer) {
        let Tape::Record(recorder) = tape else {
            panic!("not recording")
        };
        let slot = Tape::begin(recorder, "state", operation, &(key,));
        Tape::end(recorder, slot, &answer);
    }

    fn play(tape: &Tape, operation: &str, key: &str) -> wasmtime::Result<Answer> {
        let Tape::Replay(player) = tape else {
            panic!("not replaying")
        };
        Tape::play(player, entry("state", operation, &(key,)))
    }

    fn recorded(tape: &Tape) -> Vec<Entry> {
        match tape.finish() {
            Some(TapeEnd::Recorded(Ok(calls))) => calls,
            other => panic!("{other:?}"),
        }
    }

    fn two_calls() -> Vec<Entry> {
        let tape = Tape::record();
        record(&tape, "get", "a", Ok(Some(b"1".to_vec())));
        record(&tape, "get", "b", Err(types::Error::NotFound("b".into())));
        recorded(&tape)
    }

    #[test]
    fn a_recording_keeps_calls_in_order_with_their_answers_as_json() {
        let calls = two_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].shown(), r#"state.get("a")"#);
        assert_eq!(calls[0].answer, Some(serde_json::json!({"Ok": [49]})));
        assert_eq!(
            calls[1].answer,
            Some(serde_json::json!({"Err": {"NotFound": "b"}}))
        );
        assert_eq!(Tape::Off.finish(), None);
    }

    #[test]
    fn a_replay_of_the_same_calls_gets_the_recorded_answers() {
        let tape = Tape::replay(two_calls());
        assert_eq!(play(&tape, "get", "a").unwrap(), Ok(Some(b"1".to_vec())));
        assert_eq!(
            play(&tape, "get", "b").unwrap(),
            Err(types::Error::NotFound("b".into()))
        );
        assert_eq!(
            tape.finish(),
            Some(TapeEnd::Replayed {
                matched: 2,
                divergence: None
            })
        );
    }

    #[test]
    fn the_first_differing_call_is_the_divergence_and_stops_the_replay() {
        let tape = Tape::replay(two_calls());
        play(&tape, "get", "a").unwrap().unwrap();
        let trap = play(&tape, "get", "c").unwrap_err().to_string();
        assert_eq!(
            trap,
            r#"diverged at call 2: expected state.get("b"), plugin called state.get("c")"#
        );
        // Later calls trap too, naming the first divergence.
        let later = play(&tape, "get", "b").unwrap_err().to_string();
        assert!(
            later.contains("replay stopped earlier: diverged at call 2"),
            "{later}"
        );
        let Some(TapeEnd::Replayed {
            matched: 1,
            divergence: Some(divergence),
        }) = tape.finish()
        else {
            panic!("no divergence")
        };
        assert_eq!(divergence.index, 1);
        assert_eq!(divergence.got.unwrap().args, serde_json::json!(["c"]));
    }

    #[test]
    fn fewer_or_more_calls_than_recorded_diverge() {
        let fewer = Tape::replay(two_calls());
        play(&fewer, "get", "a").unwrap().unwrap();
        let Some(TapeEnd::Replayed {
            divergence: Some(divergence),
            ..
        }) = fewer.finish()
        else {
            panic!("no divergence")
        };
        assert_eq!(
            divergence.to_string(),
            r#"diverged at call 2: expected state.get("b"), the plugin made no more calls"#
        );

        let more = Tape::replay(two_calls());
        play(&more, "get", "a").unwrap().unwrap();
        play(&more, "get", "b").unwrap().unwrap_err();
        let trap = play(&more, "set", "c").unwrap_err().to_string();
        assert_eq!(
            trap,
            r#"diverged at call 3: expected no more calls, plugin called state.set("c")"#
        );
    }

    #[test]
    fn an_answer_of_another_type_or_a_call_cut_off_traps_with_the_call() {
        let mut calls = two_calls();
        calls[0].answer = Some(serde_json::json!({"Ok": "not bytes"}));
        calls[1].answer = None;
        let tape = Tape::replay(calls);
        let trap = play(&tape, "get", "a").unwrap_err().to_string();
        assert!(
            trap.contains("call 1 (state.get(\"a\")): the recorded answer does not fit"),
            "{trap}"
        );
        let trap = play(&tape, "get", "b").unwrap_err().to_string();
        assert!(
            trap.contains("never returned when it was recorded"),
            "{trap}"
        );
    }

    #[test]
    fn a_recording_past_its_limit_stops_and_says_where() {
        // Ten bytes cost their text ("7," each) and a node each.
        let ten = cost(&json(&Ok::<_, types::Error>(Some(vec![7u8; 10]))));
        assert!(ten > 10 * (2 + std::mem::size_of::<Value>()), "{ten}");
        let tape = Tape::record_up_to(1000);
        record(&tape, "get", "a", Ok(Some(vec![7; 10])));
        record(&tape, "get", "b", Ok(Some(vec![7; 100])));
        record(&tape, "get", "c", Ok(None));
        let Some(TapeEnd::Recorded(Err(too_large))) = tape.finish() else {
            panic!("not too large")
        };
        assert_eq!(
            too_large,
            TooLarge {
                call: 1,
                limit: 1000
            }
        );
        assert!(too_large.to_string().contains("at call 2"), "{too_large}");
    }

    #[test]
    fn an_argument_past_the_bound_ends_the_recording_without_being_built() {
        // As a JSON value this would take over 3 GiB; measured, it stops at
        // the bound. (Zeroed pages are not touched past the first ones.)
        let huge = vec![0u8; 100 << 20];
        let tape = Tape::record_up_to(1 << 20);
        record(&tape, "get", "a", Ok(None));
        let Tape::Record(recorder) = &tape else {
            unreachable!()
        };
        let slot = Tape::begin(recorder, "files", "write", &("/x", &huge));
        Tape::end(recorder, slot, &Ok::<_, types::Error>(()));
        let Some(TapeEnd::Recorded(Err(too_large))) = tape.finish() else {
            panic!("not too large")
        };
        assert_eq!(too_large.call, 1);
    }

    #[test]
    fn the_measure_bounds_the_cost() {
        for value in [
            json(&Ok::<_, types::Error>(Some(vec![7u8; 100]))),
            json(&("/x", "é".repeat(50) + "\"", [("k", 1), ("", 2)])),
            json(&Err::<(), _>(types::Error::NotFound("b".into()))),
        ] {
            // Never under the cost, and not far over it.
            let cost = cost(&value);
            assert!(!fits(&value, cost - 1), "{value}");
            assert!(fits(&value, 4 * cost), "{value}");
        }
    }

    #[test]
    fn long_arguments_are_cut_when_shown() {
        let long = entry("files", "write", &("/x", "é".repeat(500)));
        let shown = long.shown();
        assert!(shown.starts_with("files.write(\"/x\", \"éé"), "{shown}");
        assert!(shown.ends_with("...)") && shown.len() < 260, "{shown}");
    }
}
