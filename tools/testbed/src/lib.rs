//! A reproducible Ethernet test-bed made of Linux network namespaces.
//!
//! Why: ethbcast's protocols rely on a switch that floods broadcast frames in
//! hardware. To test them on one machine, without touching the host's real
//! network, we build a tiny "LAN" out of kernel objects:
//!
//! ```text
//!   {prefix}-h0 [eth0] --veth-- [p0] \
//!   {prefix}-h1 [eth0] --veth-- [p1] -- br0   (in namespace {prefix}-sw)
//!   ...                               /
//! ```
//!
//! * one namespace `{prefix}-sw` holding a Linux bridge `br0` (STP off, forward
//!   delay 0, multicast snooping off: it behaves like a dumb switch that floods
//!   broadcast frames to every port but the ingress one);
//! * N host namespaces `{prefix}-h{i}`, each with an `eth0` carrying a
//!   deterministic locally administered MAC `02:eb:00:HH:HH:ii` (HH = hash of the
//!   prefix, ii = host index), whose veth peer `p{i}` is a bridge port;
//! * IPv6 disabled everywhere so no router/neighbour solicitations add noise;
//! * optionally a `tbf` rate limit on both directions of every port (egress of
//!   the host `eth0` and egress of the bridge port `p{i}`), which models the
//!   link speed (netem is not available on our kernels, tbf is). Each queue is
//!   sized as the hardware it stands for: a switch port buffers at least
//!   [`SWITCH_PORT_BUFFER`] bytes (more than the largest message a benchmark
//!   sends), and a host's own port queues [`HOST_QUEUE_FRAMES`] frames, as a
//!   NIC's transmit queue does, more than a socket's send buffer, so a sender is
//!   held back by its socket instead of losing frames at its own port;
//! * optionally random loss of ethbcast frames (EtherType 0x88B5) as an
//!   nftables rule in the bridge family in the switch namespace. The bridge
//!   clones a flooded frame once per output port and the forward hook sees each
//!   clone, so every receiver loses frames independently;
//! * optionally GRO on both ends of every veth ([`TestbedConfig::gro`]), which makes a veth
//!   receive through NAPI (batches, the path native XDP takes) instead of the per-CPU
//!   backlog. Native XDP on a veth itself needs nothing of its peer: an XDP program attached
//!   to a host's `eth0` turns on NAPI for that end, and the AF_XDP backend receives there
//!   (tested in native and generic mode). What needs the *peer* to have an XDP program or GRO
//!   is a frame redirected *into* a veth (`XDP_TX`, `XDP_REDIRECT` to it), which ethbcast
//!   never does: its AF_XDP socket sends in copy mode, through the ordinary transmit path;
//! * on demand, a rule that drops ethbcast frames sent to a group address
//!   (broadcast or multicast) on their way out of one host's bridge port
//!   ([`Testbed::drop_broadcast_to`]), for fail-over tests (a receiver that
//!   misses the hardware broadcast but still gets unicast).
//!
//! Everything is created with a few batched `ip`/`tc`/`nft` invocations (see
//! [`Testbed::up`]) and removed by deleting the namespaces, which destroys the
//! veths, the bridge, qdiscs and nft tables with them. [`Testbed`] tears down
//! on `Drop` (also after a panic); [`Testbed::keep`] disarms that for the CLI.
//! Leftovers of a crashed run are found by name (`{prefix}-sw`, `{prefix}-hN`)
//! and removed by [`Testbed::down_prefix`], which [`Testbed::up`] calls first.
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod mpi;
pub mod netns;
pub mod units;

use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Write};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;

use serde::Serialize;

/// Default name prefix of the namespaces.
pub const DEFAULT_PREFIX: &str = "ebc";
/// Longest accepted prefix (namespace names stay short and readable).
pub const MAX_PREFIX_LEN: usize = 10;
/// Most hosts a test-bed can have (the bridge port names and MAC byte allow more,
/// but setup time grows linearly and tests don't need more).
pub const MAX_HOSTS: usize = 64;
/// EtherType of ethbcast frames, the only traffic the loss rules touch.
pub const ETHERTYPE: u16 = 0x88b5;
/// Name of the bridge in the switch namespace.
pub const BRIDGE: &str = "br0";
/// Name of every host's interface inside its namespace.
pub const HOST_IFACE: &str = "eth0";
/// nftables table (bridge family) in the switch namespace.
pub const NFT_TABLE: &str = "ethbcast";
/// Largest frame that crosses a port (1500 MTU + Ethernet header), for tbf.
const MAX_FRAME: u64 = 1514;
/// Smallest MTU the test-bed sets: the least ethbcast's links accept.
pub const MIN_MTU: u32 = 576;
/// Largest MTU the test-bed sets: a veth's largest.
pub const MAX_MTU: u32 = 65535;
/// Queue of a switch port's tbf: 5 ms of the rate, and never less than
/// [`SWITCH_PORT_BUFFER`].
const SWITCH_QUEUE_MS: u64 = 5;
/// Smallest buffer of a switch port, in bytes: a message of the largest size a benchmark
/// sends (64 KiB, 45 full frames) and its headers fit several times over, as in the
/// per-port buffers of commodity switches (hundreds of KiB).
pub const SWITCH_PORT_BUFFER: u64 = 256 * 1024;
/// Frames a host's own port queues before it refuses one: a NIC's transmit queue
/// (`txqueuelen` 1000). At 1514 bytes that is 1.5 MB, more than a socket's default send
/// buffer (`net.core.wmem_default`, 208 KiB), so a sending socket is pushed back by its
/// buffer (`EAGAIN`, a TX ring's frames left for the next kick) before the port drops.
pub const HOST_QUEUE_FRAMES: u64 = 1000;
// A host's port holds more than a socket's default send buffer (212,992 bytes on Linux).
const _: () = assert!(HOST_QUEUE_FRAMES * MAX_FRAME > 4 * 212_992);

