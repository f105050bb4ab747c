//! The one TLS crypto provider: rustls with ring (kube's too), installed as
//! the process default that reqwest 0.13 (built without its aws-lc-rs
//! provider) and so oci-client use. Called before any reqwest client is built.

pub fn install_ring() {
    // Already installed (by an earlier call) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
