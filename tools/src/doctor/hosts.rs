//! `ethbcast doctor --hostfile FILE`: checks across the hosts of a hostfile, answered by
//! `ethbcast doctor --listen` on each of them.
//!
//! The host that checks broadcasts probes from its link (the frames `send` and `recv` use:
//! EtherType 0x88B5, to the broadcast address and to the group's multicast address), every
//! 100 ms for `--probe-wait`: a small one to the broadcast address, a small one to the group's
//! address, and one as large as its MTU allows to the broadcast address. A listener answers
//! each probe it receives to the prober's MAC alone, with its own interface's MTU. From the
//! answers, per host of the hostfile, one line each:
//! - whether a broadcast reaches it (it answered at all);
//! - its MTU against this host's: a smaller one makes every transfer with it use frames of
//!   that size (the join takes the smallest MTU of the group), and a full-sized frame that does
//!   not reach a host whose MTU is large enough points at a link or switch port in between;
//! - whether the group's multicast address reaches it (a switch that drops or prunes
//!   multicast breaks transfers with the default `--group-address derived`).
//!
//! Probes and answers carry a magic and the prober's random nonce, nothing else: an answer is
//! taken only from a host of the hostfile and only for this run's nonce.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{open_link, Backend, HostEntry, Link, LinkError, MacAddr, WaitMode, BROADCAST_MAC};

use super::{Check, Status};

/// A probe's first bytes.
const PROBE: &[u8; 4] = b"EBDQ";
/// An answer's first bytes.
const ANSWER: &[u8; 4] = b"EBDA";
/// Bytes of a small probe (magic, kind, nonce), as sent: padded to the least an Ethernet
/// payload carries.
const SMALL: usize = 46;
/// How often the prober sends its probes again.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// What a probe tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A small frame to the broadcast address.
    Broadcast = 1,
    /// A small frame to the group's multicast address.
    Group = 2,
    /// A frame as large as the prober's MTU, to the broadcast address.
    Full = 3,
}

impl Kind {
    fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Broadcast),
            2 => Some(Kind::Group),
            3 => Some(Kind::Full),
            _ => None,
        }
    }
}

fn probe(kind: Kind, nonce: u64, len: usize) -> Vec<u8> {
    let mut v = PROBE.to_vec();
    v.push(kind as u8);
    v.extend_from_slice(&nonce.to_be_bytes());
    v.resize(len.max(SMALL), 0);
    v
}

fn parse_probe(pdu: &[u8]) -> Option<(Kind, u64)> {
    if pdu.len() < 13 || &pdu[..4] != PROBE {
        return None;
    }
    Some((
        Kind::from_code(pdu[4])?,
        u64::from_be_bytes(pdu[5..13].try_into().ok()?),
    ))
}

fn answer(kind: Kind, nonce: u64, mtu: u32) -> Vec<u8> {
    let mut v = ANSWER.to_vec();
    v.push(kind as u8);
    v.extend_from_slice(&nonce.to_be_bytes());
    v.extend_from_slice(&mtu.to_be_bytes());
    v.resize(SMALL, 0);
    v
}

fn parse_answer(pdu: &[u8]) -> Option<(Kind, u64, u32)> {
    if pdu.len() < 17 || &pdu[..4] != ANSWER {
        return None;
    }
    Some((
        Kind::from_code(pdu[4])?,
        u64::from_be_bytes(pdu[5..13].try_into().ok()?),
        u32::from_be_bytes(pdu[13..17].try_into().ok()?),
    ))
}

/// Opens `iface` for probing or answering, receiving the group address `group` too.
fn open(iface: &str, backend: Backend, group: MacAddr) -> Result<Box<dyn Link + Send>, LinkError> {
    let mut l = open_link(backend, iface, WaitMode::Block)?;
    if group != BROADCAST_MAC {
        match l.join_group(group) {
            Err(LinkError::GroupsUnsupported { backend }) => {
                tracing::warn!(
                    backend,
                    "multicast group not joined: its probes go unanswered"
                );
            }
            r => r?,
        }
    }
    Ok(l)
}

/// `ethbcast doctor --listen`: answers the probes of `ethbcast doctor --hostfile`.
pub struct Listener {
    link: Box<dyn Link + Send>,
}

impl Listener {
    /// Opens `iface` (and joins the group address `group`).
    pub fn open(iface: &str, backend: Backend, group: MacAddr) -> Result<Listener, LinkError> {
        Ok(Listener {
            link: open(iface, backend, group)?,
        })
    }