/// Errors of the test-bed. Messages say what to do about them.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// Not allowed to create namespaces or configure interfaces.
    #[error("permission denied: run as root (CAP_NET_ADMIN/CAP_SYS_ADMIN needed){}", detail_suffix(.detail))]
    PermissionDenied {
        /// What was attempted, if known.
        detail: String,
    },
    /// A needed program is not installed.
    #[error("{tool} not found: apt-get install {package}")]
    ToolMissing {
        /// Program name (`ip`, `tc`, `nft`).
        tool: &'static str,
        /// Debian package that provides it.
        package: &'static str,
    },
    /// The configuration is invalid.
    #[error("invalid test-bed configuration: {0}")]
    InvalidConfig(String),
    /// A rate string could not be parsed.
    #[error("invalid rate {input:?}: {reason} (examples: 10mbit, 100mbit, 1gbit, 500kbit)")]
    InvalidRate {
        /// What was given.
        input: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A host index is out of range.
    #[error("no host {index} in test-bed {prefix:?} (it has {hosts} hosts: 0..{hosts})")]
    NoSuchHost {
        /// Requested index.
        index: usize,
        /// Number of hosts.
        hosts: usize,
        /// Test-bed prefix.
        prefix: String,
    },
    /// An external command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line (and batch input summary).
        command: String,
        /// Exit status description.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// An I/O error while talking to the kernel or a child process.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Output of a tool could not be understood.
    #[error("unexpected output of {tool}: {reason}")]
    BadOutput {
        /// Tool name.
        tool: &'static str,
        /// What was wrong.
        reason: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

type Result<T, E = TestbedError> = std::result::Result<T, E>;

/// A link rate, in bits per second, as `tc` understands it (`100mbit` = 10^8 bit/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Rate {
    bits_per_sec: u64,
}

impl Rate {
    /// Smallest accepted rate (below this tbf parameters get silly).
    pub const MIN_BITS_PER_SEC: u64 = 100_000;
    /// Largest accepted rate.
    pub const MAX_BITS_PER_SEC: u64 = 400_000_000_000;

    /// A rate of `bits_per_sec` bit/s, checked against the accepted range.
    pub fn from_bits_per_sec(bits_per_sec: u64) -> Result<Rate> {
        if !(Self::MIN_BITS_PER_SEC..=Self::MAX_BITS_PER_SEC).contains(&bits_per_sec) {
            return Err(TestbedError::InvalidRate {
                input: format!("{bits_per_sec}bit"),
                reason: format!(
                    "must be between {} and {}",
                    Rate {
                        bits_per_sec: Self::MIN_BITS_PER_SEC
                    },
                    Rate {
                        bits_per_sec: Self::MAX_BITS_PER_SEC
                    }
                ),
            });
        }
        Ok(Rate { bits_per_sec })
    }

    /// Bits per second.
    pub fn bits_per_sec(self) -> u64 {
        self.bits_per_sec
    }

    /// Bytes per second.
    pub fn bytes_per_sec(self) -> u64 {
        self.bits_per_sec / 8
    }

    /// tbf bucket size in bytes: the larger of two maximum frames and 50 µs of the rate. A
    /// switch port sends its frames back to back at line rate and never faster; a bucket of
    /// a millisecond's bytes would let a 16 KiB message of 1 Gbit/s cross at the veth's
    /// speed, as if unshaped. tbf's watchdog is a high-resolution timer, so a bucket this
    /// small still keeps the rate.
    pub fn tbf_burst_bytes(self) -> u64 {
        self.tbf_burst_bytes_for(MAX_FRAME)
    }

    /// The same for frames of up to `max_frame` bytes (a bucket smaller than a frame never
    /// lets it through).
    pub fn tbf_burst_bytes_for(self, max_frame: u64) -> u64 {
        (2 * max_frame).max(self.bytes_per_sec() / 20_000)
    }

    /// Bytes a switch port of this rate queues: [`SWITCH_QUEUE_MS`] of the rate, at least
    /// [`SWITCH_PORT_BUFFER`].
    pub fn switch_queue_bytes(self) -> u64 {
        (self.bytes_per_sec() * SWITCH_QUEUE_MS / 1000).max(SWITCH_PORT_BUFFER)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.bits_per_sec;
        for (unit, scale) in [
            ("gbit", 1_000_000_000u64),
            ("mbit", 1_000_000),
            ("kbit", 1_000),
        ] {
            if b >= scale && (b / scale) * scale == b {
                return write!(f, "{}{unit}", b / scale);
            }
        }
        write!(f, "{b}bit")
    }
}

impl FromStr for Rate {
    type Err = TestbedError;

    /// Parses a rate as [`units::parse_rate`] does: `100mbit`, `2.5gbit` (tc's bit units,
    /// case-insensitive) or a size per second such as `50MB/s`.
    fn from_str(s: &str) -> Result<Rate> {
        let bad = |reason: String| TestbedError::InvalidRate {
            input: s.to_owned(),
            reason,
        };
        let bits = units::parse_rate(s).map_err(|e| bad(e.to_string()))?;
        Rate::from_bits_per_sec(bits).map_err(|e| match e {
            TestbedError::InvalidRate { reason, .. } => bad(reason),
            other => other,
        })
    }
}

/// What to build. See the module docs for the topology.
#[derive(Debug, Clone, PartialEq)]
pub struct TestbedConfig {
    /// Number of hosts, 1..=[`MAX_HOSTS`].
    pub hosts: usize,
    /// Namespace name prefix, see [`validate_prefix`].
    pub prefix: String,
    /// Optional rate limit of every port, both directions.
    pub rate: Option<Rate>,
    /// Optional random loss of ethbcast frames at the switch, percent (0..=100).
    pub loss_pct: Option<f64>,
    /// GRO on both ends of every veth (NAPI receive instead of the per-CPU backlog).
    pub gro: bool,
    /// MTU of every port and host interface (`None`: the kernel's 1500), e.g. 9000 for
    /// jumbo frames, between [`MIN_MTU`] and [`MAX_MTU`].
    pub mtu: Option<u32>,
    /// Give every host an IPv4 address ([`Testbed::ipv4`]) with its broadcast address and a
    /// route for multicast, for IP tools on the test-bed (UDPCast, MPI over TCP).
    pub ipv4: bool,
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            hosts: 3,
            prefix: DEFAULT_PREFIX.to_owned(),
            rate: None,
            loss_pct: None,
            gro: false,
            mtu: None,
            ipv4: false,
        }
    }
}

impl TestbedConfig {
    /// `hosts` hosts with the default prefix, no rate limit and no loss.
    pub fn new(hosts: usize) -> Self {
        TestbedConfig {
            hosts,
            ..Default::default()
        }
    }

    /// Sets the prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the rate limit.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Turns GRO on on both ends of every veth.
    pub fn gro(mut self, on: bool) -> Self {
        self.gro = on;
        self
    }

    /// Sets the MTU of every interface (jumbo frames: 9000).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Gives every host an IPv4 address, a broadcast address and a multicast route.
    pub fn ipv4(mut self, on: bool) -> Self {
        self.ipv4 = on;
        self
    }

