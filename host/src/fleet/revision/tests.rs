use super::*;

fn plugins(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_string()))
        .collect()
}

#[test]
fn a_revision_names_the_config_and_every_plugin_and_nothing_else() {
    let base = revision(
        "a = 1\n",
        &plugins(&[("p", "sha256:aa"), ("q", "sha256:bb")]),
    );
    assert!(is_revision(&base), "{base}");
    // The same content, however the map was built: the same revision.
    let again = revision(
        "a = 1\n",
        &plugins(&[("q", "sha256:bb"), ("p", "sha256:aa")]),
    );
    assert_eq!(base, again);
    for other in [
        revision(
            "a = 2\n",
            &plugins(&[("p", "sha256:aa"), ("q", "sha256:bb")]),
        ),
        revision(
            "a = 1\n",
            &plugins(&[("p", "sha256:ab"), ("q", "sha256:bb")]),
        ),
        revision("a = 1\n", &plugins(&[("p", "sha256:aa")])),
        revision(
            "a = 1\n",
            &plugins(&[("p", "unloaded"), ("q", "sha256:bb")]),
        ),
        // A name moved into the config text is not the same set of plugins.
        revision("a = 1\nplugin p sha256:aa", &plugins(&[("q", "sha256:bb")])),
    ] {
        assert_ne!(base, other);
    }
}

#[test]
fn only_revision_names_are_revisions() {
    assert!(is_revision("r-0123456789abcdef"));
    for bad in [
        "",
        "r-",
        "r-0123456789abcde",
        "r-0123456789abcdef0",
        "r-0123456789ABCDEF",
        "x-0123456789abcdef",
        "r-0123456789abcdeg",
        "r-../../etc/passwd",
    ] {
        assert!(!is_revision(bad), "{bad}");
    }
}

#[test]
fn counters_count_each_ending_and_what_the_run_did() {
    let mut c = Counters::default();
    c.count(Ended::Ok, 2, 0, 1);
    c.count(Ended::Error, 0, 1, 0);
    c.count(Ended::Trap, 0, 0, 0);
    c.count(Ended::Timeout, 1, 0, 0);
    let want = Counters {
        runs: 4,
        errors: 1,
        traps: 1,
        timeouts: 1,
        mutations: 3,
        denials: 1,
        refusals: 1,
    };
    assert_eq!(c, want);
    assert_eq!(c.failures(), 3);
}

#[test]
fn running_counts_under_the_revision_and_starts_again_with_a_new_one() {
    let running = Running::default();
    running.count(None, Ended::Error, 0, 0, 0);
    assert_eq!(running.report(), None, "nothing counted while loading");
    running.set(Some("r-0000000000000001".into()));
    assert_eq!(running.revision().as_deref(), Some("r-0000000000000001"));
    running.count(running.revision().as_deref(), Ended::Trap, 0, 0, 0);
    running.set(Some("r-0000000000000001".into()));
    let report = running.report().unwrap();
    assert_eq!(
        report.counters.traps, 1,
        "the same revision keeps its counts"
    );
    assert!(Report::parse(&serde_json::to_string(&report).unwrap()).is_some());
    running.set(Some("r-0000000000000002".into()));
    let report = running.report().unwrap();
    assert_eq!(report.revision, "r-0000000000000002");
    assert_eq!(report.counters, Counters::default());
    assert_eq!(report.process, running.report().unwrap().process);
    assert_ne!(
        report.process,
        Running::default().process,
        "one per process"
    );
}

#[test]
fn the_tally_adds_up_fresh_readable_reports_and_counts_the_rest() {
    let good = |revision: &str, runs: u64, traps: u64| {
        serde_json::json!({
            "revision": revision,
            "process": "00ff",
            "counters": {"runs": runs, "traps": traps}
        })
        .to_string()
    };
    let a = good("r-000000000000000a", 10, 1);
    let b = good("r-000000000000000b", 5, 0);
    let a2 = good("r-000000000000000a", 3, 2);
    let huge = format!(
        "{{\"revision\":\"r-000000000000000a\",\"process\":\"00\",\"counters\":{{}},\"pad\":\"{}\"}}",
        "x".repeat(MAX_REPORT_BYTES)
    );
    let hostile = [
        huge.as_str(),
        "not json",
        "",
        // A revision that would be a path or a label of anything.
        r#"{"revision":"r-../x","process":"00","counters":{}}"#,
        r#"{"revision":"r-000000000000000a","process":"00","counters":{},"desired":"r-../x"}"#,
        r#"{"revision":"r-000000000000000a","process":"\u001b[31m","counters":{}}"#,
        // Counters that are not counts.
        r#"{"revision":"r-000000000000000a","process":"00","counters":{"runs":-1}}"#,
        r#"{"revision":"r-000000000000000a","process":"00","counters":{"runs":1e30}}"#,
    ];
    let fresh = |text: &str| Published {
        report: Some(text.to_string()),
        fresh: true,
        ..Published::default()
    };
    // A newer tend's report: the fields this one knows are read.
    let newer = r#"{"revision":"r-000000000000000b","process":"00","version":"9.9","counters":{"runs":2,"restarts":1}}"#;
    let mut leases = vec![
        fresh(&a),
        fresh(&b),
        fresh(&a2),
        Published {
            report: None,
            fresh: true,
            ..Published::default()
        },
    ];
    leases.extend(hostile.iter().map(|h| fresh(h)));
    leases.push(fresh(newer));
    // A Lease nobody renews: its report, however good, is not added up.
    leases.push(Published {
        report: Some(a.clone()),
        fresh: false,
        ..Published::default()
    });
    let tally = tally(&leases);
    assert_eq!(tally.silent, 1);
    assert_eq!(tally.stale, 1);
    assert_eq!(tally.unreadable, hostile.len() as u64);
    assert_eq!(tally.revisions.len(), 2);
    let a = &tally.revisions["r-000000000000000a"];
    assert_eq!((a.nodes, a.counters.runs, a.counters.traps), (2, 13, 3));
    let b = &tally.revisions["r-000000000000000b"];
    assert_eq!((b.nodes, b.counters.runs), (2, 7));

    // Counters near the top add up without wrapping, and so do counts.
    let top = fresh(&good("r-000000000000000c", u64::MAX, 0));
    let tally = super::tally([&top, &top]);
    assert_eq!(
        tally.revisions["r-000000000000000c"].counters.runs,
        u64::MAX
    );
    let mut counters = Counters {
        runs: u64::MAX,
        ..Counters::default()
    };
    counters.count(Ended::Ok, u64::MAX, 0, 0);
    assert_eq!((counters.runs, counters.mutations), (u64::MAX, u64::MAX));
}

#[test]
fn a_peers_huge_counts_saturate_and_deltas_never_go_below_zero() {
    let huge = Counters {
        errors: u64::MAX,
        traps: u64::MAX,
        timeouts: 1,
        ..Counters::default()
    };
    assert_eq!(huge.failures(), u64::MAX);
    let later = Counters {
        runs: 10,
        errors: 2,
        ..Counters::default()
    };
    let earlier = Counters {
        runs: 4,
        errors: 5,
        ..Counters::default()
    };
    let delta = later.since(&earlier);
    assert_eq!((delta.runs, delta.errors), (6, 0));
}
