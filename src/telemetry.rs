//! Logging through `tracing`: plain or JSON lines on stderr. Spans carry ids
//! (`delivery.id`, `task.id`), never bodies, headers or secrets; the root span
//! of every HTTP request is the web floor's (`web/span.rs`).

use crate::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG`, when set, wins over `filter`.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    // A second init (tests calling into the library twice) is harmless.
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
}
