//! Forming a group: the membership sources a program names (a launcher's environment, a
//! hostfile) and the join run over a link with the wall clock until the group is formed, the
//! time is up (saying what was missing) or the caller stops it.

use std::time::Duration;

use crate::driver::{Clock, Driver, Sends, WallClock};
use crate::link::{self, Link, MacAddr};
use crate::Rank;
use ethbcast_proto::{Join, JoinConfig, Joined};

use super::GroupError;

/// How long one turn of the join may wait before it checks its stop flag and settle time.
const SLICE: Duration = Duration::from_millis(50);

/// Rank and size from the launcher's environment (first match wins).
pub fn rank_size_from_env(get: impl Fn(&str) -> Option<String>) -> Option<(Rank, u16)> {
    const PAIRS: [(&str, &str); 5] = [
        ("ETHBCAST_RANK", "ETHBCAST_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"),
        ("SLURM_PROCID", "SLURM_NTASKS"),
    ];
    PAIRS.iter().find_map(|(r, s)| {
        let rank: Rank = get(r)?.trim().parse().ok()?;
        let size: u16 = get(s)?.trim().parse().ok()?;
        (rank.get() < size).then_some((rank, size))
    })
}

/// One host of a hostfile: its MAC and, if the line gives one, its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// The host's name (the line's first word that is not its MAC), for reports.
    pub name: Option<String>,
    /// The host's MAC address.
    pub mac: MacAddr,
}

impl HostEntry {
    /// The name if there is one, else the MAC.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.mac.to_string())
    }
}

/// Parses a hostfile: one MAC per line, optionally with a host name (`node17
/// 02:00:00:00:00:11`); `#` starts a comment.
pub fn parse_hostfile(text: &str) -> Result<Vec<HostEntry>, GroupError> {
    let mut hosts: Vec<HostEntry> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mac = line
            .split_whitespace()
            .find_map(link::parse_mac)
            .ok_or_else(|| {
                GroupError::Membership(format!(
                    "hostfile line {}: no MAC address in {line:?}",
                    i + 1
                ))
            })?;
        if hosts.iter().any(|h| h.mac == mac) {
            return Err(GroupError::Membership(format!(
                "hostfile line {}: {} listed twice",
                i + 1,
                mac
            )));
        }
        let name = line
            .split_whitespace()
            .find(|w| link::parse_mac(w).is_none())
            .map(str::to_owned);
        hosts.push(HostEntry { name, mac });
    }
    if hosts.is_empty() {
        return Err(GroupError::Membership("hostfile lists no members".into()));
    }
    Ok(hosts)
}

/// Runs the join `cfg` over `link` with the wall clock until the group is formed, `timeout`
/// passes ([`GroupError::JoinTimeout`], saying what was missing) or `stop` returns true
/// ([`GroupError::Interrupted`]; asked every 50 ms). Returns the join and the link. The
/// join's nonce comes from the operating system's random source.
pub fn join<L: Link>(
    link: L,
    cfg: JoinConfig,
    timeout: Duration,
    stop: impl FnMut() -> bool,
) -> Result<(Joined, L), GroupError> {
    join_settling(link, cfg, timeout, None, stop, |_| {})
}

/// When a first-come coordinator starts without every receiver it asked for: once `after`
/// has passed since the join began and at least `min` receivers have joined
/// ([`Join::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// Receivers that must have joined.
    pub min: usize,
    /// How long to wait for the others.
    pub after: Duration,
}

/// What a join that has not completed knows so far, handed to the watcher of
/// [`Stream::join_watching`](crate::Stream::join_watching) while the join runs and used in its timeout message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinSeen {
    /// Members heard from whom a coordinator accepted so far (this one not included).
    pub heard: Vec<MacAddr>,
    /// A coordinator's roster once decided: how many of its members confirmed it (this one
    /// included), of how many.
    pub confirmed: Option<(usize, usize)>,
    /// Hosts whose join frames failed authentication under this member's key (a host with
    /// another key, as a rule), with how many frames each.
    pub unauthenticated: Vec<(MacAddr, u64)>,
    /// Coordinators heard challenging on this group: on a coordinator, other coordinators
    /// (a second sender); on a member, every sender that invited it.
    pub coordinators: Vec<MacAddr>,
    /// Hosts that sent frames as rank 0 of another session (a transfer already running here).
    pub others: Vec<MacAddr>,
    /// Hosts that answered and are not expected (a hostfile that misses them).
    pub strangers: Vec<MacAddr>,
    /// Hosts that sent frames of another version of the wire format (another release of
    /// ethbcast), with the version: their frames are refused.
    pub other_versions: Vec<(MacAddr, u8)>,
}

