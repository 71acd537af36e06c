//! rshmem's opt-in stderr logger: a `tracing-subscriber` `fmt` subscriber with an `EnvFilter`
//! read from `RSHMEM_LOG`, one line per event prefixed with the PE, written with one `write`.
//!
//! The library itself never installs a subscriber: a program calls [`crate::init_logging`] (or
//! installs its own subscriber, which then receives rshmem's events like any others).

use std::fmt;
use std::io::Write as _;

use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// What `RSHMEM_LOG` means when it is unset or empty.
const DEFAULT: &str = "warn";

/// Turns the value of `RSHMEM_LOG` into the `EnvFilter` directives it stands for.
///
/// The value is a list of `tracing` filter directives (`target=level`, comma-separated), with
/// one addition: a bare level (`debug`) means rshmem's own events at that level
/// (`rshmem=debug`; the target `rshmem` also covers `rshmem_bootstrap` and the other crates
/// whose names start with it). Everything no directive names is logged from `warn` up.
pub(crate) fn directives(value: &str) -> String {
    let mut out = vec![DEFAULT.to_string()];
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.parse::<LevelFilter>().is_ok() {
            out.push(format!("rshmem={part}"));
        } else {
            out.push(part.to_string());
        }
    }
    out.join(",")
}

/// The filter for `value`, or the default filter and the reason when `value` is not a valid
/// filter (one bad directive rejects the whole value, so a typo is noticed).
pub(crate) fn filter(value: &str) -> (EnvFilter, Option<String>) {
    match EnvFilter::builder().parse(directives(value)) {
        Ok(f) => (f, None),
        Err(e) => (
            EnvFilter::new(DEFAULT),
            Some(format!(
                "rshmem: RSHMEM_LOG={value:?} is not a valid tracing filter ({e}); logging warnings only. \
                 Example: RSHMEM_LOG=rshmem=debug,rshmem::heap=trace"
            )),
        ),
    }
}

/// Formats an event as `rshmem PE 3 WARN rshmem::heap: message key=value` (`PE ?` before the
/// PE is known).
struct PeLine {
    pe: Option<usize>,
}

impl<S, N> FormatEvent<S, N> for PeLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let m = event.metadata();
        match self.pe {
            Some(pe) => write!(w, "rshmem PE {pe} {} {}: ", m.level(), m.target())?,
            None => write!(w, "rshmem PE ? {} {}: ", m.level(), m.target())?,
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Where [`OneWrite`] hands a finished line.
trait LineSink {
    fn line(&self, b: &[u8]);
}

/// A writer that collects one event and hands it to its sink (stderr: [`Stderr`]) in one
/// piece on drop, with a single `write_all`, so lines of different threads (and, for lines
/// shorter than the pipe buffer, of different PEs sharing a pipe) never interleave mid-line.
struct OneWrite<S: LineSink>(Vec<u8>, S);

impl<S: LineSink> std::io::Write for OneWrite<S> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<S: LineSink> Drop for OneWrite<S> {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            self.1.line(&self.0);
        }
    }
}

/// Writes `line` and a newline to stderr with one `write` (see [`crate::say`]).
pub(crate) fn say_line(mut line: String) {
    line.push('\n');
    Stderr.line(line.as_bytes());
}

#[derive(Clone, Copy)]
struct Stderr;

