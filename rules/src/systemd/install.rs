//! What an enable will do, known before it runs.
//!
//! systemd offers no dry run of an enable over D-Bus: `GetUnitFileLinks` is a
//! dry run of a *disable* (the links that exist now, those of `Also=` units
//! included, whoever made them), and `EnableUnitFilesWithFlags` accepts only
//! `runtime`, `force` and `portable` (its dry-run flag is not public). What
//! an enable makes is what the `[Install]` sections of the unit files say
//! (systemd 252's install.c reads them from the unit file alone, never from
//! drop-ins): `WantedBy=`, `RequiredBy=`, `UpheldBy=` and `Alias=` links for
//! the unit, and the same for every `Also=` unit, recursively. So an enable
//! is planned from those files and the whole plan is held to the grant
//! before anything is linked: an `Also=` unit outside the grant is refused
//! outright (enabling it is an enable of an ungranted unit), whatever links
//! already exist.

use super::{SystemdGrant, is_unit_char};
use crate::Refusal;
use crate::systemd::{MAX_NAMES, Operation};
use std::collections::BTreeSet;

/// Where a (system, not runtime) enable makes its links.
pub const CONFIG_DIR: &str = "/etc/systemd/system";

/// The `[Install]` section of one unit file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Install {
    pub wanted_by: Vec<String>,
    pub required_by: Vec<String>,
    pub upheld_by: Vec<String>,
    pub alias: Vec<String>,
    pub also: Vec<String>,
    pub default_instance: Option<String>,
}

impl Install {
    /// The `[Install]` section of unit file `text` (of `unit`, for messages),
    /// as systemd's parser reads it: `#`/`;` comments, `\` continuations,
    /// space-separated lists that accumulate and that an empty assignment
    /// resets. A name Tend cannot resolve alone (a `%` specifier, quoting)
    /// is refused rather than guessed.
    pub fn parse(unit: &str, text: &str) -> Result<Install, Refusal> {
        let mut install = Install::default();
        let mut in_install = false;
        for line in logical_lines(text) {
            if line.starts_with('[') {
                in_install = line == "[Install]";
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if !in_install {
                continue;
            }
            let (key, value) = (key.trim(), value.trim());
            let list = match key {
                "WantedBy" => &mut install.wanted_by,
                "RequiredBy" => &mut install.required_by,
                "UpheldBy" => &mut install.upheld_by,
                "Alias" => &mut install.alias,
                "Also" => &mut install.also,
                "DefaultInstance" => {
                    install.default_instance = match value {
                        "" => None,
                        instance => Some(checked_name(unit, key, instance)?.to_string()),
                    };
                    continue;
                }
                _ => continue,
            };
            if value.is_empty() {
                list.clear();
            }
            for word in value.split_ascii_whitespace() {
                list.push(checked_name(unit, key, word)?.to_string());
            }
        }
        Ok(install)
    }

    /// The links enabling `unit` makes, as paths under [`CONFIG_DIR`]. A
    /// template is enabled as its `DefaultInstance=`; one without any is
    /// planned by its template name, and a template alias or target both as
    /// written and with the instance, so the plan never holds fewer names
    /// than systemd would link.
    pub fn links(&self, unit: &str) -> BTreeSet<String> {
        let name = match &self.default_instance {
            Some(default) if instance_of(unit) == Some("") => with_instance(unit, default),
            _ => unit.to_string(),
        };
        let instance = instance_of(&name);
        let names = |written: &str| {
            let mut names = vec![written.to_string()];
            if let Some(instance) = instance
                && instance_of(written) == Some("")
            {
                names.push(with_instance(written, instance));
            }
            names
        };
        let mut links = BTreeSet::new();
        for (owners, kind) in [
            (&self.wanted_by, "wants"),
            (&self.required_by, "requires"),
            (&self.upheld_by, "upholds"),
        ] {
            for owner in owners.iter().flat_map(|o| names(o)) {
                links.insert(format!("{CONFIG_DIR}/{owner}.{kind}/{name}"));
            }
        }
        for alias in self.alias.iter().flat_map(|a| names(a)) {
            links.insert(format!("{CONFIG_DIR}/{alias}"));
        }
        links
    }
}

/// Lines with continuations joined, trimmed, comments and blanks left out.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = vec![];
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with(['#', ';'])) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(start) => {
                pending.push_str(start);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                lines.push(std::mem::take(&mut pending));
            }
        }
    }
    if !pending.is_empty() {
        lines.push(pending);
    }
    lines
}

fn checked_name<'a>(unit: &str, key: &str, word: &'a str) -> Result<&'a str, Refusal> {
    if word.len() <= super::MAX_NAME_LEN && word.chars().all(is_unit_char) {
        return Ok(word);
    }
    Err(Refusal::Invalid(format!(
        "systemd enable of {}: its [Install] section has {key}={}, which Tend cannot resolve to unit names before enabling (a % specifier, quoting or an invalid name): write the unit names out in the unit file",
        crate::shown(unit),
        crate::shown(word)
    )))
}