    /// Sets the random loss percentage.
    pub fn loss_pct(mut self, pct: f64) -> Self {
        self.loss_pct = Some(pct);
        self
    }

    /// Checks every field; `up` calls this first.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_HOSTS).contains(&self.hosts) {
            return Err(TestbedError::InvalidConfig(format!(
                "hosts must be between 1 and {MAX_HOSTS}, got {}",
                self.hosts
            )));
        }
        validate_prefix(&self.prefix)?;
        if let Some(pct) = self.loss_pct {
            validate_loss(pct)?;
        }
        if let Some(m) = self.mtu.filter(|m| !(MIN_MTU..=MAX_MTU).contains(m)) {
            return Err(TestbedError::InvalidConfig(format!(
                "MTU {m} is out of range: use {MIN_MTU} to {MAX_MTU} (1500 is standard Ethernet, 9000 jumbo frames)"
            )));
        }
        Ok(())
    }
}

/// Checks a namespace prefix: 1..=[`MAX_PREFIX_LEN`] characters of `[a-z0-9-]`,
/// starting with a letter and not ending with `-`.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(TestbedError::InvalidConfig(format!(
            "prefix {prefix:?} {why} (use 1 to {MAX_PREFIX_LEN} characters of a-z, 0-9 and '-', starting with a letter, e.g. \"ebc\")"
        )))
    };
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return bad("has a bad length");
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("has characters outside [a-z0-9-]");
    }
    if !prefix.as_bytes()[0].is_ascii_lowercase() {
        return bad("does not start with a letter");
    }
    if prefix.ends_with('-') {
        return bad("ends with '-'");
    }
    Ok(())
}

fn validate_loss(pct: f64) -> Result<()> {
    if !pct.is_finite() || !(0.0..=100.0).contains(&pct) {
        return Err(TestbedError::InvalidConfig(format!(
            "loss must be a percentage between 0 and 100, got {pct}"
        )));
    }
    Ok(())
}

/// Name of the switch namespace for `prefix`.
pub fn switch_netns_name(prefix: &str) -> String {
    format!("{prefix}-sw")
}

/// Name of host `index`'s namespace for `prefix`.
pub fn host_netns_name(prefix: &str, index: usize) -> String {
    format!("{prefix}-h{index}")
}

/// Name of the bridge port (in the switch namespace) that leads to host `index`.
pub fn bridge_port_name(index: usize) -> String {
    format!("p{index}")
}

