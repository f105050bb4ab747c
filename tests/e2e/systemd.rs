//! The systemd capability end to end: the real `tend`, the real `unit-applier`
//! and `unit-doctor` plugins, a real systemd (tests/peers/systemd.sh) on a
//! private bus.

use std::path::Path;
use std::time::Duration;
use tend_e2e::{
    Sandbox, SystemdPeer, free_port, journal, plugin_status, starts, wait_for_plugin, wait_until,
};

const WITHIN: Duration = Duration::from_secs(20);

/// A oneshot unit that stays active, counts its starts in `count` (with
/// ExecStartPre) and reads `conf` if given.
fn oneshot(count: &Path) -> String {
    format!(
        "[Unit]\nDescription=tend e2e\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/true\n[Install]\nWantedBy=exp.target\n",
        count.display()
    )
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The unit-applier config: `units` as (name, content, depends-on files), `files` as (path, content).
fn applier_config(
    peer: &SystemdPeer,
    sandbox: &Sandbox,
    units: &[(&str, String, Vec<String>)],
    files: &[(String, &str)],
) -> String {
    let mut text = format!(
        "[host.systemd]\nbus = \"{}\"\n[plugins.unit-applier]\n[plugins.unit-applier.grants]\nfiles = [{{ path = \"{}\", write = true }}, {{ path = \"{}\", write = true }}]\nsystemd = {{ units = [\"tend-*.service\"], operations = [\"start\", \"stop\", \"restart\", \"enable\", \"disable\", \"daemon-reload\"] }}\n[plugins.unit-applier.config]\nunit-dir = \"{}\"\n",
        peer.bus_address(),
        peer.units_dir().display(),
        sandbox.path("etc").display(),
        peer.units_dir().display(),
    );
    for (path, content) in files {
        text += &format!(
            "[[plugins.unit-applier.config.files]]\npath = \"{path}\"\ncontent = {}\n",
            toml_string(content)
        );
    }
    for (name, content, depends) in units {
        let depends: Vec<String> = depends.iter().map(|d| format!("\"{d}\"")).collect();
        text += &format!(
            "[[plugins.unit-applier.config.units]]\nname = \"{name}\"\ncontent = {}\nfiles = [{}]\n",
            toml_string(content),
            depends.join(", ")
        );
    }
    text
}

#[test]
fn unit_applier_restarts_only_what_changed_and_removes_only_what_it_created() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("unit-applier", "unit-applier");
    std::fs::create_dir_all(sandbox.path("etc")).unwrap();
    let (count_a, count_b) = (sandbox.path("a.count"), sandbox.path("b.count"));
    let conf = sandbox.path("etc/a.conf").display().to_string();
    // A unit the operator made by hand, matching the grant's pattern.
    std::fs::write(
        peer.units_dir().join("tend-manual.service"),
        oneshot(&sandbox.path("manual.count")),
    )
    .unwrap();
    let declare = |conf_content: &str, with_b: bool| {
        let mut units = vec![("tend-a.service", oneshot(&count_a), vec![conf.clone()])];
        if with_b {
            units.push(("tend-b.service", oneshot(&count_b), vec![]));
        }
        let config = applier_config(&peer, &sandbox, &units, &[(conf.clone(), conf_content)]);
        sandbox.config_with_host("", &config);
    };
    let reconcile = || {
        let out = sandbox.tend(&["reconcile", "unit-applier"]);
        assert!(out.success, "{}{}", out.stdout, out.stderr);
        out.stdout
    };
    declare("x = 1\n", true);
    reconcile();
    peer.wait_for_unit("tend-a.service", "ActiveState", "active", WITHIN);
    peer.wait_for_unit("tend-b.service", "ActiveState", "active", WITHIN);
    assert_eq!((starts(&count_a), starts(&count_b)), (1, 1));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "x = 1\n");

    // Only the config file tend-a depends on changes: exactly tend-a restarts.
    declare("x = 2\n", true);
    reconcile();
    wait_until(WITHIN, "tend-a restarted", || starts(&count_a) == 2);
    assert_eq!(starts(&count_b), 1, "tend-b did not restart");

    // Nothing changes: no restart, no daemon-reload, no mutation at all.
    let before = journal(&sandbox).len();
    let out = reconcile();
    assert!(out.contains("no changes"), "{out}");
    assert_eq!(journal(&sandbox).len(), before);
    assert_eq!((starts(&count_a), starts(&count_b)), (2, 1));

    // tend-b leaves the declaration: stopped, disabled, deleted.
    declare("x = 2\n", false);
    reconcile();
    peer.wait_for_unit("tend-b.service", "ActiveState", "inactive", WITHIN);
    assert!(!peer.units_dir().join("tend-b.service").exists());
    // The operator's unit is untouched, and enabling never wrote into the host's /etc.
    assert!(peer.units_dir().join("tend-manual.service").exists());
    assert!(!Path::new("/etc/systemd/system/exp.target.wants/tend-a.service").exists());
    assert_eq!(starts(&sandbox.path("manual.count")), 0);
}

