use super::*;

const HOST: &str = "[host]\nplugins-dir = \"p\"\nstate-dir = \"s\"\n";

/// A held revision whose plugins `a` (and `b`) run the component bytes
/// given, kept in `staging`'s store as an intake keeps them.
fn held(staging: &Staging, dir: &Path, plugins: &[(&str, &[u8])], extra: &str) -> Held {
    let mut text = format!("{HOST}{extra}");
    let mut components = BTreeMap::new();
    for (name, bytes) in plugins {
        text.push_str(&format!("[plugins.{name}]\nfile = \"{name}.wasm\"\n"));
        let digest = crate::digest::sha256_digest(bytes);
        std::fs::write(staging.component_path(&digest), bytes).unwrap();
        components.insert(
            name.to_string(),
            Component {
                digest,
                pinned: None,
            },
        );
    }
    let config_path = dir.join("tend.toml");
    let config = Config::parse(&config_path, &text).unwrap();
    let digests = components
        .iter()
        .map(|(n, c)| (n.clone(), c.digest.clone()))
        .collect();
    Held {
        record: Record {
            revision: revision_of(&config.digest, &digests),
            config: text,
            components,
        },
        config,
    }
}

fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn the_first_revision_is_adopted_and_stable_and_a_restart_runs_what_was_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tend.toml");
    let mut staging = Staging::open(&config_path, dir.path()).unwrap();
    assert!(staging.adopted().is_none());
    let first = held(&staging, dir.path(), &[("a", b"one")], "");
    let a = first.record.revision.clone();
    staging.offer(first).unwrap();
    assert!(
        staging.adopted().is_none(),
        "held, not run, until the rollout says"
    );
    assert_eq!(staging.desired(), Some(a.as_str()));
    staging.adopt_first(&a, true).unwrap();
    let holding = staging.holding().unwrap();
    assert_eq!(
        (holding.adopted, holding.stable, holding.desired),
        (a.as_str(), Some(a.as_str()), None)
    );

    // The files ask for another revision: held, not run.
    let second = held(&staging, dir.path(), &[("a", b"two")], "");
    let b = second.record.revision.clone();
    staging.offer(second).unwrap();
    assert_eq!(staging.desired(), Some(b.as_str()));
    assert_eq!(staging.adopted().unwrap().record.revision, a);
    let kept = staging.component(&dir.path().join("a.wasm")).unwrap();
    assert_eq!(
        std::fs::read(&kept.path).unwrap(),
        b"one",
        "the adopted component runs"
    );

    // Adopted, it runs after a restart, whatever the files say by then.
    staging.adopt(&b).unwrap();
    let reopened = Staging::open(&config_path, dir.path()).unwrap();
    assert_eq!(reopened.adopted().unwrap().record.revision, b);
    assert_eq!(reopened.holding().unwrap().stable, Some(a.as_str()));
    let kept = reopened.component(&dir.path().join("a.wasm")).unwrap();
    assert_eq!(std::fs::read(&kept.path).unwrap(), b"two");
}

#[test]
fn only_the_adopted_stable_and_desired_revisions_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tend.toml");
    let mut staging = Staging::open(&config_path, dir.path()).unwrap();
    let mut names = vec![];
    for i in 0..4u8 {
        let held = held(&staging, dir.path(), &[("a", &[i])], "");
        names.push(held.record.revision.clone());
        staging.offer(held).unwrap();
        if i == 0 {
            staging.adopt_first(&names[0], true).unwrap();
        }
    }
    // r0 adopted and stable; r1 and r2 were desired once, r3 is now.
    assert_eq!(staging.desired(), Some(names[3].as_str()));
    assert_eq!(files(&dir.path().join("rollout/revisions")), 2);
    assert_eq!(files(&dir.path().join("rollout/components")), 2);
    staging.adopt(&names[3]).unwrap();
    staging.stable_is(&names[3]).unwrap();
    assert_eq!(files(&dir.path().join("rollout/revisions")), 1);
    assert_eq!(files(&dir.path().join("rollout/components")), 1);
    assert!(staging.get(&names[0]).is_none());
    // A stable revision this node does not hold changes nothing.
    staging.stable_is(&names[1]).unwrap();
    assert_eq!(staging.holding().unwrap().stable, Some(names[3].as_str()));
}

#[test]
fn a_revision_whose_component_is_gone_is_not_held_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tend.toml");
    let mut staging = Staging::open(&config_path, dir.path()).unwrap();
    let first = held(&staging, dir.path(), &[("a", b"one")], "");
    let digest = first.record.components["a"].digest.clone();
    let revision = first.record.revision.clone();
    staging.offer(first).unwrap();
    staging.adopt_first(&revision, true).unwrap();
    std::fs::remove_file(staging.component_path(&digest)).unwrap();
    let reopened = Staging::open(&config_path, dir.path()).unwrap();
    assert!(reopened.adopted().is_none());
    // Nor is one offered after its component was pruned (an intake racing
    // a prune): the offer says so, and the daemon takes it in again.
    let mut staging = reopened;
    let pruned = held(&staging, dir.path(), &[("a", b"two")], "");
    std::fs::remove_file(staging.component_path(&pruned.record.components["a"].digest)).unwrap();
    let refused = staging.offer(pruned).unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::NotFound);
    assert!(staging.adopted().is_none());
    // A book that is not one is no book.
    std::fs::write(dir.path().join("rollout/book.json"), "{\"adopted\": 7}").unwrap();
    assert!(
        Staging::open(&config_path, dir.path())
            .unwrap()
            .adopted()
            .is_none()
    );
}

#[test]
fn disabling_a_plugin_reduces_risk_against_the_stable_revision_and_the_book_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tend.toml");
    let mut staging = Staging::open(&config_path, dir.path()).unwrap();
    let both = held(&staging, dir.path(), &[("a", b"one"), ("b", b"bee")], "");
    let both_revision = both.record.revision.clone();
    staging.offer(both).unwrap();
    staging.adopt_first(&both_revision, true).unwrap();
    let fewer = held(&staging, dir.path(), &[("a", b"one")], "");
    let fewer_revision = fewer.record.revision.clone();
    staging.offer(fewer).unwrap();
    assert!(staging.reduces_risk(&fewer_revision));
    assert!(staging.holding().unwrap().reduces_risk);
    let changed = held(&staging, dir.path(), &[("a", b"new")], "");
    let changed_revision = changed.record.revision.clone();
    staging.offer(changed).unwrap();
    assert!(!staging.reduces_risk(&changed_revision));
    staging
        .set_reverted(Some((changed_revision.clone(), 1)))
        .unwrap();
    let reopened = Staging::open(&config_path, dir.path()).unwrap();
    assert_eq!(reopened.reverted(), Some((changed_revision.as_str(), 1)));
    // The store is Tend's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("rollout")), 0o700);
    assert_eq!(mode(&dir.path().join("rollout/book.json")), 0o600);
}
