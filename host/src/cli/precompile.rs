//! `tend plugins precompile`: plugins compiled ahead of time, for an image
//! (or any read-only directory) that a config names as `precompiled-dir`, so
//! that a node's first start loads them instead of compiling them (Cranelift's
//! working memory is most of a first start's peak, docs/benchmarks.md).

use crate::runtime::{
    CacheOutcome, CpuLevel, Runtime, create_precompiled_dir, precompile, precompiled_dir_problem,
    sha256_digest, write_precompiled,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Compile each of `files` for the CPUs of `cpu` into `out`, then load each
/// build as the daemon would, so that what is written is known to load.
pub fn run(files: &[PathBuf], out: &Path, cpu: CpuLevel) -> anyhow::Result<ExitCode> {
    create_precompiled_dir(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    // Refused before anything is compiled: a daemon would load nothing from it.
    if let Some(problem) = precompiled_dir_problem(out) {
        anyhow::bail!("{problem}");
    }
    let check = Runtime::new(None, files.len())?.with_precompiled(Some(out));
    for file in files {
        let started = Instant::now();
        let wasm = crate::untrusted::read(file, crate::untrusted::MAX_COMPONENT_BYTES)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", file.display()))?;
        let digest = sha256_digest(&wasm);
        let compiled = precompile(&wasm, cpu)
            .map_err(|e| anyhow::anyhow!("{}: cannot compile it: {e:#}", file.display()))?;
        let written = write_precompiled(out, &digest, &compiled)?;
        let refused = match check.load(file) {
            Ok(loaded) if loaded.cache == CacheOutcome::Precompiled => None,
            Ok(_) => Some("it does not load on this machine (see the warning above)".into()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = refused {
            // Nothing is left that a config could load.
            let _ = std::fs::remove_file(written.with_extension("xxh3"));
            let _ = std::fs::remove_file(&written);
            anyhow::bail!("{}: not precompiled: {why}", file.display());
        }
        println!(
            "precompiled: {} ({digest}) for {}: {} ({} KiB, {} ms)",
            file.display(),
            cpu.name(),
            written.display(),
            compiled.len() / 1024,
            started.elapsed().as_millis()
        );
    }
    Ok(ExitCode::SUCCESS)
}
