//! `tend-author`: writes, publishes and signs plugins; kept out of the node
//! agent `tend` (host/src/author/).

fn main() -> std::process::ExitCode {
    tend::author::main()
}
