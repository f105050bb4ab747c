fn main() -> std::process::ExitCode {
    tend::cli::main()
}