/// The instance of `unit` ("a@b.service": "b"; a template "a@.service": ""),
/// None for a unit that is neither.
fn instance_of(unit: &str) -> Option<&str> {
    let (_, rest) = unit.split_once('@')?;
    Some(rest.rsplit_once('.').map_or(rest, |(instance, _)| instance))
}

/// Template `unit` ("a@.service") with `instance`: "a@instance.service".
fn with_instance(unit: &str, instance: &str) -> String {
    match unit.split_once("@.") {
        Some((prefix, suffix)) => format!("{prefix}@{instance}.{suffix}"),
        None => unit.to_string(),
    }
}

/// An enable's plan, built before it runs: the units it reaches (those
/// named, then `Also=` units) and every link it would make. The caller
/// reads each unit file [`EnablePlan::next_unit`] asks for and hands it to
/// [`EnablePlan::add`]; [`EnablePlan::finish`] holds every link to the grant.
pub struct EnablePlan<'g> {
    grant: &'g SystemdGrant,
    plugin: String,
    units: Vec<String>,
    pending: Vec<String>,
    reached: BTreeSet<String>,
    links: BTreeSet<String>,
}

impl<'g> EnablePlan<'g> {
    pub fn new(grant: &'g SystemdGrant, plugin: &str, units: &[String]) -> Self {
        EnablePlan {
            grant,
            plugin: plugin.to_string(),
            units: units.to_vec(),
            pending: units.iter().rev().cloned().collect(),
            reached: units.iter().cloned().collect(),
            links: BTreeSet::new(),
        }
    }

    /// The next unit whose file the plan needs.
    pub fn next_unit(&mut self) -> Option<String> {
        self.pending.pop()
    }

    /// `unit`'s file is `text`: its links join the plan; its `Also=` units
    /// must be granted (refused now if not) and are planned next.
    pub fn add(&mut self, unit: &str, text: &str) -> Result<(), Refusal> {
        let install = Install::parse(unit, text)?;
        let links = install.links(unit);
        self.grant.check_links(
            &self.plugin,
            Operation::Enable,
            &self.units,
            links.iter().map(String::as_str),
        )?;
        self.links.extend(links);
        for also in install.also {
            if !self.grant.covers(&also) {
                return Err(Refusal::Denied(format!(
                    "systemd enable of {} would also enable {also} (Also= in the [Install] section of {}), which no systemd grant covers: add \"{also}\" to units in [plugins.{}.grants] systemd, or remove Also={also} from the unit file",
                    crate::shown(&self.units.join(" ")),
                    crate::shown(unit),
                    self.plugin,
                )));
            }
            if self.reached.insert(also.clone()) {
                if self.reached.len() > MAX_NAMES {
                    return Err(Refusal::Invalid(format!(
                        "systemd enable of {}: its Also= units reach more than {MAX_NAMES} units; enable fewer at once",
                        crate::shown(&self.units.join(" "))
                    )));
                }
                self.pending.push(also);
            }
        }
        Ok(())
    }