impl JoinSeen {
    fn of(j: &ethbcast_proto::Join) -> JoinSeen {
        let o = j.overheard();
        let heard = j.heard();
        // A member that answered sends frames of its own session too once it joined one.
        let others = o.others().into_iter().filter(|m| !heard.contains(m));
        JoinSeen {
            others: others.collect(),
            heard,
            confirmed: j.confirmed(),
            unauthenticated: o.unauthenticated(),
            coordinators: o.coordinators(),
            strangers: j.strangers(),
            other_versions: o.other_versions(),
        }
    }

    /// What a join timeout says of it beside the counts: hosts of another release, who failed
    /// authentication, other coordinators, other sessions, strangers.
    pub fn explain(&self, coordinating: bool) -> String {
        let list = |v: &[MacAddr]| {
            v.iter()
                .map(MacAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts: Vec<String> = self
            .other_versions
            .iter()
            .map(|(m, v)| {
                format!(
                    "{m} speaks wire version {v} and this build version {}: its frames are refused (run one release of ethbcast on every host)",
                    ethbcast_proto::VERSION
                )
            })
            .collect();
        if !self.unauthenticated.is_empty() {
            let who: Vec<String> = self
                .unauthenticated
                .iter()
                .map(|(m, n)| format!("{n} from {m}"))
                .collect();
            parts.push(format!(
                "join frames failed authentication with this host's key ({}): the likely cause is a different key on that host",
                who.join(", ")
            ));
        }
        let rivals: Vec<MacAddr> = match coordinating {
            true => self.coordinators.clone(),
            false => Vec::new(),
        };
        if !rivals.is_empty() {
            parts.push(format!(
                "another coordinator is forming a group with this id on this segment: {}",
                list(&rivals)
            ));
        }
        let others: Vec<MacAddr> = self
            .others
            .iter()
            .filter(|m| !rivals.contains(m))
            .copied()
            .collect();
        if !others.is_empty() {
            parts.push(format!(
                "frames of another session came from {}",
                list(&others)
            ));
        }
        if !self.strangers.is_empty() {
            parts.push(format!("not in the membership: {}", list(&self.strangers)));
        }
        parts.join("; ")
    }
}

/// [`join`], where a first-come coordinator starts as `settle` says (`None`: only with every
/// receiver; the join times out after `timeout` whatever `settle` says), and `watch` is shown
/// what the join knows every slice.
pub(crate) fn join_settling<L: Link>(
    link: L,
    cfg: JoinConfig,
    timeout: Duration,
    settle: Option<Settle>,
    mut stop: impl FnMut() -> bool,
    mut watch: impl FnMut(&JoinSeen),
) -> Result<(Joined, L), GroupError> {
    use rand::RngCore;
    let start = WallClock.now();
    // A timeout past any real wait ("no limit") must not overflow the instant.
    let deadline = start
        .checked_add(timeout)
        .unwrap_or(start + Duration::from_secs(100 * 365 * 86_400));
    let nonce = rand::rngs::OsRng.next_u64();
    // The wall clock orders this host's joins: a member prefers a coordinator's newest
    // challenge, so recordings of earlier ones cannot displace it.
    let clock = WallClock.unix_micros();
    let mut driver = Driver::new(Join::new(cfg, start, nonce)?.with_clock(clock), link);
    loop {
        if stop() {
            return Err(GroupError::Interrupted);
        }
        if let Some(st) = settle {
            let now = WallClock.now();
            if now.saturating_duration_since(start) >= st.after {
                driver.member_mut().settle(now, st.min);
            }
        }
        let until = (WallClock.now() + SLICE).min(deadline);
        if let Some(r) =
            driver.run_until(&WallClock, until, SLICE, Sends::Now, Join::take_result)?
        {
            let joined = r?;
            return Ok((joined, driver.into_parts().1));
        }
        let j = driver.member();
        let seen = JoinSeen::of(j);
        watch(&seen);
        if WallClock.now() >= deadline {
            let (joined, expected) = j.progress();
            let coordinating = j.is_coordinator();
            let mut waiting = if coordinating {
                let heard: Vec<String> = seen.heard.iter().map(|m| m.to_string()).collect();
                match (heard.is_empty(), seen.confirmed) {
                    (true, _) => "heard from no other member".to_string(),
                    (false, Some((c, of))) => format!(
                        "heard from {}; {c} of {of} confirmed the roster",
                        heard.join(", ")
                    ),
                    (false, None) => format!("heard from {}", heard.join(", ")),
                }
            } else {
                "no roster from the group's coordinator".to_string()
            };
            let why = seen.explain(coordinating);
            if !why.is_empty() {
                waiting.push_str("; ");
                waiting.push_str(&why);
            }
            return Err(GroupError::JoinTimeout {
                joined,
                expected,
                timeout,
                waiting,
                seen: Box::new(seen),
            });
        }
    }
}