#[test]
fn unit_doctor_restarts_a_failed_unit_at_once_and_stops_when_it_flaps() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    let count = sandbox.path("crash.count");
    std::fs::write(
        peer.units_dir().join("tend-crash.service"),
        format!(
            "[Service]\nExecStartPre=/bin/sh -c 'echo started >> {}'\nExecStart=/bin/sleep 1000\n",
            count.display()
        ),
    )
    .unwrap();
    peer.manager(&["Reload"]);
    peer.manager(&["StartUnit", "ss", "tend-crash.service", "replace"]);
    peer.wait_for_unit("tend-crash.service", "ActiveState", "active", WITHIN);
    sandbox.add_plugin("unit-doctor", "unit-doctor").config_with_host(
        &format!("listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"", peer.bus_address()),
        "[plugins.unit-doctor]\ninterval = \"1h\"\n[plugins.unit-doctor.grants]\nsystemd = { units = [\"tend-*.service\"], operations = [\"restart\"], watch = true }\n[plugins.unit-doctor.config]\n[[plugins.unit-doctor.config.checks]]\nunit = \"tend-crash.service\"\nprobe = \"active\"\nfail-after-ms = 0\nbackoff-ms = 0\nmax-restarts = 2\nwindow-ms = 600000\n",
    );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "unit-doctor", "its startup reconcile", |p| {
        p["reconciles"] == 1
    });
    // The unit fails: the doctor hears it over the bus and restarts it, long
    // before its 1 h interval.
    let kill = || {
        peer.manager(&["KillUnit", "ssi", "tend-crash.service", "all", "9"]);
    };
    kill();
    wait_until(WITHIN, "the doctor's restart", || starts(&count) == 2);
    peer.wait_for_unit("tend-crash.service", "ActiveState", "active", WITHIN);
    assert!(
        daemon.count(&["trigger=unit:tend-crash.service"]) > 0,
        "{}",
        daemon.log()
    );
    kill();
    wait_until(WITHIN, "the second restart", || starts(&count) == 3);
    // A third failure in the window is flapping: reported, not restarted.
    kill();
    wait_for_plugin(port, "unit-doctor", "flapping reported", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("flapped"))
    });
    assert_eq!(starts(&count), 3, "no restart once it flaps");
    assert!(daemon.terminate(Duration::from_secs(10)));
}

fn doctor(sandbox: &Sandbox, host: &str, grant: &str, check: &str) {
    sandbox
        .add_plugin("unit-doctor", "unit-doctor")
        .config_with_host(host, &doctor_plugin(grant, check));
}

/// The unit-doctor's `[plugins.unit-doctor]` tables.
fn doctor_plugin(grant: &str, check: &str) -> String {
    format!(
        "[plugins.unit-doctor]\n[plugins.unit-doctor.grants]\n{grant}\n[plugins.unit-doctor.config]\n[[plugins.unit-doctor.config.checks]]\n{check}\n"
    )
}

