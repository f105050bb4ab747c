//! `tend rbac -c FILE`: the RBAC the config's kube grants need, one scope
//! after the other (node, then cluster), from the same rules the host
//! enforces (`tend_grants::rbac`), so RBAC and grants cannot drift apart.

use crate::config::{Config, Scope};
use std::path::Path;
use std::process::ExitCode;
use tend_grants::rbac::{Input, Named, PluginRules, render};

/// The ServiceAccounts of examples/deploy.
const NAMESPACE: &str = "tend-system";

/// The RBAC YAML of every scope the config's plugins use.
pub fn rbac_text(config: &Config, named_as: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    for (scope, rbac_scope, account) in [
        (Scope::Node, tend_grants::rbac::Scope::Node, "tend-node"),
        (
            Scope::Cluster,
            tend_grants::rbac::Scope::Cluster,
            "tend-cluster",
        ),
    ] {
        let plugins: Vec<PluginRules> = config
            .enabled_plugins()
            .filter(|p| p.scope == scope && !p.grants.kube.is_empty())
            .map(|p| PluginRules {
                plugin: &p.name,
                rules: &p.grants.kube,
            })
            .collect();
        let lease = match (scope, &config.host.leader_election) {
            (Scope::Cluster, Some(e)) => Some(Named {
                namespace: &e.namespace,
                name: &e.name,
            }),
            _ => None,
        };
        if plugins.is_empty() && lease.is_none() {
            continue;
        }
        let input = Input {
            config: named_as,
            scope: rbac_scope,
            service_account: Named {
                namespace: NAMESPACE,
                name: account,
            },
            plugins: &plugins,
            events: true,
            lease,
        };
        out.push_str(&render(&input).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    Ok(out)
}

pub fn print(path: &Path) -> anyhow::Result<ExitCode> {
    let config = Config::load(path)?;
    let named_as = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    print!("{}", rbac_text(&config, &named_as)?);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// examples/deploy holds exactly what `tend rbac` prints for its configs,
    /// and ConfigMaps holding exactly those configs.
    #[test]
    fn the_deploy_examples_are_what_tend_rbac_prints() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/deploy");
        for scope in ["node", "cluster"] {
            let file = format!("{scope}-config.toml");
            let config = Config::load(&deploy.join(&file)).unwrap();
            let expected =
                std::fs::read_to_string(deploy.join(format!("rbac-{scope}.yaml"))).unwrap();
            assert_eq!(
                rbac_text(&config, &file).unwrap(),
                expected,
                "regenerate: tend rbac -c examples/deploy/{file} > examples/deploy/rbac-{scope}.yaml"
            );
            let toml = std::fs::read_to_string(deploy.join(&file)).unwrap();
            let map =
                std::fs::read_to_string(deploy.join(format!("configmap-{scope}.yaml"))).unwrap();
            let indented: String = toml
                .lines()
                .map(|l| {
                    if l.is_empty() {
                        "\n".to_string()
                    } else {
                        format!("    {l}\n")
                    }
                })
                .collect();
            assert!(
                map.contains(&indented),
                "configmap-{scope}.yaml must hold {file} verbatim"
            );
        }
    }
}
