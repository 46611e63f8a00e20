//! Progress on a terminal for the commands that can run long (`verify`,
//! `recover --apply`, `import`): drawn on stderr, and only when stdout is
//! a terminal and `--quiet` was not given, so nothing a script reads or
//! captures ever holds a progress line.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How often a spinner redraws while the work gives no news.
const TICK: Duration = Duration::from_millis(120);

/// A spinner with a message and, for counted work, a count; or nothing at
/// all when progress is hidden (every method is then a no-op).
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A spinner showing `message` (and the count, once [`inc`](Self::inc)
    /// is called), unless `quiet` or stdout is not a terminal.
    pub fn start(quiet: bool, message: impl Into<String>) -> Progress {
        if quiet || !std::io::stdout().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new_spinner().with_message(message.into());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {pos} {elapsed}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(TICK);
        Progress(Some(bar))
    }

    /// Say what is being done now.
    pub fn message(&self, message: impl Into<String>) {
        if let Some(bar) = &self.0 {
            bar.set_message(message.into());
        }
    }

    /// Count `n` more items done.
    pub fn inc(&self, n: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(n);
        }
    }
}

impl Drop for Progress {
    /// Erase the spinner, so the command's own output stands alone.
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
