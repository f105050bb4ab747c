//! `cargo xtask image`: the OCI image of `tend` (release build) and the
//! built-in plugins, written without a container engine as an OCI image
//! archive (an `oci-layout` tar, what `ctr images import`, `skopeo copy
//! oci-archive:` and `podman load` read) at target/image/tend.oci.tar.
//!
//! Four gzip layers, so a new `tend` or new plugins move only their own:
//! the runtime (glibc's loader and the libraries `ldd` lists, copied from the
//! build machine; CA certificates; a minimal /etc), `tend` at
//! /usr/local/bin/tend, the plugins at /usr/lib/tend/plugins/NAME.wasm, and
//! their builds made ahead of time by that `tend` (`tend plugins precompile`:
//! for x86-64-v2 CPUs on x86-64) at /usr/lib/tend/precompiled, which the node config names:
//! a node's first start loads them instead of compiling.
//! Reproducible: every entry has mode, uid 0, gid 0 and the mtime of
//! SOURCE_DATE_EPOCH (else the last commit's time), entries are sorted, gzip
//! headers carry no time, so the same inputs give the same digest (the
//! precompiled builds: on every build machine with all of x86-64-v2).

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{BUILT_IN_PLUGINS, cargo, root, run, step};

/// Where the image puts the built-in plugins: a config names this
/// `plugins-dir`, and `[plugins.NAME]` loads NAME.wasm from it.
pub const PLUGINS_DIR: &str = "usr/lib/tend/plugins";
/// Where the image puts the plugins' builds made ahead of time: a config
/// names this `precompiled-dir`.
const PRECOMPILED_DIR: &str = "usr/lib/tend/precompiled";
/// Where the image puts `tend` (on PATH: the entrypoint is `tend`).
const TEND_PATH: &str = "usr/local/bin/tend";
/// The CA bundle, where rustls-native-certs and OpenSSL look for it.
const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// The name `ctr images import` gives the image (annotation io.containerd.image.name).
pub fn image_name() -> String {
    format!("localhost/tend:{}", env!("CARGO_PKG_VERSION"))
}
/// What the kustomize line names: the image of the deploy examples.
const DEPLOY_IMAGE: &str = "tend";
/// Where a registry would serve it, for the kustomize line (`TEND_IMAGE_REPO` overrides).
const DEFAULT_REPO: &str = "registry.example.com/tend";

/// One file or directory of a layer, its path relative to `/`.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    /// None for a directory.
    pub data: Option<Vec<u8>>,
}

impl Entry {
    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Entry {
        Entry {
            path: path.trim_start_matches('/').to_string(),
            mode,
            data: Some(data),
        }
    }

    pub fn dir(path: &str, mode: u32) -> Entry {
        Entry {
            path: path.trim_matches('/').to_string(),
            mode,
            data: None,
        }
    }
}

/// A layer: what `history` says of it, and its entries.
pub struct Layer {
    pub created_by: String,
    pub entries: Vec<Entry>,
}

/// An image, built in memory: every blob by its hex sha256, and the manifest's digest.
pub struct Image {
    pub blobs: BTreeMap<String, Vec<u8>>,
    pub index: Vec<u8>,
    pub manifest_digest: String,
    /// The layers' sizes: (gzip, tar).
    pub layer_sizes: Vec<(usize, usize)>,
}

/// What the image says of itself besides its layers.
pub struct Meta {
    /// Seconds since the epoch: every mtime and the `created` time.
    pub epoch: u64,
    pub revision: String,
    pub architecture: String,
}

/// `cargo xtask image`: builds tend (release), the image, writes the archive
/// and prints its digest and how to pin it.
pub fn image() -> Result<()> {
    step("building tend (release)");
    // The node agent only: tend-author is the plugin author's, not the node's.
    run(cargo().args(["build", "--release", "-p", "tend", "--bin", "tend"]))?;
    pack(&root().join("target/release/tend"))
}

