use super::*;

const S: u64 = 1000;
const M: u64 = 60 * S;

/// restart kubelet -> restart containerd -> reboot; settle 2 min, verify
/// within 5 min, one try each, quiet 30 min.
fn rules() -> Rules {
    Rules {
        steps: 3,
        reboots: vec![false, false, true],
        settle_ms: 2 * M,
        verify_within_ms: 5 * M,
        attempts: 1,
        quiet_ms: 30 * M,
    }
}

fn seen(now: u64, problem: bool) -> Seen {
    Seen {
        now,
        problems: if problem {
            vec!["KernelDeadlock".into()]
        } else {
            vec![]
        },
        boot: "boot-1".into(),
        ready: true,
    }
}

/// Walk the ladder through `looks`, returning each decision.
fn walk(rules: &Rules, looks: &[Seen]) -> (Ladder, Vec<Next>) {
    let mut ladder = Ladder::default();
    let mut decisions = Vec::new();
    for look in looks {
        let (next_ladder, decision) = next(&ladder, rules, look);
        ladder = next_ladder;
        decisions.push(decision);
    }
    (ladder, decisions)
}

#[test]
fn a_healthy_node_is_idle_and_a_problem_takes_the_first_step() {
    let (ladder, decisions) = walk(&rules(), &[seen(0, false), seen(S, true)]);
    assert_eq!(
        decisions,
        [
            Next::Idle,
            Next::Act {
                step: 0,
                attempt: 1
            }
        ]
    );
    assert_eq!(ladder.step, Some(0));
    assert_eq!(ladder.acted_at, S);
}

#[test]
fn a_step_verifies_only_after_the_problem_stayed_clear_for_the_settle_time() {
    let (ladder, decisions) = walk(
        &rules(),
        &[
            seen(0, true),
            seen(M, false),
            seen(2 * M, false),
            // Back before the settle time passed: the clock starts over.
            seen(2 * M + S, true),
            seen(2 * M + 2 * S, false),
            seen(4 * M + 2 * S, false),
        ],
    );
    assert_eq!(
        decisions[0],
        Next::Act {
            step: 0,
            attempt: 1
        }
    );
    assert_eq!(
        decisions[1],
        Next::Wait {
            until: 3 * M,
            why: Waiting::Settle
        }
    );
    assert_eq!(
        decisions[2],
        Next::Wait {
            until: 3 * M,
            why: Waiting::Settle
        }
    );
    assert_eq!(
        decisions[3],
        Next::Wait {
            until: 5 * M,
            why: Waiting::Clear
        }
    );
    assert_eq!(
        decisions[4],
        Next::Wait {
            until: 4 * M + 2 * S,
            why: Waiting::Settle
        }
    );
    assert_eq!(decisions[5], Next::Verified { step: 0 });
    assert_eq!(ladder.verified_at, Some(4 * M + 2 * S));
}

#[test]
fn a_step_that_does_not_verify_escalates_exactly_once_after_its_window() {
    let (_, decisions) = walk(
        &rules(),
        &[
            seen(0, true),
            seen(4 * M, true),
            seen(5 * M - 1, true),
            seen(5 * M, true),
            seen(5 * M + S, true),
        ],
    );
    assert_eq!(
        decisions,
        [
            Next::Act {
                step: 0,
                attempt: 1
            },
            Next::Wait {
                until: 5 * M,
                why: Waiting::Clear
            },
            Next::Wait {
                until: 5 * M,
                why: Waiting::Clear
            },
            Next::Act {
                step: 1,
                attempt: 1
            },
            Next::Wait {
                until: 10 * M,
                why: Waiting::Clear
            },
        ]
    );
}

#[test]
fn a_step_is_tried_attempts_times_before_the_next() {
    let rules = Rules {
        attempts: 2,
        ..rules()
    };
    let (_, decisions) = walk(
        &rules,
        &[seen(0, true), seen(5 * M, true), seen(10 * M, true)],
    );
    assert_eq!(
        decisions,
        [
            Next::Act {
                step: 0,
                attempt: 1
            },
            Next::Act {
                step: 0,
                attempt: 2
            },
            Next::Act {
                step: 1,
                attempt: 1
            },
        ]
    );
}

