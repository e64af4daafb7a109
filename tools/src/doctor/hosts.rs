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
//!   multicast breaks transfers with the default `--group-address derived`);
//! - with a key, whether it holds the same key.
//!
//! The frames are [`super::probe`]'s. An answer is taken only from a host of the hostfile and
//! only for this run's nonce. With a key (`--key-file`), probes and answers carry keyed tags:
//! a listener answers only probes whose tag verifies, and the prober takes only answers whose
//! tag does, so no host without the key can make a listener answer it or forge an answer (a
//! false "ok", a wrong MTU). Without a key any host of the segment can do both, and the
//! lines say the answers are not authenticated.
//!
//! A listener never answers a probe from a group address (multicast or broadcast: the answer
//! would reach every host) or from its own MAC, and answers each source at most
//! [`ANSWERS_PER_SOURCE`] times a second (a prober sends 30 probes a second): a host that
//! sends probes in a victim's name makes each listener send the victim at most that many small
//! frames. With a key, a probe whose tag fails (another key, or a forgery) gets at most one
//! answer per source a second and [`MISMATCHES_PER_SECOND`] in all, with no MTU: enough for
//! a prober with another key to learn that its key differs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::{
    open_link, Backend, HostEntry, Key, Link, LinkError, MacAddr, WaitMode, BROADCAST_MAC,
};

use super::probe::{is_group, Answer, Ends, Kind, Probe, ProbeKey, CHALLENGE_LEN, SMALL};
use super::{Check, Status};

/// How often the prober sends its probes again.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Answers a listener gives one source MAC in a second, at most.
pub const ANSWERS_PER_SOURCE: u32 = 40;

/// Answers a keyed listener gives, in a second and in all, to probes whose tag fails.
pub const MISMATCHES_PER_SECOND: u32 = 10;

/// Sources a listener keeps count of (beyond it, probes from new sources go unanswered until a
/// second has passed for the oldest).
const SOURCES: usize = 1024;

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
    answerer: Answerer,
}

/// What a listener answered and left unanswered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answered {
    /// Probes answered.
    pub answered: u64,
    /// Probes from a group address or from this host, dropped.
    pub group_sources: u64,
    /// Probes without a tag, or whose tag failed, that got no answer.
    pub unauthenticated: u64,
    /// Probes over a source's rate, or the mismatches' rate, dropped.
    pub limited: u64,
}

impl Listener {
    /// Opens `iface` (and joins the group address `group`); with `key`, answers keyed probes
    /// of that key only.
    pub fn open(
        iface: &str,
        backend: Backend,
        group: MacAddr,
        key: Option<&Key>,
    ) -> Result<Listener, LinkError> {
        Ok(Listener {
            link: open(iface, backend, group)?,
            answerer: Answerer {
                key: key.map(ProbeKey::new),
                limits: Limits::default(),
            },
        })
    }

    /// This end's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.link.local_mac()
    }

    /// Answers probes until `stop` is set; returns what it answered and dropped.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<Answered, LinkError> {
        let mtu = u32::try_from(self.link.max_pdu()).unwrap_or(u32::MAX);
        let me = self.link.local_mac();
        let mut n = Answered::default();
        let mut due: Vec<(MacAddr, Probe)> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            self.link
                .recv(Some(Duration::from_millis(100)), &mut |src, pdu| {
                    if let Some(p) = Probe::parse(pdu) {
                        due.push((src, p));
                    }
                })?;
            let now = Instant::now();
            for (src, p) in due.drain(..) {
                let Some(answer) = self.answerer.reply(&p, src, me, mtu, now, &mut n) else {
                    continue;
                };
                self.link.send(src, &answer)?;
                n.answered += 1;
                tracing::debug!(%src, kind = ?p.kind, "answered a probe");
            }
            self.link.flush()?;
        }
        Ok(n)
    }
}

/// What a listener answers, and to whom: the key it answers with and the answers it gave in
/// the last second.
struct Answerer {
    key: Option<ProbeKey>,
    limits: Limits,
}