/// The deterministic MAC of host `index`: `02:eb:00:HH:HH:ii`, locally
/// administered and unicast, HH:HH = FNV-1a hash of the prefix.
pub fn host_mac(prefix: &str, index: usize) -> [u8; 6] {
    let mut h: u32 = 0x811c_9dc5;
    for b in prefix.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let h16 = ((h >> 16) ^ h) as u16;
    let [hi, lo] = h16.to_be_bytes();
    // Index is < MAX_HOSTS <= 256, checked by validate().
    [0x02, 0xeb, 0x00, hi, lo, (index & 0xff) as u8]
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff` (the library's formatter).
/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    let [a, b, c, d, e, g] = *mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
}

/// One simulated host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    /// Index, 0..hosts.
    pub index: usize,
    /// Name of its network namespace (`{prefix}-h{index}`).
    pub netns: String,
    /// Its interface inside that namespace, always `eth0`.
    pub iface: String,
    /// MAC of `iface`.
    #[serde(serialize_with = "ser_mac")]
    pub mac: [u8; 6],
}

fn ser_mac<S: serde::Serializer>(mac: &[u8; 6], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_mac(mac))
}

impl Host {
    /// MAC as text.
    pub fn mac_string(&self) -> String {
        format_mac(&self.mac)
    }
}

/// Frames dropped by the test-bed's nftables rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DropCounters {
    /// Dropped by random loss ([`Testbed::set_loss`]). A flooded frame counts
    /// once per output port it was dropped on.
    pub loss: u64,
    /// Dropped by [`Testbed::drop_broadcast_to`].
    pub isolated: u64,
}

/// Frames a port's queue (its tbf) dropped because it was full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortDrops {
    /// The host whose port it is.
    pub host: usize,
    /// Where the queue is: `"h3 eth0"` (the host's own port, towards the switch) or
    /// `"sw p3"` (the switch's port, towards the host).
    pub port: String,
    /// Frames dropped since the test-bed came up.
    pub drops: u64,
}

impl fmt::Display for PortDrops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dropped {} frame(s)", self.port, self.drops)
    }
}

/// What is present for a prefix (for `ethbcast-testbed status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TestbedStatus {
    /// The prefix looked at.
    pub prefix: String,
    /// The switch namespace, if present.
    pub switch: Option<String>,
    /// Host namespaces present, by index.
    pub hosts: Vec<String>,
    /// nft drop counters, if the nft table exists.
    pub drops: Option<DropCounters>,
}

/// A running test-bed. Torn down on drop unless [`Testbed::keep`] was called.
#[derive(Debug)]
pub struct Testbed {
    prefix: String,
    switch_netns: String,
    hosts: Vec<Host>,
    rate: Option<Rate>,
    mtu: Option<u32>,
    loss_pct: f64,
    isolated: BTreeSet<usize>,
    nft_used: bool,
    armed: bool,
}

impl Testbed {
    /// The largest frame that crosses a port: the MTU and the Ethernet header.
    fn max_frame(&self) -> u64 {
        self.mtu.map_or(MAX_FRAME, |m| u64::from(m) + 14)
    }

    /// Builds the test-bed described by `config`, first removing leftovers of
    /// a previous run with the same prefix. On error, whatever was created is
    /// removed again.
    pub fn up(config: &TestbedConfig) -> Result<Testbed> {
        config.validate()?;
        can_create_netns()?;
        if config.rate.is_some() {
            require_tool("tc", "iproute2")?;
        }
        if config.loss_pct.is_some_and(|p| p > 0.0) {
            require_tool("nft", "nftables")?;
        }
        let removed = Self::down_prefix(&config.prefix)?;
        if removed > 0 {
            tracing::info!(prefix = %config.prefix, removed, "removed leftover namespaces");
        }
        let prefix = config.prefix.clone();
        let hosts: Vec<Host> = (0..config.hosts)
            .map(|i| Host {
                index: i,
                netns: host_netns_name(&prefix, i),
                iface: HOST_IFACE.to_owned(),
                mac: host_mac(&prefix, i),
            })
            .collect();
        // Armed from here on: any error below tears down what exists.
        let mut tb = Testbed {
            switch_netns: switch_netns_name(&prefix),
            prefix,
            hosts,
            rate: config.rate,
            mtu: config.mtu,
            loss_pct: 0.0,
            isolated: BTreeSet::new(),
            nft_used: false,
            armed: true,
        };
        tb.build()?;
        if config.ipv4 {
            tb.add_ipv4()?;
        }
        if config.gro {
            tb.set_gro(true)?;
        }
        if let Some(pct) = config.loss_pct {
            if pct > 0.0 {
                tb.set_loss(pct)?;
            }
        }
        Ok(tb)
    }

    fn build(&self) -> Result<()> {
        let sw = &self.switch_netns;
        // 1. All namespaces in one `ip` run.
        let mut script = format!("netns add {sw}\n");
        for h in &self.hosts {
            script.push_str(&format!("netns add {}\n", h.netns));
        }
        run_tool("ip", &["-batch", "-"], Some(&script))?;

        // 2. No IPv6 anywhere (before any interface exists or is up).
        let mut all: Vec<String> = vec![sw.clone()];
        all.extend(self.hosts.iter().map(|h| h.netns.clone()));
        disable_ipv6(all)?;

        // 3. The switch: bridge, veth pairs (host ends created directly in the
        //    host namespaces as eth0 with their MAC), ports attached and up.
        let mtu = self.mtu.map(|m| format!(" mtu {m}")).unwrap_or_default();
        let mut script = String::from("link set lo up\n");
        script.push_str(&format!(
            "link add {BRIDGE}{mtu} type bridge stp_state 0 forward_delay 0 mcast_snooping 0\n"
        ));
        for h in &self.hosts {
            let port = bridge_port_name(h.index);
            script.push_str(&format!(
                "link add {port}{mtu} type veth peer name {HOST_IFACE}{mtu} address {} netns {}\n",
                h.mac_string(),
                h.netns
            ));
            script.push_str(&format!("link set {port} master {BRIDGE}\n"));
            script.push_str(&format!("link set {port} up\n"));
        }
        script.push_str(&format!("link set {BRIDGE} up\n"));
        run_tool("ip", &["-n", sw, "-batch", "-"], Some(&script))?;

        // 4. Switch-side rate limits (egress of each bridge port = towards the host).
        if let Some(rate) = self.rate {
            let mut script = String::new();
            for h in &self.hosts {
                script.push_str(&tbf_line(
                    &bridge_port_name(h.index),
                    rate,
                    self.max_frame(),
                    rate.switch_queue_bytes(),
                ));
            }
            run_tool("tc", &["-n", sw, "-batch", "-"], Some(&script))?;
        }

        // 5. Hosts, in parallel: lo and eth0 up, host-side rate limit.
        let mut children = Vec::new();
        for h in &self.hosts {
            let script = format!("link set lo up\nlink set {HOST_IFACE} up\n");
            children.push(spawn_tool(
                "ip",
                &["-n", &h.netns, "-batch", "-"],
                Some(&script),
            )?);
            if let Some(rate) = self.rate {
                let script = tbf_line(
                    HOST_IFACE,
                    rate,
                    self.max_frame(),
                    HOST_QUEUE_FRAMES * self.max_frame(),
                );
                children.push(spawn_tool(
                    "tc",
                    &["-n", &h.netns, "-batch", "-"],
                    Some(&script),
                )?);
            }
        }
        let mut first_err = None;
        for child in children {
            if let Err(e) = child.wait() {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(())
    }

    /// Turns GRO on or off on both ends of every veth (the bridge ports in the switch
    /// namespace, every host's `eth0`).
    pub fn set_gro(&self, on: bool) -> Result<()> {
        let set = |ns: &str, devs: Vec<String>| -> Result<()> {
            let ns2 = ns.to_owned();
            netns::run_in(ns, move || -> Result<()> {
                for d in &devs {
                    ethbcast_sys::iface::set_gro(d, on).map_err(|e| TestbedError::Io {
                        context: format!("GRO {} on {d} in {ns2}", if on { "on" } else { "off" }),
                        source: io::Error::other(e.to_string()),
                    })?;
                }
                Ok(())
            })
            .map_err(|e| io_err(format!("cannot enter namespace {ns}"), e))?
        };
        let ports = self
            .hosts
            .iter()
            .map(|h| bridge_port_name(h.index))
            .collect();
        set(&self.switch_netns, ports)?;
        for h in &self.hosts {
            set(&h.netns, vec![HOST_IFACE.to_owned()])?;
        }
        Ok(())
    }

    /// The namespace prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The switch namespace (`{prefix}-sw`).
    pub fn switch_netns(&self) -> &str {
        &self.switch_netns
    }

    /// The hosts, by index.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Host `index`, if it exists.
    pub fn host(&self, index: usize) -> Option<&Host> {
        self.hosts.get(index)
    }

    /// The configured rate limit.
    /// The IPv4 address [`TestbedConfig::ipv4`] gives host `index`: 10.88.0.(index + 1)/24
    /// (each test-bed is its own segment, so test-beds may share the addresses).
    pub fn ipv4(index: usize) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 88, 0, (index + 1) as u8)
    }

    /// Gives every host its IPv4 address ([`Testbed::ipv4`]) with `brd +` (tools such as
    /// UDPCast find their rendezvous address through the interface's broadcast address; without
    /// one they say hello to 0.0.0.0 and never start) and a route for multicast (224.0.0.0/4)
    /// through its interface.
    fn add_ipv4(&self) -> Result<()> {
        let mut children = Vec::new();
        for h in &self.hosts {
            let script = format!(
                "addr add {}/24 brd + dev {HOST_IFACE}\nroute replace 224.0.0.0/4 dev {HOST_IFACE}\n",
                Testbed::ipv4(h.index)
            );
            children.push(spawn_tool(
                "ip",
                &["-n", &h.netns, "-batch", "-"],
                Some(&script),
            )?);
        }
        for c in children {
            c.wait()?;
        }
        Ok(())
    }

    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// The current random loss percentage.
    pub fn loss_pct(&self) -> f64 {
        self.loss_pct
    }

    /// Sets the random loss of ethbcast frames (EtherType 0x88B5) forwarded by
    /// the switch, per output port, in percent (0 removes the rule). Resolution
    /// is 0.01 %. Counters are kept across changes.
    pub fn set_loss(&mut self, pct: f64) -> Result<()> {
        validate_loss(pct)?;
        let old = self.loss_pct;
        self.loss_pct = pct;
        if let Err(e) = self.apply_nft() {
            self.loss_pct = old;
            return Err(e);
        }
        Ok(())
    }

    /// Gives host `index`'s `eth0` another MAC address (e.g. to let a test host spoof a member).
    pub fn set_host_mac(&mut self, index: usize, mac: [u8; 6]) -> Result<()> {
        let (hosts, prefix) = (self.hosts.len(), self.prefix.clone());
        let host = self.hosts.get_mut(index).ok_or(TestbedError::NoSuchHost {
            index,
            hosts,
            prefix,
        })?;
        run_tool(
            "ip",
            &[
                "-n",
                &host.netns,
                "link",
                "set",
                "eth0",
                "address",
                &format_mac(&mac),
            ],
            None,
        )?;
        host.mac = mac;
        Ok(())
    }

    /// Turns MAC learning on the bridge port of host `index` on or off. Off models a switch
    /// port with port security (static MAC entries): frames a host sends with another host's
    /// source MAC no longer divert that host's unicast traffic to it.
    pub fn set_learning(&self, index: usize, on: bool) -> Result<()> {
        if index >= self.hosts.len() {
            return Err(TestbedError::NoSuchHost {
                index,
                hosts: self.hosts.len(),
                prefix: self.prefix.clone(),
            });
        }
        let port = bridge_port_name(index);
        run_tool(
            "ip",
            &[
                "-n",
                &self.switch_netns,
                "link",
                "set",
                "dev",
                &port,
                "type",
                "bridge_slave",
                "learning",
                if on { "on" } else { "off" },
            ],
            None,
        )?;
        Ok(())
    }

    /// Starts (`on`) or stops dropping ethbcast frames sent to a group address
    /// (the broadcast address or a group's multicast address: the I/G bit of
    /// the destination) on their way to host `host_index` (out of its bridge
    /// port). Unicast to that host and its own sending are unaffected.
    pub fn drop_broadcast_to(&mut self, host_index: usize, on: bool) -> Result<()> {
        if host_index >= self.hosts.len() {
            return Err(TestbedError::NoSuchHost {
                index: host_index,
                hosts: self.hosts.len(),
                prefix: self.prefix.clone(),
            });
        }
        let changed = if on {
            self.isolated.insert(host_index)
        } else {
            self.isolated.remove(&host_index)
        };
        if !changed && (self.nft_used || !on) {
            return Ok(());
        }
        if let Err(e) = self.apply_nft() {
            if on {
                self.isolated.remove(&host_index);
            } else {
                self.isolated.insert(host_index);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Hosts whose broadcast frames are currently dropped.
    pub fn broadcast_dropped_hosts(&self) -> Vec<usize> {
        self.isolated.iter().copied().collect()
    }

    /// Number of frames dropped by random loss so far (0 if loss was never set).
    pub fn loss_counter(&self) -> Result<u64> {
        Ok(self.drop_counters()?.loss)
    }

    /// Both drop counters (random loss, broadcast isolation).
    pub fn drop_counters(&self) -> Result<DropCounters> {
        if !self.nft_used {
            return Ok(DropCounters::default());
        }
        read_counters(&self.switch_netns)?.ok_or_else(|| TestbedError::BadOutput {
            tool: "nft",
            reason: format!(
                "table bridge {NFT_TABLE} vanished from namespace {}",
                self.switch_netns
            ),
        })
    }

    /// The ports whose queue dropped frames (their tbf was full), read with `tc -s`; empty
    /// without a rate limit (no queue of ours then) or when none dropped.
    pub fn port_drops(&self) -> Result<Vec<PortDrops>> {
        if self.rate.is_none() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for h in &self.hosts {
            let json = run_tool("tc", &["-n", &h.netns, "-s", "-j", "qdisc", "show"], None)?;
            for (dev, drops) in parse_qdisc_drops(&json)? {
                if dev.as_deref().is_none_or(|d| d == HOST_IFACE) && drops > 0 {
                    out.push(PortDrops {
                        host: h.index,
                        port: format!("h{} {HOST_IFACE}", h.index),
                        drops,
                    });
                }
            }
        }
        let json = run_tool(
            "tc",
            &["-n", &self.switch_netns, "-s", "-j", "qdisc", "show"],
            None,
        )?;
        for (dev, drops) in parse_qdisc_drops(&json)? {
            let host = dev
                .as_deref()
                .and_then(|d| d.strip_prefix('p'))
                .and_then(|i| i.parse::<usize>().ok());
            if let (Some(host), true) = (host, drops > 0) {
                out.push(PortDrops {
                    host,
                    port: format!("sw p{host}"),
                    drops,
                });
            }
        }
        Ok(out)
    }

    /// Rewrites the rules of our nft table in one transaction (the table,
    /// chains and named counters are created if missing; counters survive).
    fn apply_nft(&mut self) -> Result<()> {
        let t = NFT_TABLE;
        let mut s = format!(
            "add table bridge {t}\n\
             add counter bridge {t} loss_drops\n\
             add counter bridge {t} isolate_drops\n\
             add chain bridge {t} isolate_fwd {{ type filter hook forward priority -1; policy accept; }}\n\
             add chain bridge {t} loss_fwd {{ type filter hook forward priority 0; policy accept; }}\n\
             flush chain bridge {t} isolate_fwd\n\
             flush chain bridge {t} loss_fwd\n"
        );
        for &i in &self.isolated {
            s.push_str(&format!(
                "add rule bridge {t} isolate_fwd oifname \"{}\" ether daddr & 01:00:00:00:00:00 == 01:00:00:00:00:00 ether type {ETHERTYPE:#06x} counter name \"isolate_drops\" drop\n",
                bridge_port_name(i)
            ));
        }
        s.push_str(&loss_rule(self.loss_pct));
        run_tool_in(&self.switch_netns, "nft", &["-f", "-"], Some(&s))?;
        self.nft_used = true;
        Ok(())
    }

    /// Tears the test-bed down now, reporting errors (drop does it silently).
    pub fn down(mut self) -> Result<()> {
        self.armed = false;
        Self::down_prefix(&self.prefix).map(|_| ())
    }

    /// Leaves the test-bed running after this value is gone (for the CLI);
    /// remove it later with [`Testbed::down_prefix`].
    pub fn keep(mut self) {
        self.armed = false;
    }

    /// Removes every namespace of the test-bed `prefix` (`{prefix}-sw`,
    /// `{prefix}-h<N>`), which removes all its interfaces, qdiscs and nft
    /// rules. Idempotent; returns how many namespaces were removed.
    pub fn down_prefix(prefix: &str) -> Result<usize> {
        validate_prefix(prefix)?;
        let (switch, hosts) = list_namespaces(prefix)?;
        let names: Vec<String> = switch.into_iter().chain(hosts).collect();
        if names.is_empty() {
            return Ok(0);
        }
        end_processes_in(&names);
        let script: String = names.iter().map(|n| format!("netns del {n}\n")).collect();
        run_tool("ip", &["-force", "-batch", "-"], Some(&script))?;
        Ok(names.len())
    }

    /// Ends (SIGKILL) every process still running in one of the hosts' namespaces, for
    /// after a job that was killed at its timeout: a launcher's ranks start sessions of
    /// their own and outlive it. Only the test-bed starts processes there. Returns how many.
    pub fn end_processes(&self) -> usize {
        let names: Vec<String> = self.hosts.iter().map(|h| h.netns.clone()).collect();
        end_processes_in(&names)
    }

    /// What exists for `prefix`: namespaces and, if the nft table exists, counters.
    pub fn status(prefix: &str) -> Result<TestbedStatus> {
        validate_prefix(prefix)?;
        let (switch, hosts) = list_namespaces(prefix)?;
        let drops = match &switch {
            Some(sw) if find_tool("nft").is_some() => read_counters(sw)?,
            _ => None,
        };
        Ok(TestbedStatus {
            prefix: prefix.to_owned(),
            switch,
            hosts,
            drops,
        })
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        if let Err(e) = Self::down_prefix(&self.prefix) {
            tracing::warn!(prefix = %self.prefix, error = %e, "test-bed teardown failed; run `ethbcast-testbed down --prefix {}`", self.prefix);
            eprintln!(
                "warning: test-bed {:?} teardown failed: {e}; run `ethbcast-testbed down --prefix {}`",
                self.prefix, self.prefix
            );
        }
    }
}

/// The nft rule (a line of an `nft -f` script) for `pct` % random loss;
/// empty for 0. numgen values are 0..=9999, so 100 % is an unconditional drop.
fn loss_rule(pct: f64) -> String {
    let t = NFT_TABLE;
    let threshold = (pct * 100.0).round() as u32;
    let matcher = match threshold {
        0 => return String::new(),
        1..=9999 => format!(" numgen random mod 10000 < {threshold}"),
        _ => String::new(),
    };
    format!(
        "add rule bridge {t} loss_fwd ether type {ETHERTYPE:#06x}{matcher} counter name \"loss_drops\" drop\n"
    )
}

/// The tc line of a port's tbf: `rate`, a bucket of [`Rate::tbf_burst_bytes_for`] and a
/// queue of `queue` bytes (at least the bucket, as tbf requires).
fn tbf_line(dev: &str, rate: Rate, max_frame: u64, queue: u64) -> String {
    let burst = rate.tbf_burst_bytes_for(max_frame);
    format!(
        "qdisc replace dev {dev} root tbf rate {}bit burst {burst} limit {}\n",
        rate.bits_per_sec(),
        queue.max(burst)
    )
}

/// Namespaces of `prefix` present in /run/netns: (switch, hosts sorted by index).
fn list_namespaces(prefix: &str) -> Result<(Option<String>, Vec<String>)> {
    let dir = match std::fs::read_dir(netns::NETNS_RUN_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((None, Vec::new())),
        Err(e) => return Err(io_err(format!("cannot list {}", netns::NETNS_RUN_DIR), e)),
    };
    let sw = switch_netns_name(prefix);
    let host_prefix = format!("{prefix}-h");
    let mut switch = None;
    let mut hosts: Vec<(usize, String)> = Vec::new();
    for entry in dir {
        let entry =
            entry.map_err(|e| io_err(format!("cannot list {}", netns::NETNS_RUN_DIR), e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name == sw {
            switch = Some(name);
        } else if let Some(idx) = name.strip_prefix(&host_prefix) {
            let digits_only = !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit());
            if let (true, Ok(i)) = (digits_only, idx.parse::<usize>()) {
                hosts.push((i, name));
            }
        }
    }
    hosts.sort();
    Ok((switch, hosts.into_iter().map(|(_, n)| n).collect()))
}

/// Disables IPv6 (all + default) in each namespace by writing the sysctls from
/// a thread that moved into it (no process per namespace).
fn disable_ipv6(namespaces: Vec<String>) -> Result<()> {
    let worker = std::thread::spawn(move || -> Result<()> {
        for ns in &namespaces {
            netns::enter(ns).map_err(|e| io_err(format!("cannot enter namespace {ns}"), e))?;
            for conf in ["all", "default"] {
                let path = format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6");
                match std::fs::write(&path, "1") {
                    Ok(()) => {}
                    // Kernel without IPv6: nothing to disable.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                        return Err(TestbedError::PermissionDenied {
                            detail: format!("writing {path} in {ns}"),
                        })
                    }
                    Err(e) => return Err(io_err(format!("writing {path} in {ns}"), e)),
                }
            }
        }
        Ok(())
    });
    worker.join().unwrap_or_else(|_| {
        Err(TestbedError::Io {
            context: "disabling IPv6".into(),
            source: io::Error::other("worker thread panicked"),
        })
    })
}

/// Reads the drop counters of our table in `switch_ns`; `None` if no table.
fn read_counters(switch_ns: &str) -> Result<Option<DropCounters>> {
    let out = match run_tool_in(
        switch_ns,
        "nft",
        &["-j", "list", "counters", "table", "bridge", NFT_TABLE],
        None,
    ) {
        Ok(out) => out,
        Err(TestbedError::CommandFailed { stderr, .. })
            if stderr.contains("No such file or directory") =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    parse_counters(&out).map(Some)
}

/// (device, drops) of every tbf in `tc -s -j qdisc show`'s output.
fn parse_qdisc_drops(json: &str) -> Result<Vec<(Option<String>, u64)>> {
    let bad = |reason: String| TestbedError::BadOutput { tool: "tc", reason };
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let items = v
        .as_array()
        .ok_or_else(|| bad("not a JSON array of qdiscs".into()))?;
    Ok(items
        .iter()
        .filter(|q| q.get("kind").and_then(|k| k.as_str()) == Some("tbf"))
        .map(|q| {
            let dev = q.get("dev").and_then(|d| d.as_str()).map(str::to_owned);
            (dev, q.get("drops").and_then(|d| d.as_u64()).unwrap_or(0))
        })
        .collect())
}

fn parse_counters(json: &str) -> Result<DropCounters> {
    let bad = |reason: String| TestbedError::BadOutput {
        tool: "nft",
        reason,
    };
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let items = v
        .get("nftables")
        .and_then(|n| n.as_array())
        .ok_or_else(|| bad("no \"nftables\" array".into()))?;
    let mut c = DropCounters::default();
    for item in items {
        let Some(counter) = item.get("counter") else {
            continue;
        };
        let packets = counter.get("packets").and_then(|p| p.as_u64()).unwrap_or(0);
        match counter.get("name").and_then(|n| n.as_str()) {
            Some("loss_drops") => c.loss = packets,
            Some("isolate_drops") => c.isolated = packets,
            _ => {}
        }
    }
    Ok(c)
}

/// For tests: whether a test-bed can be built here. If not, panics when
/// `ETHBCAST_REQUIRE_NETNS=1` (CI must not skip silently), otherwise prints a loud
/// "SKIPPED: test: reason" line straight to stderr (libtest would capture `eprintln!`) and
/// returns false.
pub fn netns_available(test: &str, need_nft: bool) -> bool {
    use std::io::Write;
    let mut problem = can_create_netns().err().map(|e| e.to_string());
    if problem.is_none() && need_nft && find_tool("nft").is_none() {
        problem = Some("nft not found: apt-get install nftables".into());
    }
    match problem {
        None => true,
        Some(reason) => {
            if std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() == Ok("1") {
                panic!(
                    "{test}: network namespaces required (ETHBCAST_REQUIRE_NETNS=1) but: {reason}"
                );
            }
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: {reason} (set ETHBCAST_REQUIRE_NETNS=1 to make this a failure)"
            );
            false
        }
    }
}

/// Checks that this process may build a test-bed: `ip` is installed and the
/// effective capabilities include CAP_NET_ADMIN and CAP_SYS_ADMIN (root has both).
/// Tests call this to fail or skip with the reason.
pub fn can_create_netns() -> Result<()> {
    require_tool("ip", "iproute2")?;
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| io_err("cannot read /proc/self/status".into(), e))?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(|| TestbedError::BadOutput {
            tool: "/proc/self/status",
            reason: "no CapEff line".into(),
        })?;
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let missing: Vec<&str> = [
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ]
    .iter()
    .filter(|(bit, _)| cap_eff & (1u64 << bit) == 0)
    .map(|(_, name)| *name)
    .collect();
    if !missing.is_empty() {
        return Err(TestbedError::PermissionDenied {
            detail: format!("missing {}", missing.join(" and ")),
        });
    }
    Ok(())
}

/// Looks `tool` up in PATH (plus /usr/sbin and /sbin, where Debian keeps
/// iproute2 and nft but a non-login PATH may not include them).
pub fn find_tool(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn require_tool(tool: &'static str, package: &'static str) -> Result<()> {
    match find_tool(tool) {
        Some(_) => Ok(()),
        None => Err(TestbedError::ToolMissing { tool, package }),
    }
}

fn io_err(context: String, source: io::Error) -> TestbedError {
    TestbedError::Io { context, source }
}

fn package_of(tool: &str) -> &'static str {
    match tool {
        "nft" => "nftables",
        _ => "iproute2",
    }
}

fn tool_static(tool: &str) -> &'static str {
    match tool {
        "ip" => "ip",
        "tc" => "tc",
        "nft" => "nft",
        _ => "tool",
    }
}

