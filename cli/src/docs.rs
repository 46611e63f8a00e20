//! `ringwal completions SHELL` and `ringwal man`: documentation generated
//! from the argument definitions themselves, so it never drifts from them.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::CommandFactory;

use super::{exit, Cli, CmdResult, CompletionsArgs, Failure};

/// Print the completion script for the shell on stdout.
pub(crate) fn completions(a: CompletionsArgs) -> CmdResult {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "ringwal", &mut out);
    write_out(&out)
}

/// Print the manual page (roff) on stdout: `ringwal man > ringwal.1`.
/// clap_mangen's sections, but the exit statuses as a section of their
/// own, rendered from the table (`exit::man_section`) rather than as the
/// help text's free-form lines.
pub(crate) fn man() -> CmdResult {
    let man = clap_mangen::Man::new(Cli::command());
    let mut out = Vec::new();
    let render = |out: &mut Vec<u8>| -> io::Result<()> {
        man.render_title(out)?;
        man.render_name_section(out)?;
        man.render_synopsis_section(out)?;
        man.render_description_section(out)?;
        man.render_options_section(out)?;
        man.render_subcommands_section(out)?;
        out.write_all(exit::man_section().as_bytes())?;
        man.render_version_section(out)
    };
    render(&mut out).map_err(|e| Failure::io("rendering the manual page", e))?;
    write_out(&out)
}

fn write_out(bytes: &[u8]) -> CmdResult {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(Failure::io("stdout", e)),
    }
}
