//! Where plugin log lines go.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

#[async_trait::async_trait]
pub trait LogBackend: Send + Sync + 'static {
    async fn emit(&self, plugin: &str, level: Level, message: &str);
}
