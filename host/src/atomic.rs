//! Replacing a file atomically: readers, and a crash, see the old file or the
//! new one, never a torn one.

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
/// a concurrent writer is written through), with `mode` (as for open(2): the
/// umask applies), fsynced, then renamed over `path`. On an error the
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
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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
