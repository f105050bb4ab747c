//! Replacing a file atomically: readers, and a crash, see the old file or the
//! new one, never a torn one. Tend's own files and directories get the mode
//! Tend chooses, whatever the umask (under `umask 000` an open(2) mode of
//! 0666 is a file every user can rewrite).

use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Replace `path` with `bytes`; see [`write_with`].
pub fn write(path: &Path, mode: u32, bytes: &[u8]) -> io::Result<()> {
    write_with(path, mode, |file| file.write_all(bytes))
}

/// Replace `path` with what `fill` writes: into a temporary file beside it
/// (a random name, created exclusively, so neither a symlink planted there nor
/// a concurrent writer is written through), given `mode` exactly (fchmod,
/// not left to the umask), fsynced, then renamed over `path`. On an error the
/// temporary file is removed and `path` is left as it was.
pub fn write_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tend-tmp")
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.as_file()
        .set_permissions(Permissions::from_mode(mode))?;
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Create `dir` and any missing parent as Tend's own: mode 0700, whatever
/// the umask. An existing `dir` is left as it is (the operator's state dir
/// may have its own mode; `tend run` checks it is Tend's alone).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    create_dir_with_mode(dir, 0o700)
}

/// Create `dir` and any missing parent with `mode`, whatever the umask; an
/// existing `dir` is left as it is.
pub fn create_dir_with_mode(dir: &Path, mode: u32) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    // The mode given to mkdir(2) is still narrowed by the umask: set it.
    for created in missing {
        std::fs::set_permissions(created, Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Who besides Tend's user (and root) could write what `meta` describes,
/// and the command that stops it; None when it is Tend's alone.
pub fn other_writer(meta: &std::fs::Metadata, path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let (mode, shown) = (meta.mode() & 0o7777, path.display());
    let own = rustix::process::geteuid().as_raw();
    if meta.uid() != own && meta.uid() != 0 {
        return Some(format!(
            "it belongs to uid {}, not to tend's uid {own} or root: chown it to the user tend runs as",
            meta.uid()
        ));
    }
    if mode & 0o002 != 0 {
        return Some(format!(
            "it is writable by every user (mode {mode:o}): run `chmod o-w {shown}`"
        ));
    }
    if mode & 0o020 != 0 && meta.gid() != 0 {
        return Some(format!(
            "it is writable by its group {} (mode {mode:o}): run `chmod g-w {shown}`",
            meta.gid()
        ));
    }
    None
}

/// Refuse `dir` (the `what`, say "state dir") unless it is Tend's alone:
/// `risk` says what another writer could do there.
pub fn check_own_dir(dir: &Path, what: &str, risk: &str) -> anyhow::Result<()> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| anyhow::anyhow!("cannot read the {what} {}: {e}", dir.display()))?;
    match other_writer(&meta, dir) {
        Some(why) => anyhow::bail!(
            "the {what} {} is not tend's alone: {risk}; {why}",
            dir.display()
        ),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_file_is_replaced_whole_with_its_mode_and_nothing_left_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "old").unwrap();
        write(&path, 0o600, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let failed = write_with(&path, 0o600, |_| Err(io::Error::other("no")));
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