impl Answerer {
    /// The answer of host `me` (MTU `mtu`) to probe `p` from `src`, if it gets one; counted
    /// in `n` if not.
    fn reply(
        &mut self,
        p: &Probe,
        src: MacAddr,
        me: MacAddr,
        mtu: u32,
        now: Instant,
        n: &mut Answered,
    ) -> Option<Vec<u8>> {
        if is_group(src) || src == me {
            n.group_sources += 1;
            return None;
        }
        let ends = Ends {
            listener: me,
            prober: src,
        };
        let mut answer = Answer {
            kind: p.kind,
            nonce: p.nonce,
            mtu,
            tag: None,
        };
        let Some(key) = &self.key else {
            if !self.limits.take(src, now, false) {
                n.limited += 1;
                return None;
            }
            return Some(answer.encode(None));
        };
        let Some((challenge, _)) = &p.keyed else {
            n.unauthenticated += 1;
            return None;
        };
        let genuine = p.verifies(key, src);
        if !genuine {
            n.unauthenticated += 1;
            answer.mtu = 0;
        }
        if !self.limits.take(src, now, !genuine) {
            n.limited += 1;
            return None;
        }
        Some(answer.encode(Some((key, challenge, ends))))
    }
}

/// A listener's answers of the last second, per source and (for probes whose tag failed) in
/// all.
#[derive(Debug, Default)]
struct Limits {
    /// Source, start of its second, answers in it, whether a mismatch was answered in it.
    sources: Vec<(MacAddr, Instant, u32, bool)>,
    /// Start of the mismatches' second, mismatches answered in it.
    mismatches: Option<(Instant, u32)>,
}

impl Limits {
    /// Whether an answer to `src` (a `mismatch` or not) may go now; counts it if so.
    fn take(&mut self, src: MacAddr, now: Instant, mismatch: bool) -> bool {
        let second = Duration::from_secs(1);
        self.sources
            .retain(|(_, since, _, _)| now.saturating_duration_since(*since) < second);
        let at = match self.sources.iter().position(|(m, ..)| *m == src) {
            Some(i) => i,
            None if self.sources.len() < SOURCES => {
                self.sources.push((src, now, 0, false));
                self.sources.len() - 1
            }
            None => return false,
        };
        let (_, _, count, mismatched) = &mut self.sources[at];
        if *count >= ANSWERS_PER_SOURCE || (mismatch && *mismatched) {
            return false;
        }
        if mismatch {
            let (since, all) = self.mismatches.get_or_insert((now, 0));
            if now.saturating_duration_since(*since) >= second {
                (*since, *all) = (now, 0);
            }
            if *all >= MISMATCHES_PER_SECOND {
                return false;
            }
            *all += 1;
            *mismatched = true;
        }
        *count += 1;
        true
    }
}

/// What a prober with a key learnt of a host's key from its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KeySeen {
    /// Answers without a tag: its listener has no key.
    None,
    /// Answers whose tag fails: another key, or a forgery.
    Other,
    /// Answers whose tag verifies: the same key.
    Same,
}

/// What one host answered (with a key, only what its verified answers say).
#[derive(Debug, Clone, Copy, Default)]
struct Answers {
    broadcast: bool,
    group: bool,
    full: bool,
    mtu: Option<u32>,
    /// With a key: the best of its answers.
    key: Option<KeySeen>,
}

impl Answers {
    /// Takes answer `a` from this host, as a prober with `key` (and `challenge`, between
    /// `ends`) sees it.
    fn take(
        &mut self,
        a: &Answer,
        key: Option<&ProbeKey>,
        challenge: &[u8; CHALLENGE_LEN],
        ends: Ends,
    ) {
        match key {
            None if a.tag.is_some() => return,
            None => {}
            Some(k) => {
                let seen = match a.tag {
                    None => KeySeen::None,
                    Some(_) if a.verifies(k, challenge, ends) => KeySeen::Same,
                    Some(_) => KeySeen::Other,
                };
                self.key = self.key.max(Some(seen));
                if seen != KeySeen::Same {
                    return;
                }
            }
        }
        self.mtu = Some(a.mtu);
        match a.kind {
            Kind::Broadcast => self.broadcast = true,
            Kind::Group => self.group = true,
            Kind::Full => self.full = true,
        }
    }
}

