//! The progress line on stderr: what is being measured and how fast it is
//! going right now. Redrawn in place on a terminal; one line per
//! measurement otherwise, so logs stay short.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

struct State {
    run_start: Instant,
    label: Mutex<(String, Instant)>,
    done: AtomicU64,
    tty: bool,
    quiet: AtomicBool,
}

fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(|| State {
        run_start: Instant::now(),
        label: Mutex::new((String::new(), Instant::now())),
        done: AtomicU64::new(0),
        tty: std::io::stderr().is_terminal(),
        quiet: AtomicBool::new(true),
    })
}

/// Start the redraw thread (terminal only). Call once.
pub fn start() {
    let s = state();
    if !s.tty {
        return;
    }
    std::thread::Builder::new()
        .name("progress".into())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_millis(500));
            draw();
        })
        .expect("spawn progress thread");
}

fn elapsed_clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{:02}:{:02}", s / 60, s % 60)
}

fn draw() {
    let s = state();
    if s.quiet.load(Ordering::Relaxed) {
        return;
    }
    let (label, since) = s.label.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let secs = since.elapsed().as_secs_f64().max(1e-3);
    let rate = s.done.load(Ordering::Relaxed) as f64 / secs;
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r\x1b[2K[{}] {label} · {secs:.1} s · {rate:.0} ops/s",
        elapsed_clock(s.run_start.elapsed())
    );
    let _ = err.flush();
}

/// A new measurement begins.
pub fn begin(label: String) {
    let s = state();
    if !s.tty {
        eprintln!("[{}] {label}", elapsed_clock(s.run_start.elapsed()));
    }
    *s.label.lock().unwrap_or_else(|p| p.into_inner()) = (label, Instant::now());
    s.done.store(0, Ordering::Relaxed);
    s.quiet.store(false, Ordering::Relaxed);
}

/// Operations completed (any thread).
pub fn tick(n: u64) {
    state().done.fetch_add(n, Ordering::Relaxed);
}

/// Clear the line before printing something else to stderr.
pub fn pause() {
    let s = state();
    s.quiet.store(true, Ordering::Relaxed);
    if s.tty {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// A note for the person watching (kept on screen).
pub fn note(msg: &str) {
    pause();
    eprintln!("[{}] {msg}", elapsed_clock(state().run_start.elapsed()));
}
