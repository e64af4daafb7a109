//! `ethbcast-testbed`: bring the network-namespace test-bed up or down by hand.
//!
//! Why a command: to try ethbcast interactively (or from shell scripts) on the
//! same topology the automated tests use, and to clean up after a crashed run.
//! Exit codes: 0 ok, 1 failure, 2 usage error.
#![deny(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use ethbcast_testbed::{Rate, Testbed, TestbedConfig, TestbedError, DEFAULT_PREFIX, MAX_HOSTS};

const EXAMPLES: &str = "\
Examples:
  ethbcast-testbed up 8                      # 8 hosts ebc-h0..ebc-h7 on bridge ebc-sw/br0
  ethbcast-testbed up 4 --rate 100mbit --loss 1
  ethbcast-testbed up 3 --prefix demo --json
  ip netns exec ebc-h0 ip -br link           # run a command on host 0
  ethbcast-testbed status
  ethbcast-testbed down

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 (ip, tc) and, for --loss, nftables.";

#[derive(Debug, Parser)]
#[command(
    name = "ethbcast-testbed",
    version,
    about = "Build a virtual Ethernet switch with N hosts out of network namespaces",
    long_about = "Build a virtual Ethernet switch (a Linux bridge in namespace PREFIX-sw) with N hosts \
(namespaces PREFIX-h0.., each with an eth0 on the bridge) for testing ethbcast. \
Optional per-port rate limit (tbf) and random loss of ethbcast frames (nftables).",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create the test-bed (replacing leftovers with the same prefix) and leave it running.
    #[command(after_help = EXAMPLES)]
    Up {
        /// Number of hosts (1..=64).
        #[arg(value_parser = clap::value_parser!(u16).range(1..=MAX_HOSTS as i64))]
        hosts: u16,
        /// Rate limit of every port, both directions (e.g. 10mbit, 100mbit, 1gbit).
        #[arg(long, value_parser = parse_rate)]
        rate: Option<Rate>,
        /// Random loss of ethbcast frames at the switch, percent per receiving port (0..=100).
        #[arg(long, value_parser = parse_loss)]
        loss: Option<f64>,
        /// GRO on both ends of every veth: veths then receive through NAPI, as with native
        /// XDP, instead of the per-CPU backlog.
        #[arg(long)]
        gro: bool,
        /// MTU of every interface (e.g. 9000 for jumbo frames; default 1500).
        #[arg(long)]
        mtu: Option<u32>,
        /// Give every host an IPv4 address (10.88.0.N/24, N = host + 1) with its broadcast
        /// address and a multicast route, for IP tools such as UDPCast.
        #[arg(long)]
        ip: bool,
        /// Namespace name prefix ([a-z0-9-], up to 10 characters).
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: String,
        /// Print the hosts as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove the test-bed (all PREFIX-sw and PREFIX-hN namespaces). Idempotent.
    Down {
        /// Namespace name prefix.
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: String,
    },
    /// Show which namespaces of the test-bed exist and the nft drop counters.
    Status {
        /// Namespace name prefix.
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse::<Rate>().map_err(|e| e.to_string())
}

fn parse_loss(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number (percent, e.g. 1 or 0.5)"))?;
    if !v.is_finite() || !(0.0..=100.0).contains(&v) {
        return Err(format!("{s} is not between 0 and 100"));
    }
    Ok(v)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help/--version exit 0, usage errors exit 2.
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ethbcast-testbed: error: {e}");
            if matches!(
                e,
                TestbedError::InvalidConfig(_) | TestbedError::InvalidRate { .. }
            ) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> Result<(), TestbedError> {
    match cli.command {
        Cmd::Up {
            hosts,
            rate,
            loss,
            gro,
            mtu,
            ip,
            prefix,
            json,
        } => {
            let config = TestbedConfig {
                hosts: usize::from(hosts),
                prefix,
                rate,
                loss_pct: loss,
                gro,
                mtu,
                ipv4: ip,
            };
            let start = Instant::now();
            let tb = Testbed::up(&config)?;
            let took = start.elapsed();
            if json {
                let out = serde_json::json!({
                    "prefix": tb.prefix(),
                    "switch": tb.switch_netns(),
                    "bridge": ethbcast_testbed::BRIDGE,
                    "rate": tb.rate().map(|r| r.to_string()),
                    "loss_pct": tb.loss_pct(),
                    "hosts": tb.hosts(),
                    "ipv4": ip.then(|| tb.hosts().iter().map(|h| Testbed::ipv4(h.index).to_string()).collect::<Vec<_>>()),
                });
                println!("{out:#}");
            } else {
                println!(
                    "test-bed {:?} up in {} ms: switch {} (bridge {}), rate {}, loss {}%",
                    tb.prefix(),
                    took.as_millis(),
                    tb.switch_netns(),
                    ethbcast_testbed::BRIDGE,
                    tb.rate().map_or("unlimited".to_owned(), |r| r.to_string()),
                    tb.loss_pct()
                );
                println!("{:<6} {:<16} {:<6} MAC", "HOST", "NAMESPACE", "IFACE");
                for h in tb.hosts() {
                    let addr = if ip {
                        format!("  {}/24", Testbed::ipv4(h.index))
                    } else {
                        String::new()
                    };
                    println!(
                        "{:<6} {:<16} {:<6} {}{addr}",
                        h.index,
                        h.netns,
                        h.iface,
                        h.mac_string()
                    );
                }
                let h0 = &tb.hosts()[0].netns;
                println!("\nrun a command on a host:  ip netns exec {h0} <command>");
                println!(
                    "tear down:                ethbcast-testbed down --prefix {}",
                    tb.prefix()
                );
            }
            tb.keep();
            Ok(())
        }
        Cmd::Down { prefix } => {
            let start = Instant::now();
            let n = Testbed::down_prefix(&prefix)?;
            println!(
                "removed {n} namespace(s) of test-bed {prefix:?} in {} ms",
                start.elapsed().as_millis()
            );
            Ok(())
        }
        Cmd::Status { prefix, json } => {
            let st = Testbed::status(&prefix)?;
            if json {
                println!(
                    "{:#}",
                    serde_json::to_value(&st).map_err(|e| TestbedError::BadOutput {
                        tool: "serde_json",
                        reason: e.to_string()
                    })?
                );
                return Ok(());
            }
            if st.switch.is_none() && st.hosts.is_empty() {
                println!("test-bed {prefix:?}: down (no namespaces)");
                return Ok(());
            }
            println!(
                "test-bed {prefix:?}: switch {}, {} host(s)",
                st.switch.as_deref().unwrap_or("MISSING"),
                st.hosts.len()
            );
            for h in &st.hosts {
                println!("  {h}");
            }
            match st.drops {
                Some(d) => println!(
                    "nft drops: loss {} frame(s), broadcast isolation {} frame(s)",
                    d.loss, d.isolated
                ),
                None => println!("nft drops: no loss rules installed"),
            }
            Ok(())
        }
    }
}