#[test]
fn unit_doctor_restarts_a_unit_whose_health_endpoint_fails_past_fail_after_once() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let (port, dead) = (free_port(), free_port());
    let count = sandbox.path("web.count");
    peer.counting_unit("tend-web.service", &count);
    peer.manager(&["StartUnit", "ss", "tend-web.service", "replace"]);
    peer.wait_for_unit("tend-web.service", "ActiveState", "active", WITHIN);
    doctor(
        &sandbox,
        &format!(
            "listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"",
            peer.bus_address()
        ),
        "systemd = { units = [\"tend-*.service\"], operations = [\"restart\"] }\nhttp = [\"http://127.0.0.1:*/*\"]",
        &format!(
            "unit = \"tend-web.service\"\nprobe = {{ http = {{ url = \"http://127.0.0.1:{dead}/healthz\", timeout-ms = 200 }} }}\nfail-after-ms = 1500\nbackoff-ms = 600000"
        ),
    );
    let started = std::time::Instant::now();
    let daemon = sandbox.daemon();
    wait_until(WITHIN, "the restart after fail-after", || {
        starts(&count) == 2
    });
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before fail-after"
    );
    // Backing off: more reconciles, no second restart.
    let runs = wait_for_plugin(port, "unit-doctor", "backing off", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("tend-web.service"))
    })["reconciles"]
        .as_u64()
        .unwrap();
    std::process::Command::new(tend_e2e::tend_bin())
        .args(["reconcile", "unit-doctor", "-c"])
        .arg(sandbox.path("tend.toml"))
        .status()
        .unwrap();
    wait_for_plugin(port, "unit-doctor", "one more run", |p| {
        p["reconciles"].as_u64() > Some(runs)
    });
    assert_eq!(starts(&count), 2, "restarted exactly once");
    assert!(daemon.terminate(Duration::from_secs(10)));
}

#[test]
fn ungranted_and_over_budget_restarts_are_refused_and_plans_change_nothing() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let count = sandbox.path("x.count");
    peer.counting_unit("tend-x.service", &count);
    let host = format!("[host.systemd]\nbus = \"{}\"", peer.bus_address());
    let check = "unit = \"tend-x.service\"\nprobe = \"active\"\nfail-after-ms = 0\nbackoff-ms = 0";
    doctor(
        &sandbox,
        &host,
        "systemd = { units = [\"tend-*.service\"] }",
        check,
    );
    let out = sandbox.tend(&["reconcile", "unit-doctor"]);
    assert!(
        out.stdout.contains("add \\\"restart\\\" to operations")
            || out.stdout.contains("add \"restart\" to operations"),
        "{}",
        out.stdout
    );
    assert_eq!(starts(&count), 0);

    let budget =
        "\n[host.budgets.unit-restarts]\noperations = [\"systemd.restart\"]\nmax = 1\nper = \"1h\"";
    doctor(
        &sandbox,
        &format!("{host}{budget}"),
        "systemd = { units = [\"tend-*.service\"], operations = [\"restart\"] }",
        check,
    );
    let plan = sandbox.tend(&["plan"]);
    assert!(
        plan.stdout.contains("would systemd.restart tend-x.service"),
        "{}",
        plan.stdout
    );
    assert_eq!(starts(&count), 0, "a plan restarts nothing");
    sandbox.tend(&["reconcile", "unit-doctor"]);
    peer.wait_for_unit("tend-x.service", "ActiveState", "active", WITHIN);
    assert_eq!(starts(&count), 1);
    peer.manager(&["KillUnit", "ssi", "tend-x.service", "all", "9"]);
    peer.wait_for_unit("tend-x.service", "ActiveState", "failed", WITHIN);
    let out = sandbox.tend(&["reconcile", "unit-doctor"]);
    assert!(out.stdout.contains("budget-exhausted"), "{}", out.stdout);
    assert_eq!(starts(&count), 1, "the budget held");
    let refused = journal(&sandbox)
        .into_iter()
        .filter(|e| {
            e["operation"] == "restart"
                && e["result"]
                    .as_str()
                    .unwrap()
                    .starts_with("budget-exhausted")
        })
        .count();
    assert_eq!(refused, 1);
}