    /// This end's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.link.local_mac()
    }

    /// Answers every probe until `stop` is set; returns how many it answered.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<u64, LinkError> {
        let mtu = u32::try_from(self.link.max_pdu()).unwrap_or(u32::MAX);
        let mut answered = 0u64;
        let mut due: Vec<(MacAddr, Kind, u64)> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            self.link
                .recv(Some(Duration::from_millis(100)), &mut |src, pdu| {
                    if let Some((kind, nonce)) = parse_probe(pdu) {
                        due.push((src, kind, nonce));
                    }
                })?;
            for (src, kind, nonce) in due.drain(..) {
                self.link.send(src, &answer(kind, nonce, mtu))?;
                answered += 1;
                tracing::debug!(%src, ?kind, "answered a probe");
            }
            self.link.flush()?;
        }
        Ok(answered)
    }
}

/// What one host answered.
#[derive(Debug, Clone, Copy, Default)]
struct Answers {
    broadcast: bool,
    group: bool,
    full: bool,
    mtu: Option<u32>,
}

/// Probes the hosts of `hosts` from `iface` for `wait` (less if all answered everything) and
/// says, per host, what reached it: one [`Check`] per line. `group` is the group's address
/// (`--group-id`, `--group-address`), which the listeners must have been given too.
pub fn check(
    iface: &str,
    backend: Backend,
    group: MacAddr,
    hosts: &[HostEntry],
    wait: Duration,
) -> Vec<Check> {
    let mut link = match open(iface, backend, group) {
        Ok(l) => l,
        Err(e) => {
            return vec![Check::problem(
                "hosts.open",
                Status::Fail,
                format!("cannot open {iface} to probe the hosts: {e}"),
                "see the checks above".into(),
            )]
        }
    };
    let me = link.local_mac();
    let local = link.max_pdu();
    let nonce: u64 = rand::random();
    let mut got = vec![Answers::default(); hosts.len()];
    let done = |got: &[Answers]| {
        got.iter().all(|a| {
            a.broadcast && a.group && (a.full || a.mtu.is_some_and(|m| (m as usize) < local))
        })
    };
    let start = Instant::now();
    let mut sent_at: Option<Instant> = None;
    let mut failed_send: Option<LinkError> = None;
    while start.elapsed() < wait && !done(&got) {
        if sent_at.is_none_or(|t| t.elapsed() >= PROBE_EVERY) {
            for (dst, kind, len) in [
                (BROADCAST_MAC, Kind::Broadcast, SMALL),
                (group, Kind::Group, SMALL),
                (BROADCAST_MAC, Kind::Full, local),
            ] {
                if let Err(e) = link.send(dst, &probe(kind, nonce, len)) {
                    failed_send.get_or_insert(e);
                }
            }
            let _ = link.flush();
            sent_at = Some(Instant::now());
        }
        let r = link.recv(Some(Duration::from_millis(20)), &mut |src, pdu| {
            let Some((kind, n, mtu)) = parse_answer(pdu) else {
                return;
            };
            let Some(i) = hosts.iter().position(|h| h.mac == src) else {
                return;
            };
            if n != nonce || src == me {
                return;
            }
            let a = &mut got[i];
            a.mtu = Some(mtu);
            match kind {
                Kind::Broadcast => a.broadcast = true,
                Kind::Group => a.group = true,
                Kind::Full => a.full = true,
            }
        });
        if let Err(e) = r {
            return vec![Check::problem(
                "hosts.receive",
                Status::Fail,
                format!("receiving on {iface}: {e}"),
                "see the checks above".into(),
            )];
        }
    }
    let mut checks = Vec::new();
    if let Some(e) = failed_send {
        checks.push(Check::problem(
            "hosts.send",
            Status::Fail,
            format!("cannot send probes on {iface}: {e}"),
            "see the checks above".into(),
        ));
    }
    for (h, a) in hosts.iter().zip(&got) {
        let on = h.name.clone().unwrap_or_else(|| h.mac.to_string());
        checks.extend(
            verdicts(iface, group, local, h, a, wait)
                .into_iter()
                .map(|c| c.on(on.clone())),
        );
    }
    checks
}

/// The line that says the hosts of a hostfile were not probed: a check of this host failed.
pub fn not_probed(hosts: usize) -> Check {
    Check::problem(
        "hosts.not_probed",
        Status::Fail,
        format!("the {hosts} host(s) of the hostfile were not probed: a check of this host failed"),
        "fix this host first (the lines above)".into(),
    )
}