/// A started child with its command line, for error messages.
struct Running {
    child: Child,
    command: String,
}

impl Running {
    fn wait(self) -> Result<String> {
        let out = self
            .child
            .wait_with_output()
            .map_err(|e| io_err(format!("waiting for `{}`", self.command), e))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if !out.status.success() {
            if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
                return Err(TestbedError::PermissionDenied {
                    detail: format!("`{}`: {stderr}", self.command),
                });
            }
            return Err(TestbedError::CommandFailed {
                command: self.command,
                status: out.status.to_string(),
                stderr,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn spawn_tool(program: &str, args: &[&str], stdin: Option<&str>) -> Result<Running> {
    let command = format!("{program} {}", args.join(" "));
    let path = find_tool(program).ok_or(TestbedError::ToolMissing {
        tool: tool_static(program),
        package: package_of(program),
    })?;
    let mut child = Command::new(path)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TestbedError::ToolMissing {
                tool: tool_static(program),
                package: package_of(program),
            },
            _ => io_err(format!("cannot start `{command}`"), e),
        })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Batch scripts are a few KiB, well below the pipe buffer, so writing
        // before reading the output cannot dead-lock; the pipe closes on drop.
        if let Err(e) = pipe.write_all(input.as_bytes()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io_err(format!("writing the input of `{command}`"), e));
        }
    }
    Ok(Running { child, command })
}

