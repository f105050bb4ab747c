//! Real peers on loopback, each started by a script in tests/peers (or in
//! process) and stopped on drop.

pub mod containerd;
pub mod kube;
pub mod net;
pub mod registry;
pub mod systemd;