/// Probes the hosts of `hosts` from `iface` for `wait` (less if all answered everything) and
/// says, per host, what reached it: one [`Check`] per line. `group` is the group's address
/// (`--group-id`, `--group-address`), which the listeners must have been given too. With
/// `key`, probes are keyed and only answers whose tag verifies count.
pub fn check(
    iface: &str,
    backend: Backend,
    group: MacAddr,
    hosts: &[HostEntry],
    wait: Duration,
    key: Option<&Key>,
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
    let challenge: [u8; CHALLENGE_LEN] = rand::random();
    let key = key.map(ProbeKey::new);
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
                let keyed = key.as_ref().map(|k| (k, &challenge, me));
                if let Err(e) = link.send(dst, &Probe::encode(kind, nonce, keyed, len)) {
                    failed_send.get_or_insert(e);
                }
            }
            let _ = link.flush();
            sent_at = Some(Instant::now());
        }
        let r = link.recv(Some(Duration::from_millis(20)), &mut |src, pdu| {
            let Some(a) = Answer::parse(pdu) else {
                return;
            };
            let Some(i) = hosts.iter().position(|h| h.mac == src) else {
                return;
            };
            if a.nonce != nonce || src == me {
                return;
            }
            let ends = Ends {
                listener: src,
                prober: me,
            };
            got[i].take(&a, key.as_ref(), &challenge, ends);
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
    let keyed = key.is_some();
    for (h, a) in hosts.iter().zip(&got) {
        let on = h.name.clone().unwrap_or_else(|| h.mac.to_string());
        checks.extend(
            verdicts(iface, group, local, h, a, wait, keyed)
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

/// The lines of one host, from what it answered; `keyed` if this host probed with a key.
fn verdicts(
    iface: &str,
    group: MacAddr,
    local: usize,
    h: &HostEntry,
    a: &Answers,
    wait: Duration,
    keyed: bool,
) -> Vec<Check> {
    let who = match &h.name {
        Some(n) => format!("{n} ({})", h.mac),
        None => h.mac.to_string(),
    };
    let on = h.name.clone().unwrap_or_else(|| h.mac.to_string());
    let same_key = "with the same --key-file as this host (a copy of one file on every host)";
    let key_line = match a.key {
        Some(KeySeen::None) => Some(Check::problem(
            "host.key",
            Status::Fail,
            format!("{who}: answers without a key, which no host can tell from a forgery"),
            format!("run `ethbcast doctor --listen --iface {iface} --key-file FILE` on {on}, {same_key}"),
        )),
        Some(KeySeen::Other) => Some(Check::problem(
            "host.key",
            Status::Fail,
            format!("{who}: answers under another key (or a host without the key forges its answers)"),
            format!("give `ethbcast doctor --listen` on {on} the key file of this host, {same_key}"),
        )),
        Some(KeySeen::Same) => Some(Check::ok(
            "host.key",
            format!("{who}: holds the same key (its answers verify)"),
        )),
        None => None,
    };
    let Some(mtu) = a.mtu else {
        if let Some(k) = key_line {
            return vec![k];
        }
        let key = if keyed { " --key-file FILE" } else { "" };
        return vec![Check::problem(
            "host.broadcast",
            Status::Fail,
            format!(
                "{who}: no answer to a broadcast within {:.1} s",
                wait.as_secs_f64()
            ),
            format!(
                "run `ethbcast doctor --listen --iface {iface}{key}` on {on}: it checks that host first and names what is wrong there (an interface down: `ip link set {iface} up`; a missing capability: setcap); check that {on} is on this segment"
            ),
        )];
    };
    let mut checks = vec![Check::ok(
        "host.broadcast",
        if keyed {
            format!("{who}: a broadcast reaches it")
        } else {
            format!("{who}: a broadcast reaches it (answers not authenticated: no --key-file)")
        },
    )];
    checks.extend(key_line);
    let min = ethbcast::MIN_MTU;
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

    fn host(name: &str) -> HostEntry {
        HostEntry {
            name: Some(name.into()),
            mac: MacAddr([2, 0, 0, 0, 0, 9]),
        }
    }

    fn lines(a: Answers, keyed: bool) -> Vec<String> {
        let g = MacAddr([3, 0xeb, 0, 0, 0, 1]);
        verdicts(
            "eth0",
            g,
            1500,
            &host("node9"),
            &a,
            Duration::from_secs(2),
            keyed,
        )
        .iter()
        .map(Check::render)
        .collect()
    }

    fn lines_keyless(a: Answers) -> Vec<String> {
        lines(a, false)
    }

    #[test]
    fn each_host_gets_a_line_per_check_naming_it_and_the_fix() {
        let all = Answers {
            broadcast: true,
            group: true,
            full: true,
            mtu: Some(1500),
            key: None,
        };
        let ok = lines(all, false);
        assert_eq!(ok.len(), 3, "{ok:?}");
        assert!(
            ok.iter()
                .all(|l| l.starts_with("ok") && l.contains("node9")),
            "{ok:?}"
        );
        let silent = lines(Answers::default(), false);
        assert_eq!(silent.len(), 1);
        assert!(
            silent[0].starts_with("FAIL  node9 (02:00:00:00:00:09): no answer"),
            "{silent:?}"
        );
        assert!(silent[0].contains("ethbcast doctor --listen"), "{silent:?}");
        let small = lines_keyless(Answers {
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
        let between = lines_keyless(Answers { full: false, ..all });
        assert!(
            between[1].starts_with("FAIL") && between[1].contains("between"),
            "{between:?}"
        );
        let no_group = lines_keyless(Answers {
            group: false,
            ..all
        });
        assert!(
            no_group[2].starts_with("FAIL") && no_group[2].contains("--group-address broadcast"),
            "{no_group:?}"
        );
    }

    /// Unkeyed answers say so; with a key, a host holding it gets a line saying so, and one
    /// without it or with another gets one failing line with the fix and nothing it answered
    /// (it might be a forgery).
    #[test]
    fn with_a_key_each_host_is_told_to_hold_the_same_key() {
        let all = Answers {
            broadcast: true,
            group: true,
            full: true,
            mtu: Some(1500),
            key: None,
        };
        assert!(lines(all, false)[0].ends_with("(answers not authenticated: no --key-file)"));
        let same = lines(
            Answers {
                key: Some(KeySeen::Same),
                ..all
            },
            true,
        );
        assert_eq!(same.len(), 4, "{same:?}");
        assert!(same[1].starts_with("ok    node9") && same[1].contains("the same key"));
        for (seen, what) in [
            (KeySeen::Other, "answers under another key"),
            (KeySeen::None, "answers without a key"),
        ] {
            let l = lines(
                Answers {
                    key: Some(seen),
                    ..Answers::default()
                },
                true,
            );
            assert_eq!(l.len(), 1, "{l:?}");
            assert!(
                l[0].starts_with("FAIL  node9") && l[0].contains(what),
                "{l:?}"
            );
            assert!(l[0].contains("--key-file"), "{l:?}");
        }
        let silent = lines(Answers::default(), true);
        assert!(
            silent[0].contains("--listen --iface eth0 --key-file FILE"),
            "{silent:?}"
        );
    }

    const PROBER: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const ME: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn answerer(key: Option<u8>) -> Answerer {
        Answerer {
            key: key.map(|b| ProbeKey::new(&[b; 32].into())),
            limits: Limits::default(),
        }
    }

    /// The listener's answers to `probe` sent `times` times from `src` within a second.
    fn answers(
        a: &mut Answerer,
        probe: &[u8],
        src: MacAddr,
        times: u32,
    ) -> (Vec<Answer>, Answered) {
        let p = Probe::parse(probe).unwrap();
        let now = Instant::now();
        let mut n = Answered::default();
        let out = (0..times)
            .filter_map(|_| a.reply(&p, src, ME, 1500, now, &mut n))
            .map(|b| Answer::parse(&b).unwrap())
            .collect();
        (out, n)
    }

    /// A probe from a group address (broadcast, multicast) or from the listener itself gets no
    /// answer, keyed or not: the answer would go to every host.
    #[test]
    fn probes_from_group_addresses_are_never_answered() {
        let plain = Probe::encode(Kind::Broadcast, 3, None, 0);
        for src in [BROADCAST_MAC, MacAddr([0x03, 0xeb, 0, 0, 0, 1]), ME] {
            let (out, n) = answers(&mut answerer(None), &plain, src, 5);
            assert!(out.is_empty(), "{src}");
            assert_eq!(n.group_sources, 5);
        }
        let k = ProbeKey::new(&[1; 32].into());
        let keyed = Probe::encode(Kind::Broadcast, 3, Some((&k, &[4; 16], BROADCAST_MAC)), 0);
        let (out, _) = answers(&mut answerer(Some(1)), &keyed, BROADCAST_MAC, 5);
        assert!(out.is_empty());
    }

    /// With a key: a probe of that key gets a keyed answer that verifies for the prober; an
    /// unkeyed probe gets none; a probe whose tag fails (another key, a forgery, the prober's
    /// probe re-sent from another MAC) gets one answer a second with no MTU, whose tag does
    /// not verify under the prober's key.
    #[test]
    fn a_keyed_listener_answers_its_key_and_tells_another_key_once() {
        let (k, other) = (
            ProbeKey::new(&[1; 32].into()),
            ProbeKey::new(&[2; 32].into()),
        );
        let c = [7u8; CHALLENGE_LEN];
        let ends = Ends {
            listener: ME,
            prober: PROBER,
        };
        let mut a = answerer(Some(1));
        let good = Probe::encode(Kind::Group, 9, Some((&k, &c, PROBER)), 0);
        let (out, _) = answers(&mut a, &good, PROBER, 3);
        assert_eq!(out.len(), 3);
        assert!(out
            .iter()
            .all(|x| x.mtu == 1500 && x.verifies(&k, &c, ends)));
        let (out, n) = answers(&mut a, &Probe::encode(Kind::Group, 9, None, 0), PROBER, 3);
        assert!(out.is_empty());
        assert_eq!(n.unauthenticated, 3);
        let stranger = MacAddr([2, 0, 0, 0, 0, 7]);
        let theirs = Probe::encode(Kind::Group, 9, Some((&other, &c, stranger)), 0);
        let (out, n) = answers(&mut a, &theirs, stranger, 20);
        assert_eq!(
            out.len(),
            1,
            "one answer a second to a probe of another key"
        );
        assert_eq!((n.unauthenticated, n.limited), (20, 19));
        assert_eq!(out[0].mtu, 0);
        assert!(!out[0].verifies(
            &other,
            &c,
            Ends {
                listener: ME,
                prober: stranger
            }
        ));
        assert!(
            out[0].tag.is_some(),
            "the prober learns that a key answered"
        );
        let resent = stranger;
        let (out, _) = answers(&mut answerer(Some(1)), &good, resent, 1);
        assert_eq!(out[0].mtu, 0, "the prober's probe re-sent from another MAC");
    }

    /// A source gets at most ANSWERS_PER_SOURCE answers a second, and mismatches in all at
    /// most MISMATCHES_PER_SECOND: a host sending probes in a victim's name (or many names)
    /// gets each listener to send a bounded number of frames.
    #[test]
    fn answers_are_limited_per_source_and_mismatches_in_all() {
        let plain = Probe::encode(Kind::Broadcast, 3, None, 0);
        let (out, n) = answers(&mut answerer(None), &plain, PROBER, 1000);
        assert_eq!(out.len() as u32, ANSWERS_PER_SOURCE);
        assert_eq!(n.limited, 1000 - u64::from(ANSWERS_PER_SOURCE));
        let mut a = answerer(Some(1));
        let other = ProbeKey::new(&[2; 32].into());
        let mut sent = 0;
        for i in 0..100u8 {
            let src = MacAddr([2, 0, 0, 0, 1, i]);
            let p = Probe::encode(Kind::Broadcast, 3, Some((&other, &[0; 16], src)), 0);
            sent += answers(&mut a, &p, src, 5).0.len() as u32;
        }
        assert_eq!(sent, MISMATCHES_PER_SECOND);
    }
}
