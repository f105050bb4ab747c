//! `tend-author`: the plugin author's and publisher's commands, a second
//! binary of this crate beside the node agent `tend` (what the image and the
//! DaemonSet run): `new` (a project from the templates compiled in here),
//! `plugins push` (publish a component, signed) and `plugins keygen` (a
//! cosign key pair). `tend` never names this module, so none of it, nor the
//! templates, is linked into the node's binary (docs/design.md, "The node
//! agent and the author's tool").

mod new;

use crate::cli::{LogFormat, execute};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tend-author",
    version,
    about = "Writes, publishes and signs Tend plugins (the node agent is `tend`)"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        /// (default: $TEND_SOURCE, else the checkout tend-author was built from).
        #[arg(long)]
        tend: Option<PathBuf>,
    },
    /// Publish and sign plugin components.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
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
    execute(cli.log_format, "warn", async move {
        match cli.command {
            Command::New {
                name,
                lang,
                dir,
                tend,
            } => new::run(&name, lang, dir, tend),
            Command::Plugins { command } => match command {
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
    })
}

/// `tend-author plugins push`: [host.oci] from `config` (if given), plus the
/// target registry as insecure with `--insecure`.
async fn push(
    file: &Path,
    reference: &str,
    sign_key: Option<&Path>,
    config: Option<&Path>,
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
