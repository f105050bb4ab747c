//! What /proc says of a process (the daemon, a peer, the test itself): the
//! memory and CPU figures that tests bound and benches report.

/// Resident set size of `pid` now, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The highest resident set size `pid` has had, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Start `pid`'s `VmHWM` over from its current RSS (`clear_refs` 5), so a
/// later [`peak_rss_kib`] measures only what came after.
pub fn reset_peak_rss(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// CPU time `pid` has used so far (user + system), in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (which may hold spaces) start after ") ".
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A `kB` line of /proc/PID/status.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// "PID: command line" of each living process that a peer owns: one whose
/// `/proc/PID/cgroup` text satisfies `in_cgroup`, or whose command line names
/// the peer's directory `dir`. Zombies (empty command lines) and processes
/// gone since the listing are left out.
pub fn peer_processes(dir: &std::path::Path, in_cgroup: impl Fn(&str) -> bool) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    let dir_slash = format!("{dir}/");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
        let names_dir = args.iter().any(|a| *a == dir || a.contains(&dir_slash));
        if !args.is_empty() && (in_cgroup(&cgroup) || names_dir) {
            found.push(format!("{pid}: {}", args.join(" ")));
        }
    }
    found
}

/// How a command run by [`run_measured`] ended.
#[derive(Debug)]
pub struct Measured {
    /// None: still running at the deadline (then killed).
    pub success: Option<bool>,
    /// stdout and stderr.
    pub output: String,
    pub elapsed: std::time::Duration,
    /// The child's peak resident set size, in KiB (wait4's `ru_maxrss`).
    pub peak_rss_kib: u64,
}

/// Run `command` (its output to a file), waiting at most `within`: killed
/// then, and reaped with wait4, which gives this one child's peak RSS however
/// quickly it exits.
#[expect(
    clippy::zombie_processes,
    reason = "reaped with wait4 below, for its rusage"
)]
pub fn run_measured(command: &mut std::process::Command, within: std::time::Duration) -> Measured {
    let out = tempfile::NamedTempFile::new().unwrap();
    let started = std::time::Instant::now();
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(out.reopen().unwrap())
        .stderr(out.reopen().unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let (mut status, mut usage): (libc::c_int, libc::rusage) = (0, unsafe { std::mem::zeroed() });
    let mut success = None;
    loop {
        // SAFETY: wait4 on our own child, with valid pointers to locals.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            success = Some(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            break;
        }
        if started.elapsed() > within {
            // SAFETY: a signal to our own, not yet reaped, child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Measured {
        success,
        output: std::fs::read_to_string(out.path()).unwrap_or_default(),
        elapsed: started.elapsed(),
        peak_rss_kib: usage.ru_maxrss as u64,
    }
}
