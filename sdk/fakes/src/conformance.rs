//! The shared case table (`tend_conformance`) through this module's
//! JSON requests, as the Python and JavaScript SDKs run it: the Rust SDK's
//! fakes answer every case as the host does.

use crate::tests::{ask, new_host};
use serde_json::{Value, json};
use tend_conformance::{Case, PLUGIN, cases, fixture, outcome};

/// A host of the table's plugin on the fixture, with the case's grants.
fn host_for(case: &Case) -> u64 {
    let host = new_host(PLUGIN);
    let grants = case.grants();
    let grants = grants.as_object().expect("grants by capability");
    let setups = fixture::setup_requests().into_iter().chain(
        grants
            .iter()
            .map(|(cap, grant)| json!({"fake": cap, "fn": "grant", "args": {"grant": grant}})),
    );
    for mut setup in setups {
        setup["op"] = json!("setup");
        setup["host"] = json!(host);
        let answer = ask(setup.clone());
        assert!(answer.get("ok").is_some(), "{setup}: {answer}");
    }
    for mut seed in fixture::seed_calls() {
        seed["op"] = json!("call");
        seed["host"] = json!(host);
        let answer = ask(seed.clone());
        assert!(answer.get("ok").is_some(), "{seed}: {answer}");
    }
    host
}

#[test]
fn the_fakes_answer_every_case_as_the_table_says() {
    let mut wrong = Vec::new();
    for case in cases() {
        let host = host_for(&case);
        let (cap, function, args) = case.op.call();
        let answer: Value =
            ask(json!({"op": "call", "host": host, "cap": cap, "fn": function, "args": args}));
        let got = outcome(cap, function, &answer);
        if got != case.expect {
            wrong.push(format!(
                "{cap}.{function} {args:.200}\n  expected {:?}\n  got      {got:?}",
                case.expect
            ));
        }
        ask(json!({"op": "drop", "host": host}));
    }
    assert!(
        wrong.is_empty(),
        "{} cases differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
