//! The `tend` command line: the node agent's commands. The plugin author's
//! (`new`, `plugins push`, `plugins keygen`) are `tend-author`'s
//! ([`crate::author`]): nothing here names them, so the linker leaves their
//! code and the templates out of `tend`.

mod journal;
mod node;
mod once;
mod precompile;
mod rbac;
mod replay;
mod report;
mod rollout;
mod status;
mod validate;

use crate::fleet::rollout::Command as Order;
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The binary that holds the plugin author's commands.
const AUTHOR_BINARY: &str = "tend-author";

#[derive(Parser)]
#[command(
    name = "tend",
    version,
    about = "Keeps Kubernetes nodes healthy with sandboxed WebAssembly plugins",
    after_help = "Writing, publishing and signing plugins (new, plugins push, plugins keygen): tend-author."
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: reconcile every enabled plugin on its triggers; reload
    /// plugins and config as they change (and on SIGHUP); SIGTERM or SIGINT let
    /// the reconciles in flight finish, then exit 0.
    Run {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Validate the config and that every enabled plugin compiles and exports the world.
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Dry-run one reconcile of NAME (or of every enabled plugin) and print what
    /// it would change, with a diff of every file; by the running daemon when
    /// one answers on its control socket (<state-dir>/tend.sock). Changes nothing.
    Plan {
        name: Option<String>,
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Run one reconcile of NAME now, for real (unless the config sets dry-run);
    /// by the running daemon when one answers on its control socket
    /// (<state-dir>/tend.sock, mode 0600: run as tend's user).
    Reconcile {
        name: String,
        #[arg(short, long)]
        config: PathBuf,
        /// Also write every capability call of this reconcile and its answer
        /// to FILE (mode 0600: it holds what the plugin read), for `tend replay`.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
    /// Run a plugin against a recording (`tend reconcile NAME --record FILE`)
    /// without touching the node: every capability call is answered from the
    /// recording. Exits 0 when the plugin made the same calls and returned the
    /// same outcome, 1 at the first call where it diverged.
    Replay {
        file: PathBuf,
        /// The component to replay (default: the recorded plugin's file).
        #[arg(long, value_name = "NEW.wasm")]
        plugin: Option<PathBuf>,
        #[command(flatten)]
        cache: CompileCache,
    },
    /// Every mutation plugins made or planned, oldest first.
    Journal {
        #[arg(short, long)]
        config: PathBuf,
        /// Only this plugin's entries.
        #[arg(long)]
        plugin: Option<String>,
        /// Only entries newer than this ("10m", "2h", "1day").
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<std::time::Duration>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// What the running daemon reports (needs [host] listen); with NAME, why
    /// that plugin did or did not do something.
    Status {
        name: Option<String>,
        #[arg(short, long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print the Kubernetes RBAC the config's kube grants need (and the
    /// leader-election Lease and Events), per scope, as YAML.
    Rbac {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Moved to tend-author: refused, naming the command to run there.
    #[command(hide = true, disable_help_flag = true)]
    New {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Look at plugin components (publishing and signing them: tend-author).
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// The fleet by revision (needs [host.fleet] and the API server).
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
}

#[derive(Subcommand)]
enum RolloutCommand {
    /// Which revisions the nodes run, and how each fares: runs, errors,
    /// traps, timeouts, mutations, calls answered `denied` and budget
    /// refusals, summed over the nodes running it (what every tend publishes
    /// on its node Lease; Leases not renewed in time are left out).
    Status {
        #[arg(short, long)]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Stop widening the rollout: the candidate's nodes keep it, no other
    /// node takes it, until `resume`.
    Pause {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Go on with a paused rollout: its step bakes again from now.
    Resume {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Roll out a failed revision again, from the first step (the last one
    /// that failed, unless --revision names another).
    Retry {
        #[arg(short, long)]
        config: PathBuf,
        #[arg(long)]
        revision: Option<String>,
    },
}

/// Where a one-off command keeps compiled components, so that inspecting or
/// replaying the same plugin again does not compile it again (a Python
/// plugin's compile takes seconds).
#[derive(clap::Args)]
struct CompileCache {
    /// The compile cache [default: $XDG_CACHE_HOME/tend, else ~/.cache/tend;
    /// the daemon's is <state-dir>/cache].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every time; keep nothing.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl CompileCache {
    fn dir(&self) -> Option<PathBuf> {
        match (&self.cache_dir, self.no_cache) {
            (_, true) => None,
            (Some(dir), false) => Some(dir.clone()),
            (None, false) => std::env::var_os("XDG_CACHE_HOME")
                .filter(|dir| Path::new(dir).is_absolute())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
                .map(|base| base.join("tend")),
        }
    }
}

/// Bound a one-off command's compile cache as the daemon bounds its own
/// (the default `cache-max-size`), keeping what the command just loaded.
fn bound_compile_cache(runtime: &crate::runtime::Runtime, loaded: &str) {
    let keep = std::collections::HashSet::from([loaded.to_string()]);
    runtime.evict_cache(&keep, crate::config::DEFAULT_CACHE_MAX_SIZE.0);
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Show a component's world, imported capabilities and exports.
    Inspect {
        file: PathBuf,
        #[command(flatten)]
        cache: CompileCache,
    },
    /// Compile components ahead of time into DIR, which a config names as
    /// `precompiled-dir`: a first start loads them instead of compiling.
    Precompile {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Where the builds go, each named by its component's sha256.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The CPUs the builds may assume: x86-64, x86-64-v2, x86-64-v3 or
        /// native (this machine's) [default: x86-64-v2 on x86-64, else native].
        #[arg(long, value_name = "LEVEL")]
        cpu: Option<crate::runtime::CpuLevel>,
    },
    /// Moved to tend-author: refused, naming the command to run there.
    #[command(hide = true, disable_help_flag = true)]
    Push {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Moved to tend-author: refused, naming the command to run there.
    #[command(hide = true, disable_help_flag = true)]
    Keygen {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

/// Two malloc arenas instead of glibc's eight per core, unless the operator set
/// `MALLOC_ARENA_MAX`: each compile on the blocking pool's threads otherwise
/// leaves its own arena's memory held. Measured on a first start with the nine
/// built-in plugins (empty compile cache): a 124 MB peak with glibc's default,
/// 91 MB with two (docs/benchmarks.md). Called before any thread starts.
fn bound_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no thread runs yet.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}

pub fn main() -> ExitCode {
    bound_malloc_arenas();
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Run { .. }) {
        "info"
    } else {
        "warn"
    };
    execute(cli.log_format, default_level, async move {
        match cli.command {
            Command::Run { config } => crate::daemon::run(&config).await,
            Command::Journal {
                config,
                plugin,
                since,
                json,
            } => journal::show(&config, &crate::journal::Filter { plugin, since }, json),
            Command::Status { name, config, json } => match name {
                Some(name) => status::show_plugin(&config, &name, json).await,
                None => status::show(&config, json).await,
            },
            Command::Check { config } => validate::check(&config).await,
            Command::Plan { name, config } => once::plan(&config, name.as_deref()).await,
            Command::Reconcile {
                name,
                config,
                record,
            } => once::reconcile(&config, &name, record.as_deref()).await,
            Command::Replay {
                file,
                plugin,
                cache,
            } => replay::run(&file, plugin.as_deref(), cache.dir().as_deref()).await,
            Command::Rbac { config } => rbac::print(&config),
            Command::Rollout { command } => match command {
                RolloutCommand::Status { config, json } => rollout::status(&config, json).await,
                RolloutCommand::Pause { config } => {
                    rollout::order(&config, Order::Pause, None).await
                }
                RolloutCommand::Resume { config } => {
                    rollout::order(&config, Order::Resume, None).await
                }
                RolloutCommand::Retry { config, revision } => {
                    rollout::order(&config, Order::Retry, revision).await
                }
            },
            Command::New { args } => moved_to_author("new", &args),
            Command::Plugins { command } => match command {
                PluginsCommand::Inspect { file, cache } => {
                    validate::inspect(&file, cache.dir().as_deref()).await
                }
                PluginsCommand::Precompile { files, out, cpu } => precompile::run(
                    &files,
                    &out,
                    cpu.unwrap_or_else(crate::runtime::CpuLevel::portable),
                ),
                PluginsCommand::Push { args } => moved_to_author("plugins push", &args),
                PluginsCommand::Keygen { args } => moved_to_author("plugins keygen", &args),
            },
        }
    })
}

/// Runs one command on a fresh tokio runtime, logging as asked, and turns its
/// result into the exit code: shared by `tend` and `tend-author`.
pub(crate) fn execute(
    format: LogFormat,
    default_level: &str,
    command: impl Future<Output = anyhow::Result<ExitCode>>,
) -> ExitCode {
    init_logging(format, default_level);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    let result = runtime.block_on(command);
    // A blocking operation a plugin left behind (it is bounded, but may still
    // be finishing) must not keep the process alive past a short grace.
    runtime.shutdown_timeout(crate::runtime::SETTLE_GRACE);
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error may carry a daemon's answer: plugin text, made inert.
            eprintln!("error: {}", crate::text::inert(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// `tend new`, `tend plugins push` and `tend plugins keygen` on the node
/// agent, which ships no templates, publishing or key generation: say where
/// they are, with the same command there.
fn moved_to_author(command: &str, args: &[OsString]) -> anyhow::Result<ExitCode> {
    let mut instead = format!("{AUTHOR_BINARY} {command}");
    for arg in args {
        instead.push(' ');
        instead.push_str(&shell_word(&arg.to_string_lossy()));
    }
    anyhow::bail!(
        "`tend {command}` is in {AUTHOR_BINARY}, the plugin author's tool, not in the node agent (it ships no templates, publishing or key generation): run `{instead}` ({AUTHOR_BINARY} is built beside tend by `cargo build -p tend` and installed with it by `cargo install --path host`)"
    )
}

/// `word` as a shell reads it back: as is when plain, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._/:@=+-,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `TEND_LOG` (a tracing filter) wins; otherwise the daemon logs at info and
/// one-shot commands at warn, so their printed report is not drowned in plugin logs.
fn init_logging(format: LogFormat, default_level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TEND_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default_level},cranelift=warn,wasmtime=warn"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_command_quotes_what_a_shell_would_split_or_expand() {
        let plain = "oci://127.0.0.1:5000/p:v1";
        assert_eq!(shell_word(plain), plain);
        assert_eq!(shell_word("my dir"), "'my dir'");
        assert_eq!(shell_word("$(id)"), "'$(id)'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
