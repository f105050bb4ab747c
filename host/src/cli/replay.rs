//! `tend replay FILE [--plugin NEW.wasm]`: a plugin against a recording.

use super::report;
use crate::replay::{Recording, replay};
use crate::runtime::Runtime;
use std::path::Path;
use std::process::ExitCode;

pub async fn run(
    file: &Path,
    plugin: Option<&Path>,
    cache_dir: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let recording = Recording::read(file)?;
    let component = plugin.unwrap_or(&recording.plugin.file).to_path_buf();
    let runtime = std::sync::Arc::new(Runtime::new(cache_dir, 1)?);
    let loader = runtime.clone();
    let compiled = tokio::task::spawn_blocking(move || loader.load(&component)).await??;
    super::bound_compile_cache(&runtime, &compiled.digest);
    // Always named: the component may be the one the recording names, a
    // path taken from a file that could have come from anywhere.
    report::line(&format!(
        "replaying {} ({})",
        compiled.path.display(),
        compiled.digest
    ));
    if compiled.digest != recording.plugin.sha256 {
        report::line(&format!(
            "note: replaying a different component; the recording is of {} ({})",
            recording.plugin.file.display(),
            recording.plugin.sha256
        ));
    }
    let replayed = replay(&runtime, &compiled, &recording).await;
    let (same, verdict) = replayed.verdict(&recording.outcome);
    report::line(&verdict);
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
