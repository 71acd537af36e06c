//! What the perftests print: lines on stdout that survive a closed reader, JSON rows with a
//! description of the run, and a progress line on stderr.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use rshmem::World;

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `line` and a newline to stdout in one write and flushes. Once a write fails (the
/// reader went away: `| head`), nothing more is printed and [`stdout_closed`] is true; the
/// program keeps running its protocol with the other PEs and exits normally.
pub fn out(line: &str) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut s = String::with_capacity(line.len() + 1);
    s.push_str(line);
    s.push('\n');
    let mut o = std::io::stdout().lock();
    if o.write_all(s.as_bytes()).and_then(|()| o.flush()).is_err() {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// True once a write to stdout failed.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// The description of a run that every JSON row carries.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// rshmem's version (the workspace version).
    pub rshmem_version: &'static str,
    /// `git describe`-style commit of the build (`-dirty` when the tree had changes), or
    /// "unknown" when built outside a git checkout.
    pub commit: &'static str,
    /// `gpu` (heap in GPU memory) or `cpu`.
    pub backend: &'static str,
    /// How PE 0 reaches PE 1 (`shm`, `p2p`, `tcp`, `verbs`; `self` in a 1-PE job).
    pub transport: String,
    /// Host name of PE 0.
    pub host: String,
    /// The GPU's name (GPU backend) or the CPU model.
    pub device: String,
    /// Seconds since the Unix epoch when the run started.
    pub unix_time: u64,
    /// The program's options, defaults filled in.
    pub options: serde_json::Value,
}

impl RunInfo {
    /// Describes this run; `options` is serialized as given.
    pub fn new(world: &World, options: &impl Serialize) -> RunInfo {
        let gpu = world.gpu();
        let transport = if world.n_pes() < 2 {
            "self".to_string()
        } else {
            let peer = usize::from(world.my_pe() == 0);
            world
                .transport(peer)
                .map_or_else(|| "none".to_string(), |t| t.name.to_string())
        };
        let device = match gpu {
            Some(g) => g
                .ctx
                .name()
                .unwrap_or_else(|e| format!("GPU {} ({e:?})", g.ordinal)),
            None => cpu_model(),
        };
        RunInfo {
            rshmem_version: env!("CARGO_PKG_VERSION"),
            commit: option_env!("RSHMEM_GIT_COMMIT").unwrap_or("unknown"),
            backend: if gpu.is_some() { "gpu" } else { "cpu" },
            transport,
            host: host_name(),
            device,
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            options: serde_json::to_value(options).unwrap_or(serde_json::Value::Null),
        }
    }

    /// `fields` (a JSON object) followed by this description, as one JSON line.
    pub fn line(&self, fields: impl Serialize) -> String {
        let mut v = serde_json::to_value(fields).unwrap_or(serde_json::Value::Null);
        if let (Some(obj), Ok(serde_json::Value::Object(info))) =
            (v.as_object_mut(), serde_json::to_value(self))
        {
            for (k, x) in info {
                obj.entry(k).or_insert(x);
            }
        }
        v.to_string()
    }
}

/// A float for JSON: rounded to 6 decimals (None for NaN or infinity, printed as `null`).
pub fn json_f64(v: f64) -> Option<f64> {
    if v.is_finite() {
        format!("{v:.6}").parse().ok()
    } else {
        None
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// A one-line progress display on stderr (`\r`-rewritten), shown only on PE 0, only when
/// stderr is a terminal and `--quiet` was not given.
#[derive(Debug)]
pub struct Progress {
    on: bool,
    name: &'static str,
    shown: bool,
}

impl Progress {
    /// Progress of program `name` on PE `me`.
    pub fn new(name: &'static str, me: usize, quiet: bool) -> Progress {
        Progress {
            on: me == 0 && !quiet && std::io::stderr().is_terminal(),
            name,
            shown: false,
        }
    }

    /// Shows `what` (e.g. "size 4096, 3 of 20").
    pub fn show(&mut self, what: &str) {
        if self.on {
            let _ = write!(std::io::stderr(), "\r\x1b[2K{}: {what}", self.name);
            self.shown = true;
        }
    }

    /// Clears the line.
    pub fn clear(&mut self) {
        if self.on && self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers() {
        assert_eq!(json_f64(0.1 + 0.2), Some(0.3));
        assert_eq!(json_f64(f64::NAN), None);
        assert_eq!(
            serde_json::to_string(&json_f64(f64::INFINITY)).unwrap(),
            "null"
        );
    }
}
