//! `archive` (ship a log to object storage until stopped), `archive ls`
//! (what an archive holds) and `restore` (build a log from an archive,
//! or keep a standby current with `--follow`).
//!
//! The long-running ones stop cleanly on SIGINT or SIGTERM: the archiver
//! after one last pass, the standby after the object it is writing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ringwal::archive::{self, Archiver, RestoreTo, StoreOptions};
use ringwal::{Config, Lsn};
use serde_json::json;

use super::{CmdResult, Failure};

/// How to reach an S3-compatible store (each flag overrides the AWS
/// environment variable of the same meaning).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// S3 endpoint, e.g. http://127.0.0.1:3900 (default: AWS_ENDPOINT_URL).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 region (default: AWS_REGION).
    #[arg(long)]
    pub region: Option<String>,
    /// Access key id (default: AWS_ACCESS_KEY_ID).
    #[arg(long)]
    pub access_key_id: Option<String>,
    /// Secret access key (default: AWS_SECRET_ACCESS_KEY; prefer the
    /// variable: a flag shows in the process list).
    #[arg(long)]
    pub secret_access_key: Option<String>,
}

impl StoreArgs {
    fn options(&self) -> StoreOptions {
        let mut o = StoreOptions::default();
        o.endpoint = self.endpoint.clone();
        o.region = self.region.clone();
        o.access_key_id = self.access_key_id.clone();
        o.secret_access_key = self.secret_access_key.clone();
        o
    }
}

/// Arguments of `ringwal archive`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct ArchiveArgs {
    #[command(subcommand)]
    pub ls: Option<ArchiveCommand>,
    /// Log directory (another process may be writing it).
    #[arg(required = true)]
    pub dir: Option<PathBuf>,
    /// The archive: file:///absolute/dir or s3://bucket/prefix.
    #[arg(long, value_name = "URL", required = true)]
    pub to: Option<String>,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// How often the tail (the newest segment's durable records) is
    /// shipped; sealed segments go as soon as a pass sees them.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Run one pass and exit.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ArchiveCommand {
    /// List what an archive holds for a node: objects, LSN ranges, write
    /// times, sizes, and the tail's age.
    Ls(LsArgs),
}

/// Arguments of `ringwal archive ls`.
#[derive(Debug, clap::Args)]
pub(crate) struct LsArgs {
    /// The archive: file:///absolute/dir or s3://bucket/prefix.
    pub url: String,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Arguments of `ringwal restore`.
#[derive(Debug, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The archive: file:///absolute/dir or s3://bucket/prefix.
    pub url: String,
    /// Directory to build the log in (it must hold no log of the node).
    pub dir: PathBuf,
    /// Node id.
    #[arg(long, default_value_t = 1)]
    pub node: u32,
    /// Restore the records up to this LSN.
    #[arg(long, value_name = "LSN", conflicts_with_all = ["to_time", "follow"])]
    pub to_lsn: Option<Lsn>,
    /// Restore the records written at or before this time (RFC 3339, e.g.
    /// 2026-12-05T10:00:00Z or 2026-12-05T11:00:00+01:00).
    #[arg(long, value_name = "TIME", value_parser = crate::rfc3339, conflicts_with = "follow")]
    pub to_time: Option<SystemTime>,
    /// Keep the directory current as new objects land (a warm standby,
    /// readable meanwhile) until SIGINT or SIGTERM.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: how often to look for new objects.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// One JSON document: what was restored, or an error object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// SIGINT and SIGTERM, as a flag set when one arrives.
fn stop_flag() -> Result<Arc<AtomicBool>, Failure> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| Failure::io("installing a signal handler", e))?;
    }
    Ok(flag)
}

/// Sleep up to `d`, waking early once `stop` is set.
fn nap(stop: &AtomicBool, d: Duration) {
    let step = Duration::from_millis(50);
    let mut left = d;
    while !left.is_zero() && !stop.load(Ordering::Relaxed) {
        let s = step.min(left);
        std::thread::sleep(s);
        left -= s;
    }
}

