//! `ringwal`: the command-line tool for ringwal logs.
//!
//! `append` writes records from stdin; `cat`, `dump`, `verify` and `stat`
//! inspect a log read-only (safe beside a live writer); `bench` measures
//! append-to-acknowledgement latency under closed-loop load. Errors print
//! one line, `ringwal: <message>`, on stderr and exit with status 2;
//! `verify` exits with 1 when it finds damage.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