/// systemd's bus goes away: the unit-doctor (which needs it) reports systemd
/// unavailable, while another plugin (chaos `ok`, on an interval, no systemd)
/// goes on reconciling healthy and tend answers /healthz; when the bus comes
/// back, the doctor recovers.
#[test]
fn the_bus_going_away_fails_only_the_plugin_and_tend_recovers_when_it_returns() {
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    let port = free_port();
    let count = sandbox.path("y.count");
    peer.counting_unit("tend-y.service", &count);
    peer.manager(&["StartUnit", "ss", "tend-y.service", "replace"]);
    peer.wait_for_unit("tend-y.service", "ActiveState", "active", WITHIN);
    sandbox
        .add_plugin("chaos", "chaos")
        .add_plugin("unit-doctor", "unit-doctor")
        .config_with_host(
            &format!(
                "listen = \"127.0.0.1:{port}\"\n[host.systemd]\nbus = \"{}\"",
                peer.bus_address()
            ),
            &(doctor_plugin(
                "systemd = { units = [\"tend-*.service\"], operations = [\"restart\"] }",
                "unit = \"tend-y.service\"\nprobe = \"active\"\nfail-after-ms = 0\nbackoff-ms = 0\nmax-restarts = 10",
            ) + "[plugins.steady]\nfile = \"plugins/chaos.wasm\"\ninterval = \"100ms\"\n[plugins.steady.config]\nmode = \"ok\"\n"),
        );
    let daemon = sandbox.daemon();
    wait_for_plugin(port, "unit-doctor", "healthy", |p| {
        p["last"]["health"] == "healthy"
    });
    peer.stop_bus();
    wait_until(
        Duration::from_secs(30),
        "an unavailable systemd reported",
        || {
            std::process::Command::new(tend_e2e::tend_bin())
                .args(["reconcile", "unit-doctor", "-c"])
                .arg(sandbox.path("tend.toml"))
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("unavailable"))
        },
    );
    wait_for_plugin(port, "unit-doctor", "unavailable in /status", |p| {
        p["last"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unavailable"))
    });
    // The bus still down, the other plugin goes on: five more healthy runs.
    let before = plugin_status(port, "steady")["reconciles"]
        .as_u64()
        .unwrap();
    let steady = wait_for_plugin(port, "steady", "five more runs without the bus", |p| {
        p["reconciles"].as_u64() >= Some(before + 5)
    });
    assert_eq!(steady["last"]["health"], "healthy", "{steady:#}");
    assert!(
        std::process::Command::new("busctl")
            .arg(format!("--address={}", peer.bus_address()))
            .arg("status")
            .output()
            .is_ok_and(|o| !o.status.success()),
        "the bus is still down"
    );
    assert_eq!(
        tend_e2e::http_get(port, "/healthz").unwrap(),
        (200, "ok\n".to_string()),
        "tend keeps running"
    );
    peer.start_bus_again();
    // systemd came back without the unit running: the doctor restarts it. A
    // manual reconcile the daemon refuses (rate limit, backoff already cut
    // short once) is no answer: ask again until one really ran.
    wait_until(Duration::from_secs(60), "recovery", || {
        std::process::Command::new(tend_e2e::tend_bin())
            .args(["reconcile", "unit-doctor", "-c"])
            .arg(sandbox.path("tend.toml"))
            .output()
            .is_ok_and(|o| {
                o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("unavailable")
            })
    });
    peer.wait_for_unit("tend-y.service", "ActiveState", "active", WITHIN);
    assert!(daemon.terminate(Duration::from_secs(10)));
}

/// Where a kill -9 cut an apply, read from the journal once tend is dead:
/// the unit's restart not begun, in flight (its intent without a result reads
/// as interrupted), or done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// No restart intent journaled.
    NotBegun,
    /// Its intent journaled, no result.
    InFlight,
    /// Intent and result.
    Done,
}