/// The image `cargo xtask test` runs (tests/e2e/image.rs): the same layout
/// around the test build's `tend`, so a test run builds the host once (a
/// release build is about 10 minutes of a cold CI run). The test build's
/// debug info is dropped (`objcopy --strip-debug`, 258 MB to about 103): the
/// test asserts the layout, the entrypoint and the plugins, not the codegen.
pub fn image_of_test_build(tend: &Path) -> Result<()> {
    step("stripping the test build's debug info for the test image");
    let stripped = root().join("target/image/tend-test-build");
    std::fs::create_dir_all(root().join("target/image")).context("create target/image")?;
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(tend)
        .arg(&stripped))?;
    pack(&stripped)
}

/// Writes target/image/tend.oci.tar around `tend` and the built plugins.
fn pack(tend: &Path) -> Result<()> {
    let started = Instant::now();
    step("building the image");
    let meta = Meta {
        epoch: source_date_epoch()?,
        revision: git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        architecture: oci_architecture()?.into(),
    };
    let layers = vec![
        runtime_layer(tend)?,
        Layer {
            created_by: "cargo xtask image: tend".into(),
            entries: vec![Entry::file(
                TEND_PATH,
                0o755,
                std::fs::read(tend).with_context(|| format!("read {}", tend.display()))?,
            )],
        },
        plugins_layer(&root().join("target/plugins"))?,
        precompiled_layer(tend, &root().join("target/plugins"))?,
    ];
    let image = build(&layers, &meta)?;
    let out = root().join("target/image/tend.oci.tar");
    write_archive(&image, &out)?;
    let (gz, raw) = image
        .layer_sizes
        .iter()
        .fold((0, 0), |(g, r), (lg, lr)| (g + lg, r + lr));
    let repo = std::env::var("TEND_IMAGE_REPO").unwrap_or_else(|_| DEFAULT_REPO.into());
    println!(
        "{digest}\n\nimage {name} written to {archive} in {secs:.1} s\n  layers: {gz} bytes compressed, {raw} uncompressed\n  import: ctr -n NAMESPACE images import {archive}\n  push:   skopeo copy oci-archive:{archive} docker://{repo}:{version}\n          (skopeo keeps the manifest, so the digest stays {digest})\n\nkustomization.yaml, to pin it:\nimages:\n- name: {DEPLOY_IMAGE}\n  newName: {repo}\n  digest: {digest}",
        digest = image.manifest_digest,
        name = image_name(),
        archive = out.display(),
        secs = started.elapsed().as_secs_f64(),
        version = env!("CARGO_PKG_VERSION"),
    );
    Ok(())
}

/// SOURCE_DATE_EPOCH, else the time of the last commit, else 0.
fn source_date_epoch() -> Result<u64> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={value:?} is not a number of seconds"));
    }
    Ok(git(&["log", "-1", "--format=%ct"])
        .and_then(|t| t.parse().ok())
        .unwrap_or(0))
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn oci_architecture() -> Result<&'static str> {
    Ok(match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("no OCI architecture name known for {other}"),
    })
}

/// The dynamic loader and libraries `tend` needs (as `ldd` lists them, at the
/// paths it prints), the CA bundle and a minimal /etc, /tmp.
fn runtime_layer(tend: &Path) -> Result<Layer> {
    let output = Command::new("ldd")
        .arg(tend)
        .output()
        .context("cannot run ldd (Debian: libc-bin)")?;
    let listed = String::from_utf8_lossy(&output.stdout);
    if let Some(missing) = listed.lines().find(|l| l.contains("not found")) {
        bail!(
            "{} needs a library this machine lacks ({}): install it and build again",
            tend.display(),
            missing.trim()
        );
    }
    let mut entries = Vec::new();
    for library in ldd_paths(&listed) {
        let data = std::fs::read(&library).with_context(|| format!("read {library}"))?;
        entries.push(Entry::file(&library, 0o755, data));
    }
    let ca = Path::new("/").join(CA_BUNDLE);
    let ca_data = std::fs::read(&ca).with_context(|| {
        format!(
            "read {}: install the CA certificates (Debian: ca-certificates)",
            ca.display()
        )
    })?;
    entries.extend([
        Entry::file(CA_BUNDLE, 0o644, ca_data),
        Entry::file(
            "etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n".to_vec(),
        ),
        Entry::file("etc/group", 0o644, b"root:x:0:\nnogroup:x:65534:\n".to_vec()),
        Entry::file("etc/nsswitch.conf", 0o644, b"hosts: files dns\n".to_vec()),
        Entry::dir("tmp", 0o1777),
        Entry::dir("root", 0o700),
    ]);
    Ok(Layer {
        created_by: "cargo xtask image: runtime (glibc from the build machine, CA certificates)"
            .into(),
        entries,
    })
}