/// SIGKILLs every process in the namespaces `names` (a deleted namespace lives on while a
/// process is in it); returns how many there were. Best effort: a namespace whose processes
/// cannot be listed (gone meanwhile) is passed over, so that removing the test-bed goes on.
fn end_processes_in(names: &[String]) -> usize {
    let mut ended = 0;
    for name in names {
        let Ok(pids) = run_tool("ip", &["netns", "pids", name], None) else {
            continue;
        };
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let pid = nix::unistd::Pid::from_raw(pid);
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                ended += 1;
            }
        }
    }
    ended
}

fn run_tool(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let out = spawn_tool(program, args, stdin)?.wait();
    if let (Err(e), Some(script)) = (&out, stdin) {
        tracing::debug!(error = %e, script, "batch failed");
    }
    out
}

/// Runs a tool inside `netns` by spawning it from a thread that entered the
/// namespace (cheaper than `ip netns exec`, and works for tools without a
/// namespace option such as nft).
fn run_tool_in(
    netns_name: &str,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String> {
    let program = program.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.map(str::to_owned);
    netns::run_in(netns_name, move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_tool(&program, &args, stdin.as_deref())
    })
    .map_err(|e| io_err(format!("cannot enter namespace {netns_name}"), e))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        for (s, bits) in [
            ("100mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("10mbit", 10_000_000),
            ("500kbit", 500_000),
            ("2.5gbit", 2_500_000_000),
            (" 1GBit ", 1_000_000_000),
        ] {
            let r: Rate = s.parse().unwrap();
            assert_eq!(r.bits_per_sec(), bits, "{s}");
        }
        assert_eq!("1gbit".parse::<Rate>().unwrap().to_string(), "1gbit");
        assert_eq!("100mbit".parse::<Rate>().unwrap().to_string(), "100mbit");
        assert_eq!("2.5gbit".parse::<Rate>().unwrap().to_string(), "2500mbit");
        for bad in [
            "",
            "mbit",
            "100",
            "100mb",
            "100mbps",
            "-1mbit",
            "1e3mbit",
            "1.2.3mbit",
            "1bit",
            "1000tbit",
            "nan",
        ] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(matches!(e, TestbedError::InvalidRate { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn qdisc_drops_parse_from_tc_json() {
        let json = r#"[{"kind":"noqueue","handle":"0:","dev":"lo","drops":0},{"kind":"tbf","handle":"8021:","dev":"p0","root":true,"options":{"rate":12500000},"bytes":9,"packets":1,"drops":12,"backlog":0},{"kind":"tbf","dev":"p1","drops":0}]"#;
        assert_eq!(
            parse_qdisc_drops(json).unwrap(),
            vec![(Some("p0".into()), 12), (Some("p1".into()), 0)]
        );
        assert!(parse_qdisc_drops("{}").is_err());
        assert!(parse_qdisc_drops("not json").is_err());
    }

    #[test]
    fn port_queues_hold_a_message_and_outlast_a_send_buffer() {
        // 64 KiB in full frames, the largest message the benchmarks send.
        let message = 65_536u64.div_ceil(1500) * MAX_FRAME;
        for r in ["10mbit", "100mbit", "1gbit", "10gbit"] {
            let r: Rate = r.parse().unwrap();
            assert!(r.switch_queue_bytes() >= 2 * message, "{r}");
            // Never below the time-based queue of a fast port.
            assert!(r.switch_queue_bytes() >= r.bytes_per_sec() / 200, "{r}");
        }
    }

    #[test]
    fn tbf_burst_fits_both_speeds() {
        let r100: Rate = "100mbit".parse().unwrap();
        let r1g: Rate = "1gbit".parse().unwrap();
        let r1m: Rate = "1mbit".parse().unwrap();
        // A port passes no more than a couple of frames at once: a 16 KiB message (11
        // frames) takes its time on the wire at either speed.
        assert_eq!(r100.tbf_burst_bytes(), 2 * MAX_FRAME);
        assert_eq!(r1g.tbf_burst_bytes(), 6_250);
        assert!(r1g.tbf_burst_bytes() < 16_384 / 2);
        assert_eq!(r1m.tbf_burst_bytes(), 2 * MAX_FRAME);
        assert!(tbf_line("eth0", r1g, MAX_FRAME, 300_000)
            .contains("rate 1000000000bit burst 6250 limit 300000"));
        // A jumbo frame fits the bucket of a slow port.
        assert_eq!(r1m.tbf_burst_bytes_for(9014), 2 * 9014);
    }

    #[test]
    fn config_validation() {
        assert!(TestbedConfig::new(3).validate().is_ok());
        assert!(TestbedConfig::new(64).validate().is_ok());
        assert!(TestbedConfig::new(2).mtu(9000).validate().is_ok());
        for bad in [
            TestbedConfig::new(0),
            TestbedConfig::new(65),
            TestbedConfig::new(2).loss_pct(-1.0),
            TestbedConfig::new(2).loss_pct(100.5),
            TestbedConfig::new(2).loss_pct(f64::NAN),
            TestbedConfig::new(2).prefix(""),
            TestbedConfig::new(2).prefix("Ebc"),
            TestbedConfig::new(2).prefix("e b"),
            TestbedConfig::new(2).prefix("e/b"),
            TestbedConfig::new(2).prefix("1ebc"),
            TestbedConfig::new(2).prefix("ebc-"),
            TestbedConfig::new(2).prefix("abcdefghijk"),
            TestbedConfig::new(2).mtu(575),
            TestbedConfig::new(2).mtu(65536),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(matches!(e, TestbedError::InvalidConfig(_)), "{bad:?}: {e}");
        }
        assert!(validate_prefix("ebc-t1").is_ok());
        assert!(validate_prefix("abcdefghij").is_ok());
    }

    #[test]
    fn names_and_macs() {
        assert_eq!(switch_netns_name("ebc"), "ebc-sw");
        assert_eq!(host_netns_name("ebc", 7), "ebc-h7");
        let m0 = host_mac("ebc", 0);
        let m1 = host_mac("ebc", 1);
        assert_ne!(m0, m1);
        assert_eq!(m0, host_mac("ebc", 0));
        assert_eq!(m0[0] & 0x03, 0x02, "locally administered unicast");
        assert_eq!(
            format_mac(&[2, 0xeb, 0, 0xab, 0xcd, 0x3f]),
            "02:eb:00:ab:cd:3f"
        );
        // Longest names stay short.
        assert!(host_netns_name("abcdefghij", MAX_HOSTS - 1).len() <= 15);
    }

    #[test]
    fn loss_rules() {
        assert_eq!(loss_rule(0.0), "");
        assert_eq!(loss_rule(0.001), "");
        assert!(loss_rule(2.5).contains("ether type 0x88b5 numgen random mod 10000 < 250 counter"));
        assert!(loss_rule(0.01).contains("< 1 counter"));
        assert!(loss_rule(99.99).contains("< 9999 counter"));
        let all = loss_rule(100.0);
        assert!(all.contains("ether type 0x88b5 counter name") && !all.contains("numgen"));
    }

    #[test]
    fn counters_parse() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"counter": {"family": "bridge", "name": "loss_drops", "table": "ethbcast", "handle": 3, "packets": 42, "bytes": 100}}, {"counter": {"family": "bridge", "name": "isolate_drops", "table": "ethbcast", "handle": 4, "packets": 7, "bytes": 0}}]}"#;
        assert_eq!(
            parse_counters(json).unwrap(),
            DropCounters {
                loss: 42,
                isolated: 7
            }
        );
        assert!(parse_counters("nope").is_err());
        assert!(parse_counters("{}").is_err());
    }

    #[test]
    fn error_messages_are_actionable() {
        let e = TestbedError::ToolMissing {
            tool: "ip",
            package: "iproute2",
        };
        assert_eq!(e.to_string(), "ip not found: apt-get install iproute2");
        let e = TestbedError::PermissionDenied {
            detail: String::new(),
        };
        assert_eq!(
            e.to_string(),
            "permission denied: run as root (CAP_NET_ADMIN/CAP_SYS_ADMIN needed)"
        );
    }
}
