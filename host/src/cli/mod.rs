//! The `tend` command line.

mod journal;
mod new;
mod node;
mod once;
mod rbac;
mod replay;
mod report;
mod status;
mod validate;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tend",
    version,
    about = "Keeps Kubernetes nodes healthy with sandboxed WebAssembly plugins"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
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
    /// Write a new plugin project: the starter plugin in LANG, its unit test
    /// against the SDK's fakes, a sample config with the narrowest grants, a
    /// README, build.sh and test.sh.
    New {
        /// The plugin's name, as in [plugins.NAME].
        name: String,
        #[arg(long, value_enum)]
        lang: new::Lang,
        /// Where to write it (default: ./NAME); must not exist.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The Tend source checkout whose wit/ and sdk/ the project uses
        /// (default: $TEND_SOURCE, else the checkout tend was built from).
        #[arg(long)]
        tend: Option<PathBuf>,
    },
    /// Look at, publish and sign plugin components.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Show a component's world, imported capabilities and exports.
    Inspect { file: PathBuf },
    /// Publish a component to a registry as a wasm artifact (config
    /// application/vnd.wasm.config.v0+json, one application/wasm layer) and
    /// print the digest reference to pin in tend.toml.
    Push {
        file: PathBuf,
        /// oci://REGISTRY/REPOSITORY:TAG
        reference: String,
        /// Sign it with this cosign private key (password from COSIGN_PASSWORD).
        #[arg(long)]
        sign_key: Option<PathBuf>,
        /// Take registry credentials and insecure registries from this
        /// config's [host.oci].
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Reach the registry over plain HTTP (a local test registry).
        #[arg(long)]
        insecure: bool,
    },
    /// Write a cosign key pair, DIR/cosign.key (encrypted with
    /// COSIGN_PASSWORD) and DIR/cosign.pub, as `cosign generate-key-pair` does.
    Keygen { dir: PathBuf },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Run { .. }) {
        "info"
    } else {
        "warn"
    };
    init_logging(cli.log_format, default_level);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("start the tokio runtime");
    let result = runtime.block_on(async {
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
            Command::Replay { file, plugin } => replay::run(&file, plugin.as_deref()).await,
            Command::Rbac { config } => rbac::print(&config),
            Command::New {
                name,
                lang,
                dir,
                tend,
            } => new::run(&name, lang, dir, tend),
            Command::Plugins { command } => match command {
                PluginsCommand::Inspect { file } => validate::inspect(&file).await,
                PluginsCommand::Push {
                    file,
                    reference,
                    sign_key,
                    config,
                    insecure,
                } => {
                    push(
                        &file,
                        &reference,
                        sign_key.as_deref(),
                        config.as_deref(),
                        insecure,
                    )
                    .await
                }
                PluginsCommand::Keygen { dir } => {
                    crate::oci::push::keygen(&dir).map(|()| ExitCode::SUCCESS)
                }
            },
        }
    });
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

/// `tend plugins push`: [host.oci] from `config` (if given), plus the
/// target registry as insecure with `--insecure`.
async fn push(
    file: &std::path::Path,
    reference: &str,
    sign_key: Option<&std::path::Path>,
    config: Option<&std::path::Path>,
    insecure: bool,
) -> anyhow::Result<ExitCode> {
    let mut settings = match config {
        Some(path) => crate::config::Config::load(path)?.host.oci,
        None => crate::oci::Settings::default(),
    };
    if insecure {
        let target = crate::oci::Reference::parse(reference).map_err(anyhow::Error::msg)?;
        settings.insecure_registries.push(target.registry);
    }
    crate::oci::push::run(file, reference, &settings, sign_key).await?;
    Ok(ExitCode::SUCCESS)
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
