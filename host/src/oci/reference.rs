//! `oci://REGISTRY/REPOSITORY@sha256:DIGEST` and `oci://REGISTRY/REPOSITORY:TAG`:
//! parsed and validated in one place, because every part becomes a URL path
//! or a cache file name.

use std::fmt;

/// What an `oci://` reference names: exactly one of a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]`, as the registry is reached.
    pub registry: String,
    /// Lowercase path components, as the distribution spec defines them.
    pub repository: String,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Tag(String),
    /// `sha256:` and 64 lowercase hex digits.
    Digest(String),
}

pub const EXPECTED: &str = "expected oci://REGISTRY/REPOSITORY@sha256:DIGEST or oci://REGISTRY/REPOSITORY:TAG \
     (for example oci://registry.example.com/tend/unit-doctor:1.0)";

impl Reference {
    /// Parse `text`, which must start with `oci://`.
    pub fn parse(text: &str) -> Result<Reference, String> {
        let rest = text
            .strip_prefix("oci://")
            .ok_or_else(|| format!("{text:?} is not an oci:// reference: {EXPECTED}"))?;
        let bad = |why: String| format!("invalid reference {text:?}: {why}; {EXPECTED}");
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the registry".into()))?;
        validate_registry(registry).map_err(bad)?;
        let (repository, target) = if let Some((repository, digest)) = path.split_once('@') {
            validate_digest(digest).map_err(bad)?;
            (repository, Target::Digest(digest.to_string()))
        } else {
            // The tag follows the last ':' after the last '/'.
            let last = path.rfind('/').map_or(0, |i| i + 1);
            match path[last..].rfind(':') {
                Some(i) => {
                    let tag = &path[last + i + 1..];
                    validate_tag(tag).map_err(bad)?;
                    (&path[..last + i], Target::Tag(tag.to_string()))
                }
                None => return Err(bad("no tag or digest".into())),
            }
        };
        validate_repository(repository).map_err(bad)?;
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            target,
        })
    }

    pub fn digest(&self) -> Option<&str> {
        match &self.target {
            Target::Digest(d) => Some(d),
            Target::Tag(_) => None,
        }
    }

    /// The same repository at `digest` (already validated by the caller's hash).
    pub fn at_digest(&self, digest: &str) -> Reference {
        Reference {
            target: Target::Digest(digest.to_string()),
            ..self.clone()
        }
    }

    /// The same repository at `tag`.
    pub fn at_tag(&self, tag: &str) -> Reference {
        Reference {
            target: Target::Tag(tag.to_string()),
            ..self.clone()
        }
    }

    /// `registry/repository`, as cosign's simple-signing payload names it.
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    pub fn to_client(&self) -> oci_client::Reference {
        match &self.target {
            Target::Tag(tag) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone(),
            ),
            Target::Digest(digest) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.clone(),
            ),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        match &self.target {
            Target::Tag(tag) => write!(f, ":{tag}"),
            Target::Digest(digest) => write!(f, "@{digest}"),
        }
    }
}

/// `host[:port]`: DNS labels or an IPv4 address, an optional port.
fn validate_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "registry {registry:?} is not a host name or IPv4 address with an optional :port"
        ));
    }
    if let Some(port) = port
        && !(port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok_and(|p| p > 0))
    {
        return Err(format!("registry {registry:?} has an invalid port"));
    }
    Ok(())
}

/// Path components `[a-z0-9]+((.|_|__|-+)[a-z0-9]+)*` joined by '/'.
fn validate_repository(repository: &str) -> Result<(), String> {
    let component_ok = |c: &str| {
        let bytes = c.as_bytes();
        let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
            return false;
        }
        // Separators: one '.', one or two '_', or any number of '-', between alphanumerics.
        let mut i = 0;
        while i < bytes.len() {
            if alnum(bytes[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !alnum(bytes[i]) {
                i += 1;
            }
            let sep = &c[start..i];
            let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
            if !ok {
                return false;
            }
        }
        true
    };
    if repository.is_empty() || repository.len() > 255 || !repository.split('/').all(component_ok) {
        return Err(format!(
            "repository {repository:?} must be lowercase path components (letters, digits, '.', '_', '-') joined by '/'"
        ));
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn validate_tag(tag: &str) -> Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        && !tag.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be up to 128 letters, digits, '.', '_' or '-' (not first)"
        ))
    }
}

/// `sha256:` and 64 lowercase hex digits: the only digest Tend pins.
pub fn validate_digest(digest: &str) -> Result<(), String> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "digest \"{}\" must be sha256: and 64 lowercase hex digits",
            crate::text::peer_answer(digest.as_bytes())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_digest_and_tag_references() {
        let r = Reference::parse(&format!("oci://127.0.0.1:5000/tend/chaos@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "tend/chaos");
        assert_eq!(r.digest(), Some(D));
        assert_eq!(
            r.to_string(),
            format!("oci://127.0.0.1:5000/tend/chaos@{D}")
        );
        let r = Reference::parse("oci://registry.example.com/a/b-c/d_e:v1.2_rc-1").unwrap();
        assert_eq!(r.repository, "a/b-c/d_e");
        assert_eq!(r.target, Target::Tag("v1.2_rc-1".into()));
        let r = Reference::parse("oci://localhost:5000/x:1").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("localhost:5000", "x")
        );
        assert_eq!(
            r.at_tag("sha256-abc.sig").to_string(),
            "oci://localhost:5000/x:sha256-abc.sig"
        );
    }

    #[test]
    fn refuses_what_would_escape_a_path_or_url() {
        for bad in [
            "file.wasm",
            "oci://",
            "oci://registry",
            "oci://registry/repo",
            "oci://reg istry/repo:1",
            "oci://registry:0/repo:1",
            "oci://registry:99999/repo:1",
            "oci://registry:5000x/repo:1",
            "oci://-registry/repo:1",
            "oci://registry/../etc:1",
            "oci://registry/Repo:1",
            "oci://registry/repo/:1",
            "oci://registry//repo:1",
            "oci://registry/re..po:1",
            "oci://registry/repo:",
            "oci://registry/repo:-x",
            "oci://registry/repo:a/b",
            "oci://registry/repo:a%2fb",
            "oci://registry/repo@sha256:abc",
            "oci://registry/repo@sha512:0123",
            &format!("oci://registry/repo@{}", D.to_uppercase()),
            &format!("oci://registry/repo@{D}/x"),
            &format!("oci://registry/repo:{}", "t".repeat(129)),
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(e.contains("expected oci://"), "{bad}: {e}");
        }
    }
}
