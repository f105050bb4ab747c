//! containerd's `hosts.toml` for one upstream and its cache.
//! Format: https://github.com/containerd/containerd/blob/main/docs/hosts.md

/// The upstream's own registry: containerd falls back to it when the cache fails.
pub fn server_of(upstream: &str) -> String {
    match upstream {
        "docker.io" => "https://registry-1.docker.io".to_string(),
        other => format!("https://{other}"),
    }
}

pub fn render(upstream: &str, endpoint: &str, capabilities: &[String]) -> String {
    let capabilities: Vec<String> = capabilities.iter().map(|c| format!("{c:?}")).collect();
    format!(
        "# Written by tend mirror-gate while {endpoint} answers. Do not edit: remove the cache\n\
         # from the tend config to withdraw it.\n\
         server = \"{server}\"\n\
         \n\
         [host.\"{endpoint}\"]\n\
         \x20 capabilities = [{caps}]\n",
        server = server_of(upstream),
        endpoint = endpoint.trim_end_matches('/'),
        caps = capabilities.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_uses_its_registry_host() {
        assert_eq!(server_of("docker.io"), "https://registry-1.docker.io");
        assert_eq!(server_of("ghcr.io"), "https://ghcr.io");
    }

    #[test]
    fn renders_containerd_hosts_format() {
        let text = render(
            "docker.io",
            "http://127.0.0.1:5000/",
            &["pull".into(), "resolve".into()],
        );
        let parsed: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            parsed,
            [
                "server = \"https://registry-1.docker.io\"",
                "",
                "[host.\"http://127.0.0.1:5000\"]",
                "  capabilities = [\"pull\", \"resolve\"]",
            ]
        );
    }
}