/// `ringwal archive DIR --to URL` and `ringwal archive ls URL`.
pub(crate) fn run(a: ArchiveArgs) -> CmdResult {
    if let Some(ArchiveCommand::Ls(l)) = a.ls {
        return ls(l);
    }
    let (Some(dir), Some(url)) = (a.dir, a.to) else {
        return Err(Failure::usage("archive needs DIR and --to URL"));
    };
    let cfg = Config::builder().node(a.node).build();
    let mut archiver = Archiver::open(&dir, &cfg, &url, &a.store.options())?;
    if a.once {
        let p = archiver.pass()?;
        println!(
            "archived: sealed segments {} (point {}), last LSN {}, {} bytes put",
            p.sealed, p.archived_lsn, p.last_lsn, p.bytes
        );
        return Ok(ExitCode::SUCCESS);
    }
    let stop = stop_flag()?;
    let running = archiver.spawn(a.interval)?;
    let mut reported = 0;
    while !stop.load(Ordering::Relaxed) && !running.is_finished() {
        nap(&stop, Duration::from_millis(200));
        let s = running.status();
        if s.failures > reported {
            reported = s.failures;
            if let Some(why) = &s.failing {
                eprintln!("ringwal: archive pass failed (will retry): {why}");
            }
        }
    }
    let p = running.stop()?;
    println!(
        "archived up to LSN {} (sealed up to {})",
        p.last_lsn, p.archived_lsn
    );
    Ok(ExitCode::SUCCESS)
}

fn ls(a: LsArgs) -> CmdResult {
    let Some(l) = archive::list(&a.url, &a.store.options(), a.node)? else {
        // Nothing there is no damage: a typo in the URL or the node.
        return Err(Failure::new(
            super::exit::Kind::NoArchive,
            format!(
                "{}: no archive of node {} there: check the URL and --node",
                a.url, a.node
            ),
        ));
    };
    let rfc = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
    let age = l
        .tail_modified
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    if a.json {
        let objects: Vec<_> = l
            .objects
            .iter()
            .map(|o| {
                json!({
                    "url": o.url,
                    "tail": o.tail,
                    "first_lsn": o.first_lsn,
                    "last_lsn": o.last_lsn,
                    "bytes": o.bytes,
                    "first_write": o.written.map(|w| rfc(w.0)),
                    "last_write": o.written.map(|w| rfc(w.1)),
                })
            })
            .collect();
        let doc = json!({
            "node": l.node,
            "log_id": format!("{:016x}", l.log_id),
            "handed_out": l.handed_out,
            "objects": objects,
            "tail_age_ms": age.map(|d| d.as_millis() as u64),
        });
        println!("{doc:#}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "node {} log {:016x}, handed out up to LSN {}",
        l.node, l.log_id, l.handed_out
    );
    let total: u64 = l.objects.iter().map(|o| o.bytes).sum();
    for o in &l.objects {
        let when = o.written.map_or(String::from("-"), |w| {
            format!("{} .. {}", rfc(w.0), rfc(w.1))
        });
        println!(
            "{:<6} LSN {:>10} ..= {:<10} {:>12} bytes  {}  {}",
            if o.tail { "tail" } else { "sealed" },
            o.first_lsn,
            o.last_lsn,
            o.bytes,
            when,
            o.url
        );
    }
    let age = age.map_or(String::from("no tail"), |d| {
        format!("tail replaced {:.1} s ago", d.as_secs_f64())
    });
    println!("{} objects, {total} bytes; {age}", l.objects.len());
    Ok(ExitCode::SUCCESS)
}

/// `ringwal restore URL DIR`.
pub(crate) fn restore(a: RestoreArgs) -> CmdResult {
    let cfg = Config::builder().node(a.node).build();
    let opts = a.store.options();
    if a.follow {
        let stop = stop_flag()?;
        let r = archive::follow(&a.url, &opts, &a.dir, &cfg, a.interval, &|| {
            stop.load(Ordering::Relaxed)
        })?;
        report(&a, &r);
        return Ok(ExitCode::SUCCESS);
    }
    let to = match (a.to_lsn, a.to_time) {
        (Some(n), _) => RestoreTo::Lsn(n),
        (_, Some(t)) => RestoreTo::Time(t),
        _ => RestoreTo::End,
    };
    let r = archive::restore(&a.url, &opts, &a.dir, &cfg, to)?;
    report(&a, &r);
    Ok(ExitCode::SUCCESS)
}

fn report(a: &RestoreArgs, r: &archive::Restored) {
    if a.json {
        let doc = json!({
            "dir": a.dir.display().to_string(),
            "segments": r.segments,
            "bytes": r.bytes,
            "first_lsn": r.first_lsn,
            "last_lsn": r.last_lsn,
            "given_up": r.given_up.map(|(f, l)| json!({"first": f, "last": l})),
        });
        println!("{doc:#}");
        return;
    }
    println!(
        "restored {} segments ({} bytes) into {}: LSNs {}..={}",
        r.segments,
        r.bytes,
        shown(&a.dir),
        r.first_lsn,
        r.last_lsn
    );
    if let Some((f, l)) = r.given_up {
        println!("given up: LSNs {f}..={l} (held by the archive or handed out, not restored)");
    }
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}