#[test]
fn a_problem_that_clears_late_is_given_its_settle_time_not_escalated() {
    // Clear at 4:30, inside the window; the settle time ends after it.
    let (_, decisions) = walk(
        &rules(),
        &[
            seen(0, true),
            seen(4 * M + 30 * S, false),
            seen(5 * M + 30 * S, false),
            seen(6 * M + 30 * S, false),
        ],
    );
    assert_eq!(
        decisions[2],
        Next::Wait {
            until: 6 * M + 30 * S,
            why: Waiting::Settle
        }
    );
    assert_eq!(decisions[3], Next::Verified { step: 0 });
}

#[test]
fn a_reboot_verifies_only_with_a_new_boot_and_the_node_ready() {
    let rules = Rules {
        reboots: vec![true],
        steps: 1,
        ..rules()
    };
    let mut look = seen(0, true);
    let (ladder, decision) = next(&Ladder::default(), &rules, &look);
    assert_eq!(
        decision,
        Next::Act {
            step: 0,
            attempt: 1
        }
    );
    assert_eq!(ladder.boot, "boot-1");
    // The problem is gone but the node never rebooted: not verified.
    look = seen(3 * M, false);
    let (ladder, decision) = next(&ladder, &rules, &look);
    assert_eq!(
        decision,
        Next::Wait {
            until: 5 * M,
            why: Waiting::Reboot
        }
    );
    // Rebooted, not Ready yet.
    look = Seen {
        boot: "boot-2".into(),
        ready: false,
        ..seen(3 * M + S, false)
    };
    let (ladder, decision) = next(&ladder, &rules, &look);
    assert_eq!(
        decision,
        Next::Wait {
            until: 5 * M,
            why: Waiting::Reboot
        }
    );
    look = Seen {
        boot: "boot-2".into(),
        ..seen(4 * M, false)
    };
    let (ladder, decision) = next(&ladder, &rules, &look);
    assert_eq!(
        decision,
        Next::Wait {
            until: 6 * M,
            why: Waiting::Settle
        }
    );
    look = Seen {
        boot: "boot-2".into(),
        ..seen(6 * M, false)
    };
    assert_eq!(next(&ladder, &rules, &look).1, Next::Verified { step: 0 });
}

#[test]
fn a_problem_back_within_the_quiet_time_goes_on_to_the_next_step_and_quiet_resets() {
    let (ladder, decisions) = walk(
        &rules(),
        &[
            seen(0, true),
            seen(S, false),
            seen(2 * M + S, false),
            seen(10 * M, false),
            seen(12 * M, true),
        ],
    );
    assert_eq!(decisions[2], Next::Verified { step: 0 });
    assert_eq!(
        decisions[3],
        Next::Watching {
            step: 0,
            until: 32 * M + S
        }
    );
    assert_eq!(
        decisions[4],
        Next::Act {
            step: 1,
            attempt: 1
        }
    );
    assert_eq!(ladder.step, Some(1));
    let (ladder, decisions) = walk(
        &rules(),
        &[
            seen(0, true),
            seen(S, false),
            seen(2 * M + S, false),
            seen(32 * M + S, false),
        ],
    );
    assert_eq!(decisions[3], Next::Reset);
    assert_eq!(ladder, Ladder::default());
}

#[test]
fn past_the_last_step_the_ladder_is_exhausted_and_acts_no_more_until_the_problem_clears() {
    let looks: Vec<Seen> = (0..8).map(|i| seen(i * 5 * M, true)).collect();
    let (ladder, decisions) = walk(&rules(), &looks);
    let acts = decisions
        .iter()
        .filter(|d| matches!(d, Next::Act { .. }))
        .count();
    assert_eq!(acts, 3, "{decisions:?}");
    assert_eq!(decisions[3], Next::Exhausted);
    assert_eq!(decisions[7], Next::Exhausted);
    assert!(ladder.exhausted);
    // It clears and stays clear: recovered, then reset after the quiet time.
    let (ladder, d) = next(&ladder, &rules(), &seen(40 * M, false));
    assert_eq!(
        d,
        Next::Wait {
            until: 42 * M,
            why: Waiting::Settle
        }
    );
    let (ladder, d) = next(&ladder, &rules(), &seen(42 * M, false));
    assert_eq!(d, Next::Verified { step: 2 });
    assert!(!ladder.exhausted);
}

#[test]
fn a_clock_that_goes_back_makes_waits_longer_never_an_escalation() {
    let (ladder, _) = walk(&rules(), &[seen(10 * M, true)]);
    // The clock jumps back an hour: still waiting on the same window.
    let (_, d) = next(&ladder, &rules(), &seen(0, true));
    assert_eq!(
        d,
        Next::Wait {
            until: 15 * M,
            why: Waiting::Clear
        }
    );
}