/// The [`Cut`] of the apply whose journal entries start at `from`.
fn cut(sandbox: &Sandbox, unit: &str, from: usize) -> Cut {
    let entries = journal(sandbox);
    let restarts: Vec<_> = entries[from..]
        .iter()
        .filter(|e| e["operation"] == "restart" && e["target"] == unit)
        .collect();
    match restarts.as_slice() {
        [] => Cut::NotBegun,
        [r] if r["result"] == "ok" => Cut::Done,
        [r] if r["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("interrupted")) =>
        {
            Cut::InFlight
        }
        _ => panic!("not one restart of {unit} before the kill: {entries:#?}"),
    }
}

/// Poll `condition` without pausing (a kill must land within a window of a
/// few milliseconds) until it holds, for at most `within`.
fn spin_until(within: Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// `tend reconcile unit-applier` is killed (-9) while applying a changed
/// config file that earns tend-k a restart: right after the file is on disk
/// (repeated until one kill lands before the restart began), and once while
/// the restart runs (tend-k's start takes 300 ms). Each time the journal says
/// which window the kill hit, and tend started again finishes the apply with
/// exactly one restart in all.
#[test]
fn kill_9_between_writing_files_and_restarting_units_restarts_exactly_once() {
    const ATTEMPTS: usize = 8;
    let peer = SystemdPeer::start();
    let sandbox = Sandbox::new();
    sandbox.add_plugin("unit-applier", "unit-applier");
    std::fs::create_dir_all(sandbox.path("etc")).unwrap();
    let count = sandbox.path("k.count");
    let conf = sandbox.path("etc/k.conf").display().to_string();
    // A oneshot whose start takes 300 ms: a restart stays in flight that long.
    let unit = format!(
        "[Unit]\nDescription=tend e2e\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStartPre=/bin/sh -c 'echo started >> {}; sleep 0.3'\nExecStart=/bin/true\n",
        count.display()
    );
    let units = vec![("tend-k.service", unit, vec![conf.clone()])];
    let declare = |version: usize| {
        sandbox.config(&applier_config(
            &peer,
            &sandbox,
            &units,
            &[(conf.clone(), &format!("v = {version}\n"))],
        ));
    };
    // Reconcile until the apply is over (a resumed restart still in
    // transition is waited for across reconciles).
    let finish = || {
        wait_until(WITHIN, "the apply finished", || {
            let out = sandbox.tend(&["reconcile", "unit-applier"]);
            assert!(out.success, "{}{}", out.stdout, out.stderr);
            out.stdout.contains("no changes")
        });
    };
    declare(1);
    finish();
    peer.wait_for_unit("tend-k.service", "ActiveState", "active", WITHIN);
    assert_eq!(starts(&count), 1);

    let mut cuts = Vec::new();
    for attempt in 1..=ATTEMPTS {
        // The last attempt kills mid-restart; the others right after the write.
        let mid_restart = attempt == ATTEMPTS || cuts.contains(&Cut::NotBegun);
        let version = attempt + 1;
        declare(version);
        let from = journal(&sandbox).len();
        let started = starts(&count);
        let mut child = std::process::Command::new(tend_e2e::tend_bin())
            .args(["reconcile", "unit-applier", "-c"])
            .arg(sandbox.path("tend.toml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        match mid_restart {
            true => spin_until(WITHIN, "tend-k's restart under way", || {
                starts(&count) > started
            }),
            false => spin_until(WITHIN, "the new file written", || {
                std::fs::read_to_string(&conf).is_ok_and(|c| c == format!("v = {version}\n"))
            }),
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let hit = cut(&sandbox, "tend-k.service", from);
        eprintln!("attempt {attempt}: the restart was {hit:?} at the kill");
        if mid_restart {
            assert_eq!(hit, Cut::InFlight, "{:#?}", journal(&sandbox));
        }
        cuts.push(hit);
        // Started again, it finishes what was pending: one restart in all.
        finish();
        peer.wait_for_unit("tend-k.service", "ActiveState", "active", WITHIN);
        assert_eq!(
            starts(&count),
            started + 1,
            "attempt {attempt}, the restart {hit:?} at the kill: exactly one restart: {:#?}",
            &journal(&sandbox)[from..]
        );
        if mid_restart {
            break;
        }
    }
    assert!(
        cuts.contains(&Cut::NotBegun) && cuts.contains(&Cut::InFlight),
        "no kill landed between the write and the restart in {ATTEMPTS} attempts: {cuts:?}"
    );
}
