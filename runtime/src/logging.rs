//! A minimal stderr logger for rshmem's `tracing` events (no extra dependencies).

use std::sync::atomic::{AtomicBool, Ordering};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};

static INSTALLED: AtomicBool = AtomicBool::new(false);

struct Stderr {
    max: Level,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?} "));
        } else {
            self.0.push_str(&format!("{}={value:?} ", field.name()));
        }
    }
}

impl Subscriber for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        *m.level() <= self.max
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = Fields(String::new());
        e.record(&mut f);
        eprintln!(
            "rshmem {} [{}] {}",
            e.metadata().level(),
            e.metadata().target(),
            f.0.trim_end()
        );
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

pub(crate) fn init() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    let max = match std::env::var("RSHMEM_LOG")
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        s if s.contains("trace") => Level::TRACE,
        s if s.contains("debug") => Level::DEBUG,
        s if s.contains("info") => Level::INFO,
        s if s.contains("error") => Level::ERROR,
        _ => Level::WARN,
    };
    let _ = tracing::subscriber::set_global_default(Stderr { max });
}