/// The absolute paths in `ldd` output (libraries and the loader; not the vDSO).
fn ldd_paths(ldd: &str) -> Vec<String> {
    ldd.lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, after)) => after.trim(),
                None => line.trim(),
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| path.to_string())
        })
        .collect()
}

/// The built-in plugins from `dir` (target/plugins): every one, or an error naming the fix.
fn plugins_layer(dir: &Path) -> Result<Layer> {
    let mut entries = Vec::new();
    for name in BUILT_IN_PLUGINS {
        let path = dir.join(format!("{name}.wasm"));
        let data = std::fs::read(&path).with_context(|| {
            format!(
                "read {}: run `cargo xtask plugins`, which builds it",
                path.display()
            )
        })?;
        entries.push(Entry::file(
            &format!("{PLUGINS_DIR}/{name}.wasm"),
            0o644,
            data,
        ));
    }
    Ok(Layer {
        created_by: format!(
            "cargo xtask image: plugins ({})",
            BUILT_IN_PLUGINS.join(", ")
        ),
        entries,
    })
}

/// The built-in plugins compiled ahead of time by `tend` itself (a build
/// loads only into the `tend` that made it), each named by its component's
/// sha256, with its checksum.
fn precompiled_layer(tend: &Path, plugins: &Path) -> Result<Layer> {
    step("compiling the plugins ahead of time for the image");
    let out = root().join("target/image/precompiled");
    let _ = std::fs::remove_dir_all(&out);
    // For x86-64-v2 CPUs on x86-64 (every server since 2009), else for the
    // build machine's own features (`tend`'s default).
    run(Command::new(tend)
        .args(["plugins", "precompile", "--out"])
        .arg(&out)
        .args(
            BUILT_IN_PLUGINS
                .iter()
                .map(|name| plugins.join(format!("{name}.wasm"))),
        ))?;
    let mut entries = Vec::new();
    for file in std::fs::read_dir(&out).with_context(|| format!("read {}", out.display()))? {
        let path = file?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let data = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        entries.push(Entry::file(
            &format!("{PRECOMPILED_DIR}/{name}"),
            0o644,
            data,
        ));
    }
    Ok(Layer {
        created_by: "tend plugins precompile (the plugins above)".into(),
        entries,
    })
}

fn sha256_hex(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

/// A layer's tar: its entries and their parent directories (0755), sorted,
/// owned by root, with mtime `epoch`.
fn layer_tar(entries: &[Entry], epoch: u64) -> Result<Vec<u8>> {
    let mut all: BTreeMap<String, &Entry> = BTreeMap::new();
    let implied: Vec<Entry> = entries
        .iter()
        .flat_map(|e| {
            let parts: Vec<&str> = e.path.split('/').collect();
            (1..parts.len())
                .map(|i| Entry::dir(&parts[..i].join("/"), 0o755))
                .collect::<Vec<_>>()
        })
        .collect();
    for entry in &implied {
        all.insert(entry.path.clone(), entry);
    }
    // Explicit entries win over implied directories (/tmp's 1777).
    for entry in entries {
        if all
            .insert(entry.path.clone(), entry)
            .is_some_and(|e| e.data.is_some())
        {
            bail!("{} is in the layer twice", entry.path);
        }
    }
    let mut tar = tar::Builder::new(Vec::new());
    for (path, entry) in all {
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(epoch);
        match &entry.data {
            Some(data) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(data.len() as u64);
                tar.append_data(&mut header, &path, data.as_slice())?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{path}/"), std::io::empty())?;
            }
        }
    }
    Ok(tar.into_inner()?)
}

