//! One total for the whole suite: every test runner `cargo xtask test` starts
//! (cargo test, pytest, node --test, go test, the C tests) runs to its end even
//! when an earlier one failed, its output is shown as it comes and its closing
//! counts are read, and the run ends with one `total: N passed, N failed` line.
//! A runner that prints no counts (the C tests, a template's `go test`) counts
//! as one test, passed or failed by its exit status; a runner that fails
//! without reporting a failed test counts one failure, so a crash is never
//! hidden behind a clean count.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The passed and failed tests of every runner so far.
#[derive(Debug, Default)]
pub struct Tally {
    passed: u64,
    failed: u64,
    /// The runners that failed, for the closing summary.
    failing: Vec<String>,
}

/// A runner started beside the others (see [`Tally::start_beside`]).
pub struct Beside {
    what: String,
    child: Child,
    /// Its stdout and stderr, shown and counted when it is joined.
    output: PathBuf,
}

/// Counts read from a runner's output.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    passed: u64,
    failed: u64,
    /// Whether any line carried counts.
    seen: bool,
}

impl Tally {
    /// Run one test runner to its end: its stdout is echoed line by line and
    /// read for counts, its stderr passes through. Never fails for a failing
    /// runner (that is counted); only when it cannot be started.
    pub fn run(&mut self, what: &str, cmd: &mut Command) -> Result<()> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        let mut counts = Counts::default();
        let stdout = child.stdout.take().expect("stdout is piped");
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap_or_default();
            println!("{line}");
            counts.read(&line);
        }
        let status = child.wait()?;
        self.account(what, &counts, status);
        Ok(())
    }

    /// Start a runner that runs beside the next ones (its tests mostly wait,
    /// so the suite's wall time need not add them up): its output goes to
    /// `output` until [`Tally::join`] shows and counts it.
    pub fn start_beside(&self, what: &str, cmd: &mut Command, output: PathBuf) -> Result<Beside> {
        let file = std::fs::File::create(&output)
            .with_context(|| format!("cannot write {}", output.display()))?;
        let child = cmd
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot run {cmd:?}"))?;
        Ok(Beside {
            what: what.to_string(),
            child,
            output,
        })
    }

    /// Wait for a runner started beside, then show its output and count it
    /// as [`Tally::run`] does.
    pub fn join(&mut self, mut beside: Beside) -> Result<()> {
        let status = beside.child.wait()?;
        let text = std::fs::read_to_string(&beside.output).unwrap_or_default();
        let mut counts = Counts::default();
        for line in text.lines() {
            println!("{line}");
            counts.read(line);
        }
        self.account(&beside.what, &counts, status);
        Ok(())
    }

    /// Add one runner's counts, its exit `status` standing in when it
    /// printed none or failed without a failed test.
    fn account(&mut self, what: &str, counts: &Counts, status: std::process::ExitStatus) {
        let (passed, mut failed) = if counts.seen {
            (counts.passed, counts.failed)
        } else if status.success() {
            (1, 0)
        } else {
            (0, 1)
        };
        if !status.success() && failed == 0 {
            failed = 1;
        }
        self.passed += passed;
        self.failed += failed;
        if failed > 0 {
            self.failing.push(format!("{what} ({status})"));
        }
    }

    /// Print the closing line and fail when anything failed.
    pub fn finish(self) -> Result<()> {
        if !self.failing.is_empty() {
            eprintln!("failing runners: {}", self.failing.join(", "));
        }
        println!("total: {} passed, {} failed", self.passed, self.failed);
        if self.failed > 0 {
            bail!("{} test(s) failed", self.failed);
        }
        Ok(())
    }
}

impl Counts {
    /// Add what one output line reports, in any of the runners' formats.
    fn read(&mut self, line: &str) {
        if let Some((passed, failed)) = cargo_result(line)
            .or_else(|| pytest_result(line))
            .or_else(|| node_result(line))
            .or_else(|| go_result(line))
        {
            self.passed += passed;
            self.failed += failed;
            self.seen = true;
        }
    }
}

/// The number before `word` in `text` ("12 passed" → 12), if any.
fn count_before(text: &str, word: &str) -> Option<u64> {
    let at = text.find(word)?;
    text[..at].split_whitespace().last()?.parse().ok()
}

