//! What the numbers were measured on: CPUs, kernel, the disk and
//! filesystem under the benchmark directory, the date and the commit, and
//! the CPU a busy neighbour took (`--busy-neighbour`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub date_utc: String,
    pub nproc: usize,
    pub cpu: String,
    pub mem_gib: f64,
    pub kernel: String,
    pub disk: String,
    pub filesystem: String,
    pub dir: String,
    pub ringwal_commit: String,
    pub running_as_root: bool,
    /// The CPU a busy neighbour spun on during every measured run
    /// (`--busy-neighbour`); `None`: no neighbour. Part of the machine
    /// the figures were taken on: one CPU of `nproc` was not free.
    pub busy_neighbour: Option<usize>,
}

impl Machine {
    pub fn probe(dir: &Path) -> Machine {
        Machine {
            date_utc: utc_now(),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu: cpu_model(),
            mem_gib: mem_gib(),
            kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            disk: disk_of(dir),
            filesystem: filesystem_of(dir),
            dir: dir.display().to_string(),
            ringwal_commit: commit(),
            running_as_root: is_root(),
            busy_neighbour: None,
        }
    }

    /// The machine alone, without the date, commit or neighbour: for a
    /// header that gives those separately (the grid's).
    pub fn hardware(&self) -> String {
        format!(
            "{} CPUs ({}) · {:.0} GiB · Linux {} · disk {} · {}",
            self.nproc, self.cpu, self.mem_gib, self.kernel, self.disk, self.filesystem
        )
    }

    /// One line for the top of the report.
    pub fn summary(&self) -> String {
        format!(
            "{} · {} CPUs ({}){} · {:.0} GiB · Linux {} · disk {} · {} · commit {}",
            self.date_utc,
            self.nproc,
            self.cpu,
            crate::report::beside(self.busy_neighbour),
            self.mem_gib,
            self.kernel,
            self.disk,
            self.filesystem,
            self.ringwal_commit
        )
    }
}

fn read_trim(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn is_root() -> bool {
    read_trim("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn cpu_model() -> String {
    read_trim("/proc/cpuinfo")
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn mem_gib() -> f64 {
    read_trim("/proc/meminfo")
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / (1024.0 * 1024.0))
}

/// The block device holding `dir`: its name, model (or `virtio` for a
/// virtio disk, which reports none), and write-cache mode.
fn disk_of(dir: &Path) -> String {
    let Ok(meta) = std::fs::metadata(dir) else {
        return "unknown".into();
    };
    let dev = meta.dev();
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let Ok(real) = std::fs::canonicalize(&sys) else {
        return format!("device {major}:{minor}");
    };
    // A partition's parent directory is the whole disk.
    let disk_dir = if real.join("partition").exists() {
        real.parent().map(Path::to_path_buf).unwrap_or(real.clone())
    } else {
        real.clone()
    };
    let name = disk_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let model = read_trim(disk_dir.join("device/model")).unwrap_or_else(|| {
        if real.to_string_lossy().contains("virtio") {
            "virtio".into()
        } else {
            "unknown model".into()
        }
    });
    let cache = read_trim(disk_dir.join("queue/write_cache")).unwrap_or_default();
    format!("{name} ({model}, write cache: {cache})")
}

/// Filesystem type and mount options of the mount holding `dir`.
fn filesystem_of(dir: &Path) -> String {
    let Some(info) = read_trim("/proc/self/mountinfo") else {
        return "unknown".into();
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype)) = (f.get(4), f.get(sep + 1)) else {
            continue;
        };
        if dir.starts_with(mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            let opts = f.get(5).copied().unwrap_or("");
            best = Some((mount.len(), format!("{fstype} on {mount} ({opts})")));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, s)| s)
}

fn commit() -> String {
    // A copy without .git (e.g. `git archive` of a commit) can say which.
    if let Ok(c) = std::env::var("RINGWAL_COMMIT") {
        return c;
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(c) => {
            let dirty = git(&["status", "--porcelain", "--", "../src", "../platform"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c} + uncommitted engine changes")
            } else {
                c
            }
        }
        None => "unknown".into(),
    }
}

/// `YYYY-MM-DD HH:MM UTC` from the system clock.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day),
/// counting in 400-year eras of 146097 days that start on March 1st.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