/// Days since 1970-01-01 as (year, month, day) (Howard Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `epoch` as RFC 3339 in UTC.
fn rfc3339(epoch: u64) -> String {
    let (days, secs) = ((epoch / 86_400) as i64, epoch % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The image of `layers`: gzip layers, config, manifest, index.
pub fn build(layers: &[Layer], meta: &Meta) -> Result<Image> {
    let mut blobs = BTreeMap::new();
    let mut add = |data: Vec<u8>| {
        let hex = sha256_hex(&data);
        let descriptor = (format!("sha256:{hex}"), data.len());
        blobs.insert(hex, data);
        descriptor
    };
    let created = rfc3339(meta.epoch);
    let (mut layer_descriptors, mut diff_ids, mut history, mut layer_sizes) =
        (vec![], vec![], vec![], vec![]);
    for layer in layers {
        let tar = layer_tar(&layer.entries, meta.epoch)?;
        diff_ids.push(format!("sha256:{}", sha256_hex(&tar)));
        // GzBuilder writes mtime 0 and no file name: the bytes depend on the tar only.
        let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
        gz.write_all(&tar)?;
        let gz = gz.finish()?;
        layer_sizes.push((gz.len(), tar.len()));
        let (digest, size) = add(gz);
        layer_descriptors.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": digest,
            "size": size,
        }));
        history.push(serde_json::json!({ "created": created, "created_by": layer.created_by }));
    }
    let version = env!("CARGO_PKG_VERSION");
    let labels = serde_json::json!({
        "org.opencontainers.image.title": "tend",
        "org.opencontainers.image.description": "Tend node agent: sandboxed WebAssembly remediation plugins (built-in plugins in /usr/lib/tend/plugins)",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": meta.revision,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": env!("CARGO_PKG_LICENSE"),
    });
    let config = serde_json::json!({
        "created": created,
        "architecture": meta.architecture,
        "os": "linux",
        "config": {
            "Entrypoint": ["tend"],
            "Cmd": ["run", "-c", "/etc/tend/tend.toml"],
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                format!("SSL_CERT_FILE=/{CA_BUNDLE}"),
            ],
            "WorkingDir": "/",
            "User": "0:0",
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
        "history": history,
    });
    let (config_digest, config_size) = add(serde_json::to_vec(&config)?);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": layer_descriptors,
        "annotations": labels,
    });
    let (manifest_digest, manifest_size) = add(serde_json::to_vec(&manifest)?);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "annotations": {
                "io.containerd.image.name": image_name(),
                "org.opencontainers.image.ref.name": version,
            },
        }],
    }))?;
    Ok(Image {
        blobs,
        index,
        manifest_digest,
        layer_sizes,
    })
}