/// The lines of one host, from what it answered.
fn verdicts(
    iface: &str,
    group: MacAddr,
    local: usize,
    h: &HostEntry,
    a: &Answers,
    wait: Duration,
) -> Vec<Check> {
    let who = match &h.name {
        Some(n) => format!("{n} ({})", h.mac),
        None => h.mac.to_string(),
    };
    let on = h.name.clone().unwrap_or_else(|| h.mac.to_string());
    let Some(mtu) = a.mtu else {
        return vec![Check::problem("host.broadcast", 
            Status::Fail,
            format!(
                "{who}: no answer to a broadcast within {:.1} s",
                wait.as_secs_f64()
            ),
            format!(
                "run `ethbcast doctor --listen --iface {iface}` on {on}: it checks that host first and names what is wrong there (an interface down: `ip link set {iface} up`; a missing capability: setcap); check that {on} is on this segment"
            ),
        )];
    };
    let mut checks = vec![Check::ok(
        "host.broadcast",
        format!("{who}: a broadcast reaches it"),
    )];
    let min = usize::from(ethbcast_proto::join::MIN_PDU);
    let m = mtu as usize;
    if m < min {
        checks.push(Check::problem(
            "host.mtu",
            Status::Fail,
            format!(
                "{who}: its interface has an MTU of {mtu} bytes, below the {min} a transfer needs"
            ),
            format!("ip link set {iface} mtu {local} on {on}"),
        ));
    } else if m < local {
        checks.push(Check::problem("host.mtu", 
            Status::Warn,
            format!(
                "{who}: its interface has an MTU of {mtu} bytes, this host's {local}: every transfer with {on} uses frames of {mtu} bytes"
            ),
            format!("ip link set {iface} mtu {local} on {on}"),
        ));
    } else if !a.full {
        checks.push(Check::problem("host.mtu", 
            Status::Fail,
            format!(
                "{who}: frames of {local} bytes do not reach it although its MTU is {mtu}: a link or switch port between has a smaller MTU"
            ),
            format!("raise the MTU of the switch ports between this host and {on} to {local}, or lower every host's (ip link set {iface} mtu N)"),
        ));
    } else {
        checks.push(Check::ok(
            "host.mtu",
            format!("{who}: MTU {mtu} bytes, frames of {local} bytes reach it"),
        ));
    }
    if a.group {
        checks.push(Check::ok(
            "host.group",
            format!("{who}: the group's address {group} reaches it"),
        ));
    } else {
        checks.push(Check::problem("host.group", 
            Status::Fail,
            format!("{who}: a broadcast reaches it but the group's multicast address {group} does not: the switch or its NIC drops that multicast"),
            format!("let the switch flood {group} (IGMP/MLD snooping off on its ports), or give every command --group-address broadcast"),
        ));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_answers_round_trip_and_nothing_else_parses() {
        for kind in [Kind::Broadcast, Kind::Group, Kind::Full] {
            let p = probe(kind, 77, 1500);
            assert_eq!(p.len(), 1500);
            assert_eq!(parse_probe(&p), Some((kind, 77)));
            assert_eq!(parse_answer(&p), None);
            let a = answer(kind, 77, 1200);
            assert_eq!(parse_answer(&a), Some((kind, 77, 1200)));
            assert_eq!(parse_probe(&a), None);
        }
        assert_eq!(parse_probe(&probe(Kind::Group, 1, 0)[..12]), None);
        let mut odd = probe(Kind::Group, 1, 0);
        odd[4] = 9;
        assert_eq!(parse_probe(&odd), None);
        assert_eq!(parse_answer(b"EBDA"), None);
    }

    fn host(name: &str) -> HostEntry {
        HostEntry {
            name: Some(name.into()),
            mac: MacAddr([2, 0, 0, 0, 0, 9]),
        }
    }

    fn lines(a: Answers) -> Vec<String> {
        let g = MacAddr([3, 0xeb, 0, 0, 0, 1]);
        verdicts("eth0", g, 1500, &host("node9"), &a, Duration::from_secs(2))
            .iter()
            .map(Check::render)
            .collect()
    }

    #[test]
    fn each_host_gets_a_line_per_check_naming_it_and_the_fix() {
        let all = Answers {
            broadcast: true,
            group: true,
            full: true,
            mtu: Some(1500),
        };
        let ok = lines(all);
        assert_eq!(ok.len(), 3, "{ok:?}");
        assert!(
            ok.iter()
                .all(|l| l.starts_with("ok") && l.contains("node9")),
            "{ok:?}"
        );
        let silent = lines(Answers::default());
        assert_eq!(silent.len(), 1);
        assert!(
            silent[0].starts_with("FAIL  node9 (02:00:00:00:00:09): no answer"),
            "{silent:?}"
        );
        assert!(silent[0].contains("ethbcast doctor --listen"), "{silent:?}");
        let small = lines(Answers {
            full: false,
            mtu: Some(1200),
            ..all
        });
        assert!(
            small[1].starts_with("WARN") && small[1].contains("MTU of 1200"),
            "{small:?}"
        );
        assert!(
            small[1].contains("ip link set eth0 mtu 1500 on node9"),
            "{small:?}"
        );
        let between = lines(Answers { full: false, ..all });
        assert!(
            between[1].starts_with("FAIL") && between[1].contains("between"),
            "{between:?}"
        );
        let no_group = lines(Answers {
            group: false,
            ..all
        });
        assert!(
            no_group[2].starts_with("FAIL") && no_group[2].contains("--group-address broadcast"),
            "{no_group:?}"
        );
    }
}
