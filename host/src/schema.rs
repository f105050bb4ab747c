//! Schema versions of what Tend keeps on disk across versions of itself, so
//! that an older Tend never misreads what a newer one wrote (docs/upgrade.md).
//!
//! - the plugin state store (`state.redb`): a row in a table of its own,
//!   checked by the redb backend when it opens the file;
//! - the journal (`journal/`): the file `journal/VERSION`, checked here;
//! - the compile cache needs none: its keys hold Tend's and wasmtime's
//!   versions, so another version's entries are never read.
//!
//! A store without a version is version 1 (a store from before schema
//! versions) and is adopted by writing the version; a store of a version this
//! Tend does not know is refused, naming the file, both versions and the fix.

use std::io;
use std::path::Path;

/// The refusal of a store written by a newer Tend.
pub fn newer(what: &str, path: &Path, found: u64, known: u64) -> String {
    format!(
        "{what} {} has schema version {found}, written by a newer tend; this tend ({}) knows versions up to {known} and will not misread it: run the newer tend again (roll forward), or stop tend and restore the state dir from the backup taken before the upgrade (see docs/upgrade.md)",
        path.display(),
        env!("CARGO_PKG_VERSION")
    )
}

/// The name of the version file in a versioned directory.
pub const VERSION_FILE: &str = "VERSION";

/// Check the version file of `dir` (holding `what`) against `current` before
/// writing there: none is adopted as version 1 and written (creating `dir`); a version above
/// `current`, or one that is not a number, is refused.
pub fn check_dir(what: &str, dir: &Path, current: u64) -> io::Result<()> {
    let path = dir.join(VERSION_FILE);
    let found = readable(what, dir, current)?;
    if found.is_none_or(|found| found < current) {
        // Version 1 is the only one yet: adopting or migrating is writing it.
        crate::atomic::create_private_dir(dir)?;
        crate::atomic::write(&path, 0o600, format!("{current}\n").as_bytes())?;
    }
    Ok(())
}

/// Check the version file of `dir` before reading there, writing nothing:
/// the version found (None: unversioned, read as version 1), or the refusal.
pub fn readable(what: &str, dir: &Path, current: u64) -> io::Result<Option<u64>> {
    let path = dir.join(VERSION_FILE);
    let found = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| {
            io::Error::other(format!(
                "{what} version file {} holds {:?}, not a version number: restore the state dir from a backup, or remove the file if {what} is from before schema versions",
                path.display(),
                text.chars().take(40).collect::<String>()
            ))
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if found > current {
        return Err(io::Error::other(newer(what, dir, found, current)));
    }
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_or_unversioned_dir_is_given_the_version() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(readable("journal", dir.path(), 1).unwrap(), None);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "a reader writes nothing"
        );
        check_dir("journal", dir.path(), 1).unwrap();
        let written = std::fs::read_to_string(dir.path().join(VERSION_FILE)).unwrap();
        assert_eq!(written, "1\n");
        // Checked again: nothing changes, no temporary file is left.
        check_dir("journal", dir.path(), 1).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_newer_or_unreadable_version_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(VERSION_FILE), "7\n").unwrap();
        let read = readable("journal", dir.path(), 1).unwrap_err().to_string();
        let err = check_dir("journal", dir.path(), 1).unwrap_err().to_string();
        assert_eq!(read, err);
        assert!(
            err.contains(&format!(
                "journal {} has schema version 7, written by a newer tend",
                dir.path().display()
            )),
            "{err}"
        );
        assert!(err.contains("knows versions up to 1"), "{err}");
        assert!(
            err.contains("roll forward") && err.contains("restore"),
            "{err}"
        );
        // Refused, not rewritten.
        let kept = std::fs::read_to_string(dir.path().join(VERSION_FILE)).unwrap();
        assert_eq!(kept, "7\n");

        std::fs::write(dir.path().join(VERSION_FILE), "seven").unwrap();
        let err = check_dir("journal", dir.path(), 1).unwrap_err().to_string();
        assert!(
            err.contains("holds \"seven\", not a version number"),
            "{err}"
        );
    }
}
