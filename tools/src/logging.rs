//! The log of `ethbcast`, `ethbcast-bench` and `ethbcast-suite`: the `tracing` events of the library and the
//! tools, on stderr. By default warnings and errors show (a capped receive buffer, a group
//! address the link could not join, an evicted member); `-v` adds information, `-vv` debug
//! events, `-vvv` traces. `RUST_LOG` (`tracing_subscriber::EnvFilter` syntax, e.g.
//! `RUST_LOG=ethbcast=debug`) takes precedence over `-v`. On a terminal lines carry a time and
//! colours; elsewhere (a pipe, a file, journald under the systemd unit) they are plain text
//! without a time stamp, which the journal adds itself.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The level `-v` given `verbose` times shows.
pub fn level(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// The `-v` flag of every binary (`#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Verbosity {
    /// Log more on stderr: -v information, -vv debug events (default: warnings and errors;
    /// RUST_LOG takes precedence).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

impl Verbosity {
    /// Installs the subscriber at this verbosity ([`init`]).
    pub fn init(self) {
        init(self.verbose)
    }
}

/// Installs the subscriber (once per process; later calls do nothing).
pub fn init(verbose: u8) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level(verbose)));
    let terminal = std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(terminal);
    // Err only when a subscriber is already installed.
    let _ = if terminal {
        fmt.try_init()
    } else {
        fmt.without_time().try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::level;

    #[test]
    fn each_v_shows_more() {
        assert_eq!(level(0), "warn");
        assert_eq!(level(1), "info");
        assert_eq!(level(2), "debug");
        assert_eq!(level(3), "trace");
        assert_eq!(level(9), "trace");
    }
}