/// cargo test: `test result: ok. 12 passed; 0 failed; 1 ignored; ...`.
fn cargo_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    Some((
        count_before(rest, " passed;")?,
        count_before(rest, " failed;")?,
    ))
}

/// pytest's closing line: `3 failed, 140 passed, 2 skipped in 3.21s`, with or
/// without the `=====` around it.
fn pytest_result(line: &str) -> Option<(u64, u64)> {
    let line = line.trim_matches(|c| c == '=' || c == ' ');
    let (counts, time) = line.rsplit_once(" in ")?;
    // "3.21s", or "123.45s (0:02:03)" for a long run.
    let seconds = time.split_whitespace().next()?.strip_suffix('s')?;
    seconds.parse::<f64>().ok()?;
    let passed = count_before(counts, " passed");
    let failed = count_before(counts, " failed");
    let errors = count_before(counts, " error");
    if passed.is_none() && failed.is_none() && errors.is_none() {
        return None;
    }
    Some((
        passed.unwrap_or(0),
        failed.unwrap_or(0) + errors.unwrap_or(0),
    ))
}

/// node --test, TAP (`# pass 146`, `# fail 0`, `# cancelled 0`) or spec (`ℹ pass 146`) reporter:
/// each line carries one of the two counts.
fn node_result(line: &str) -> Option<(u64, u64)> {
    let rest = line
        .strip_prefix("# ")
        .or_else(|| line.strip_prefix("ℹ "))?;
    let (word, number) = rest.split_once(' ')?;
    let number: u64 = number.trim().parse().ok()?;
    match word {
        "pass" => Some((number, 0)),
        "fail" | "cancelled" => Some((0, number)),
        _ => None,
    }
}

/// go test -v: one `--- PASS: TestX` or `--- FAIL: TestX` per test (subtests
/// indented, counted too).
fn go_result(line: &str) -> Option<(u64, u64)> {
    let line = line.trim_start();
    if line.starts_with("--- PASS: ") {
        Some((1, 0))
    } else if line.starts_with("--- FAIL: ") {
        Some((0, 1))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(lines: &[&str]) -> Counts {
        let mut counts = Counts::default();
        for line in lines {
            counts.read(line);
        }
        counts
    }

    #[test]
    fn every_runners_closing_lines_are_counted() {
        let seen = |passed, failed| Counts {
            passed,
            failed,
            seen: true,
        };
        assert_eq!(
            counts(&[
                "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
                "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.20s",
            ]),
            seen(15, 2)
        );
        assert_eq!(counts(&["143 passed, 2 skipped in 3.21s"]), seen(143, 0));
        assert_eq!(counts(&["2 passed in 123.45s (0:02:03)"]), seen(2, 0));
        assert_eq!(
            counts(&["========= 1 failed, 142 passed, 1 error in 12.5s ========="]),
            seen(142, 2)
        );
        assert_eq!(counts(&["# pass 146", "# fail 3"]), seen(146, 3));
        assert_eq!(counts(&["ℹ pass 5", "ℹ fail 0"]), seen(5, 0));
        assert_eq!(
            counts(&[
                "=== RUN   TestA",
                "--- PASS: TestA (0.00s)",
                "    --- FAIL: TestA/sub (0.00s)"
            ]),
            seen(1, 1)
        );
    }

    #[test]
    fn ordinary_output_is_not_a_count() {
        assert_eq!(
            counts(&[
                "running 12 tests",
                "test a ... ok",
                "ok  \ttend/sdk\t0.012s",
                "the cache passed in 3 checks",
                "# Subtest: parses config",
                "12 passed in the morning",
            ]),
            Counts::default()
        );
    }

    #[test]
    fn a_runner_without_counts_counts_as_one_by_its_exit_status() {
        let mut tally = Tally::default();
        tally.run("true", &mut Command::new("true")).unwrap();
        tally.run("false", &mut Command::new("false")).unwrap();
        assert_eq!((tally.passed, tally.failed), (1, 1));
        assert!(tally.finish().is_err());
    }

    #[test]
    fn a_failing_runner_that_reports_no_failure_counts_one() {
        let mut tally = Tally::default();
        tally
            .run(
                "crash",
                Command::new("sh").args(["-c", "echo '# pass 4'; exit 3"]),
            )
            .unwrap();
        assert_eq!((tally.passed, tally.failed), (4, 1));
    }
}