impl LineSink for Stderr {
    fn line(&self, b: &[u8]) {
        // Nothing sensible to do when stderr is gone.
        let _ = std::io::stderr().lock().write_all(b);
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = OneWrite<Stderr>;
    fn make_writer(&'a self) -> Self::Writer {
        OneWrite(Vec::with_capacity(256), Stderr)
    }
}

/// The subscriber for filter `filter`, PE `pe`, writing to `writer`.
fn subscriber<W>(filter: EnvFilter, pe: Option<usize>, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .event_format(PeLine { pe })
        .finish()
}

/// This process's PE as the launcher numbers it (rank = PE), read from the launcher's variables.
fn launcher_pe() -> Option<usize> {
    rshmem_bootstrap::LaunchInfo::from_env()
        .ok()
        .map(|i| i.rank)
}

/// Installs the subscriber as the global default unless one is installed already (then it does
/// nothing and returns false).
pub(crate) fn init() -> bool {
    // RSHMEM_LOG, or NVSHMEM_DEBUG's level when RSHMEM_LOG is unset.
    let value =
        crate::config::effective(&|k| std::env::var(k).ok(), "RSHMEM_LOG").unwrap_or_default();
    let (f, problem) = filter(&value);
    let ok = tracing::subscriber::set_global_default(subscriber(f, launcher_pe(), Stderr)).is_ok();
    if let (true, Some(p)) = (ok, problem) {
        tracing::warn!(target: "rshmem::logging", "{p}");
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<String>>>);

    impl LineSink for Capture {
        fn line(&self, b: &[u8]) {
            if let Ok(mut v) = self.0.lock() {
                v.push(String::from_utf8_lossy(b).into_owned());
            }
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = OneWrite<Capture>;
        fn make_writer(&'a self) -> Self::Writer {
            OneWrite(Vec::new(), self.clone())
        }
    }

    /// The lines logged with `RSHMEM_LOG=value` by a fixed set of events.
    fn logged(value: &str) -> Vec<String> {
        let cap = Capture::default();
        let (f, problem) = filter(value);
        assert!(problem.is_none(), "{value:?}: {problem:?}");
        tracing::subscriber::with_default(subscriber(f, Some(3), cap.clone()), || {
            tracing::debug!(target: "rshmem::heap", "heap debug");
            tracing::trace!(target: "rshmem::heap", "heap trace");
            tracing::debug!(target: "rshmem::transport", "transport debug");
            tracing::warn!(target: "rshmem::transport", peer = 1, "transport warn");
            tracing::info!(target: "myapp", "app info");
            tracing::warn!(target: "myapp", "app warn");
        });
        let v = cap.0.lock().map(|v| v.clone()).unwrap_or_default();
        v
    }

    fn messages(lines: &[String]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.split(": ").nth(1).unwrap_or("").trim().to_string())
            .collect()
    }

    #[test]
    fn default_is_warnings() {
        assert_eq!(messages(&logged("")), ["transport warn peer=1", "app warn"]);
    }

    #[test]
    fn bare_level_means_rshmem() {
        assert_eq!(
            messages(&logged("debug")),
            [
                "heap debug",
                "transport debug",
                "transport warn peer=1",
                "app warn"
            ]
        );
        assert_eq!(directives(" trace "), "warn,rshmem=trace");
    }

    #[test]
    fn target_directives_are_a_real_filter() {
        // Per-module levels: heap at trace, the rest of rshmem at warn.
        assert_eq!(
            messages(&logged("rshmem::heap=trace")),
            [
                "heap debug",
                "heap trace",
                "transport warn peer=1",
                "app warn"
            ]
        );
        assert_eq!(
            messages(&logged("rshmem=debug,rshmem::heap=trace,myapp=info")),
            [
                "heap debug",
                "heap trace",
                "transport debug",
                "transport warn peer=1",
                "app info",
                "app warn"
            ]
        );
        assert_eq!(messages(&logged("rshmem=error,myapp=off")), [] as [&str; 0]);
    }

    #[test]
    fn one_whole_line_per_event_with_the_pe() {
        let lines = logged("");
        assert_eq!(
            lines[0],
            "rshmem PE 3 WARN rshmem::transport: transport warn peer=1\n"
        );
        assert!(lines
            .iter()
            .all(|l| l.ends_with('\n') && l.matches('\n').count() == 1));
    }

    #[test]
    fn bad_filter_is_reported() {
        let (_, problem) = filter("rshmem=loud");
        let p = problem.expect("an invalid level is rejected");
        assert!(p.contains("RSHMEM_LOG=\"rshmem=loud\""), "{p}");
    }
}