/// The OCI image layout of `image` as a tar (sorted, mtime 0).
fn archive(image: &Image) -> Result<Vec<u8>> {
    let mut entries = vec![
        Entry::file(
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        Entry::file("index.json", 0o644, image.index.clone()),
    ];
    for (hex, data) in &image.blobs {
        entries.push(Entry::file(
            &format!("blobs/sha256/{hex}"),
            0o644,
            data.clone(),
        ));
    }
    layer_tar(&entries, 0)
}

/// Write the archive to `out` atomically (a temp file beside it, renamed over).
fn write_archive(image: &Image, out: &Path) -> Result<()> {
    let dir = out.parent().unwrap();
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(".tend.oci.tar.tmp");
    std::fs::write(&tmp, archive(image)?).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("rename to {}", out.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(tend: &[u8]) -> Vec<Layer> {
        vec![
            Layer {
                created_by: "runtime".into(),
                entries: vec![
                    Entry::file("lib64/ld-linux-x86-64.so.2", 0o755, b"loader".to_vec()),
                    Entry::dir("tmp", 0o1777),
                ],
            },
            Layer {
                created_by: "tend".into(),
                entries: vec![Entry::file(TEND_PATH, 0o755, tend.to_vec())],
            },
        ]
    }

    fn meta(epoch: u64) -> Meta {
        Meta {
            epoch,
            revision: "abc".into(),
            architecture: "amd64".into(),
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_digest_and_archive() {
        let a = build(&layers(b"tend 1"), &meta(1_700_000_000)).unwrap();
        let b = build(&layers(b"tend 1"), &meta(1_700_000_000)).unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        assert_eq!(archive(&a).unwrap(), archive(&b).unwrap());
    }

    #[test]
    fn another_binary_or_time_gives_another_digest_and_shares_the_unchanged_layer() {
        let a = build(&layers(b"tend 1"), &meta(1_700_000_000)).unwrap();
        let other_tend = build(&layers(b"tend 2"), &meta(1_700_000_000)).unwrap();
        let other_time = build(&layers(b"tend 1"), &meta(1_700_000_001)).unwrap();
        assert_ne!(a.manifest_digest, other_tend.manifest_digest);
        assert_ne!(a.manifest_digest, other_time.manifest_digest);
        // The runtime layer is the same blob in both images.
        let shared = a.blobs.keys().filter(|k| other_tend.blobs.contains_key(*k));
        assert_eq!(shared.count(), 1);
    }

    #[test]
    fn layers_hold_sorted_root_owned_entries_with_their_parents() {
        let tar = layer_tar(
            &[
                Entry::file("usr/local/bin/tend", 0o755, b"x".to_vec()),
                Entry::dir("tmp", 0o1777),
                Entry::file("etc/passwd", 0o644, b"root".to_vec()),
            ],
            42,
        )
        .unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let seen: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.mtime().unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "etc/",
                "etc/passwd",
                "tmp/",
                "usr/",
                "usr/local/",
                "usr/local/bin/",
                "usr/local/bin/tend"
            ]
        );
        assert!(seen.iter().all(|s| s.2 == 0 && s.3 == 42));
        assert_eq!(seen[2].1, 0o1777);
        assert_eq!(seen[6].1, 0o755);
    }

    #[test]
    fn the_config_names_the_entrypoint_labels_and_layers() {
        let image = build(&layers(b"tend"), &meta(0)).unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(
            &image.blobs[image.manifest_digest.strip_prefix("sha256:").unwrap()],
        )
        .unwrap();
        let config_digest = manifest["config"]["digest"].as_str().unwrap();
        let config: serde_json::Value =
            serde_json::from_slice(&image.blobs[config_digest.strip_prefix("sha256:").unwrap()])
                .unwrap();
        assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["tend"]));
        assert_eq!(config["created"], "1970-01-01T00:00:00Z");
        assert_eq!(
            config["config"]["Labels"]["org.opencontainers.image.revision"],
            "abc"
        );
        assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
        assert_eq!(manifest["layers"].as_array().unwrap().len(), 2);
        let index: serde_json::Value = serde_json::from_slice(&image.index).unwrap();
        assert_eq!(
            index["manifests"][0]["digest"],
            image.manifest_digest.as_str()
        );
        assert_eq!(
            index["manifests"][0]["annotations"]["io.containerd.image.name"],
            image_name()
        );
    }

    #[test]
    fn ldd_output_gives_the_loader_and_libraries() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x7f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(ldd_paths("\tstatically linked\n").is_empty());
    }

    #[test]
    fn the_built_in_plugins_are_every_crate_of_plugins_and_no_test_plugin() {
        let mut crates: Vec<String> = std::fs::read_dir(root().join("plugins"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        crates.sort();
        let mut built_in = BUILT_IN_PLUGINS.to_vec();
        built_in.sort();
        assert_eq!(crates, built_in);
        assert!(
            crate::TEST_PLUGINS
                .iter()
                .all(|t| !BUILT_IN_PLUGINS.contains(t))
        );
    }

    #[test]
    fn a_missing_plugin_names_the_command_that_builds_it() {
        let error = plugins_layer(Path::new("/nonexistent")).err().unwrap();
        assert!(format!("{error:#}").contains("run `cargo xtask plugins`"));
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_764_125_999), "2025-11-26T02:59:59Z");
    }
}