    /// Every link the enable would make, all of them granted.
    pub fn finish(self) -> BTreeSet<String> {
        self.links
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systemd::UnitPattern;

    fn grant(units: &[&str]) -> SystemdGrant {
        SystemdGrant {
            units: units.iter().map(|u| UnitPattern(u.to_string())).collect(),
            operations: vec![Operation::Enable],
            watch: false,
        }
    }

    /// The plan of enabling `units`, the files given as (unit, text).
    fn plan(
        grant: &SystemdGrant,
        units: &[&str],
        files: &[(&str, &str)],
    ) -> Result<Vec<String>, Refusal> {
        let units: Vec<String> = units.iter().map(|u| u.to_string()).collect();
        let mut plan = EnablePlan::new(grant, "p", &units);
        while let Some(unit) = plan.next_unit() {
            let text = files
                .iter()
                .find(|(u, _)| *u == unit)
                .map_or("", |(_, t)| t);
            plan.add(&unit, text)?;
        }
        Ok(plan.finish().into_iter().collect())
    }

    #[test]
    fn the_install_section_is_read_as_systemd_reads_it() {
        let text = "[Unit]\nWantedBy=ignored.target\n[Install]\n# WantedBy=commented.target\n; Alias=also-commented.service\nWantedBy=a.target \\\n  b.target\nWantedBy=c.target\nAlias=x.service\nAlias=\nAlias=y.service\n Also = z.service\nDefaultInstance=tty1\nUnknown=whatever\n[Service]\nAlias=not-install.service\n";
        let install = Install::parse("u.service", text).unwrap();
        assert_eq!(install.wanted_by, ["a.target", "b.target", "c.target"]);
        assert_eq!(install.alias, ["y.service"], "an empty assignment resets");
        assert_eq!(install.also, ["z.service"]);
        assert_eq!(install.default_instance.as_deref(), Some("tty1"));
        assert!(install.required_by.is_empty() && install.upheld_by.is_empty());
    }

    #[test]
    fn names_tend_cannot_resolve_alone_are_refused() {
        for value in [
            "Alias=%p-x.service",
            "Also=\"victim.service\"",
            "WantedBy=a/b.target",
        ] {
            let err = Install::parse("u.service", &format!("[Install]\n{value}\n")).unwrap_err();
            assert_eq!(err.kind(), "invalid", "{value}");
            assert!(err.message().contains("write the unit names out"), "{err}");
        }
    }

    #[test]
    fn links_are_planned_for_each_install_key_and_template() {
        let install = Install::parse(
            "tend-a.service",
            "[Install]\nWantedBy=multi-user.target\nRequiredBy=tend-b.service\nUpheldBy=tend-c.service\nAlias=tend-alias.service",
        )
        .unwrap();
        let links: Vec<String> = install.links("tend-a.service").into_iter().collect();
        assert_eq!(
            links,
            [
                "/etc/systemd/system/multi-user.target.wants/tend-a.service",
                "/etc/systemd/system/tend-alias.service",
                "/etc/systemd/system/tend-b.service.requires/tend-a.service",
                "/etc/systemd/system/tend-c.service.upholds/tend-a.service",
            ]
        );
        let template = Install::parse(
            "tend-g@.service",
            "[Install]\nWantedBy=getty@.target\nAlias=tend-h@.service\nDefaultInstance=tty1",
        )
        .unwrap();
        let links: Vec<String> = template.links("tend-g@.service").into_iter().collect();
        assert_eq!(
            links,
            [
                "/etc/systemd/system/getty@.target.wants/tend-g@tty1.service",
                "/etc/systemd/system/getty@tty1.target.wants/tend-g@tty1.service",
                "/etc/systemd/system/tend-h@.service",
                "/etc/systemd/system/tend-h@tty1.service",
            ]
        );
    }

    #[test]
    fn an_ungranted_also_unit_is_refused_before_anything_is_linked() {
        let g = grant(&["tend-*.service"]);
        let files = [
            (
                "tend-a.service",
                "[Install]\nWantedBy=multi-user.target\nAlso=victim.service",
            ),
            ("victim.service", "[Install]\nWantedBy=multi-user.target"),
        ];
        let err = plan(&g, &["tend-a.service"], &files).unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert_eq!(
            err.message(),
            "systemd enable of tend-a.service would also enable victim.service (Also= in the [Install] section of tend-a.service), which no systemd grant covers: add \"victim.service\" to units in [plugins.p.grants] systemd, or remove Also=victim.service from the unit file"
        );
        // Also= a granted unit: its own links are planned and checked too.
        let files = [
            (
                "tend-a.service",
                "[Install]\nWantedBy=multi-user.target\nAlso=tend-b.service",
            ),
            (
                "tend-b.service",
                "[Install]\nAlias=kubelet.service\nAlso=tend-a.service",
            ),
        ];
        let err = plan(&g, &["tend-a.service"], &files).unwrap_err();
        assert!(
            err.message()
                .contains("would link /etc/systemd/system/kubelet.service"),
            "{err}"
        );
        let files = [
            (
                "tend-a.service",
                "[Install]\nWantedBy=multi-user.target\nAlso=tend-b.service",
            ),
            (
                "tend-b.service",
                "[Install]\nWantedBy=multi-user.target\nAlso=tend-a.service",
            ),
        ];
        assert_eq!(
            plan(&g, &["tend-a.service"], &files).unwrap(),
            [
                "/etc/systemd/system/multi-user.target.wants/tend-a.service",
                "/etc/systemd/system/multi-user.target.wants/tend-b.service",
            ],
            "a cycle of Also= is planned once"
        );
    }

    #[test]
    fn a_dependency_of_an_ungranted_unit_is_refused_in_the_plan() {
        let g = grant(&["tend-*.service"]);
        let files = [("tend-a.service", "[Install]\nRequiredBy=kubelet.service")];
        let err = plan(&g, &["tend-a.service"], &files).unwrap_err();
        assert!(
            err.message()
                .contains("a dependency of kubelet.service (RequiredBy="),
            "{err}"
        );
    }

    #[test]
    fn a_chain_of_also_units_is_bounded() {
        let g = grant(&["tend-*.service"]);
        let files: Vec<(String, String)> = (0..=MAX_NAMES)
            .map(|i| {
                (
                    format!("tend-{i}.service"),
                    format!("[Install]\nAlso=tend-{}.service", i + 1),
                )
            })
            .collect();
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(u, t)| (u.as_str(), t.as_str()))
            .collect();
        let err = plan(&g, &["tend-0.service"], &files).unwrap_err();
        assert!(err.message().contains("reach more than 256 units"), "{err}");
    }
}
