//! The join phase: receivers say hello until the sender's roster names them; the sender
//! waits for the receivers it expects, publishes the roster (itself rank 0), and repeats it
//! until every receiver has confirmed over its point-to-point channel.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ethbcast::driver::WallClock;
use ethbcast::link::{format_mac, Link, MacAddr, BROADCAST_MAC};
use ethbcast::proto::Dest;
use ethbcast::wire::{self, Control, Frame, Kind, Repr};

use super::stream::{decode_roster, encode_roster, HELLO};
use super::{Fatal, Node, EXIT_INTERRUPTED, EXIT_JOIN_TIMEOUT};

/// Rank field of frames from hosts that have no rank yet.
const NO_RANK: u16 = u16::MAX;
/// How often hellos and rosters are repeated.
const REPEAT: Duration = Duration::from_millis(20);

/// Whom the sender waits for.
#[derive(Debug, Clone)]
pub enum Expect {
    /// The first `n` distinct receivers.
    Count(usize),
    /// Exactly these MACs (hostfile), in this rank order.
    List(Vec<MacAddr>),
}

impl Expect {
    fn len(&self) -> usize {
        match self {
            Expect::Count(n) => *n,
            Expect::List(l) => l.len(),
        }
    }
}

fn join_frame(group: u32, src: u16, payload: &[u8]) -> Vec<u8> {
    let mut r = Repr::new(Kind::Join);
    r.group = group;
    r.src = src;
    r.dst = wire::ALL;
    r.to_vec(payload).expect("a join frame fits")
}

fn interrupted(flag: &AtomicBool) -> Result<(), Fatal> {
    if flag.load(Ordering::SeqCst) {
        return Err(Fatal::new(EXIT_INTERRUPTED, "interrupted"));
    }
    Ok(())
}

/// Sender, on the bare link: collects hellos until the expected receivers are there. Returns
/// the receivers in rank order (rank = index + 1).
pub fn collect(
    link: &mut dyn Link,
    group: u32,
    expect: &Expect,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<Vec<MacAddr>, Fatal> {
    let mut heard: BTreeSet<MacAddr> = BTreeSet::new();
    let mut strangers: BTreeSet<MacAddr> = BTreeSet::new();
    let me = link.local_mac();
    loop {
        interrupted(stop)?;
        let done = match expect {
            Expect::Count(n) => heard.len() >= *n,
            Expect::List(l) => l.iter().all(|m| heard.contains(m)),
        };
        if done {
            return Ok(match expect {
                Expect::Count(n) => heard.into_iter().take(*n).collect(),
                Expect::List(l) => l.clone(),
            });
        }
        let now = Instant::now();
        if now >= deadline {
            let mut msg = format!(
                "join timeout: {} of {} receivers joined",
                heard.len(),
                expect.len()
            );
            if let Expect::List(l) = expect {
                let missing: Vec<String> = l
                    .iter()
                    .filter(|m| !heard.contains(*m))
                    .map(format_mac)
                    .collect();
                msg.push_str(&format!("; missing: {}", missing.join(", ")));
                if !strangers.is_empty() {
                    msg.push_str(&format!(
                        "; heard from hosts not in the hostfile: {}",
                        strangers
                            .iter()
                            .map(format_mac)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            msg.push_str(" (is `ethbcast recv` running on every receiver, on this segment, with the same --group-id?)");
            return Err(Fatal::new(EXIT_JOIN_TIMEOUT, msg));
        }
        let wait = (deadline - now).min(REPEAT);
        link.recv(Some(wait), &mut |src, pdu| {
            let Ok(f) = Frame::new_checked(pdu) else {
                return;
            };
            let p = f.payload();
            if f.kind() != Kind::Join || f.group() != group || p.len() < 10 || &p[..4] != HELLO {
                return;
            }
            if p[4..10] != src || src == me {
                return;
            }
            match expect {
                Expect::List(l) if !l.contains(&src) => {
                    strangers.insert(src);
                }
                _ => {
                    heard.insert(src);
                }
            }
        })?;
    }
}

/// Sender, on the node: repeats the roster until every receiver confirmed (its first
/// point-to-point message).
pub fn confirm(
    node: &mut Node,
    roster: &[MacAddr],
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<(), Fatal> {
    let payload = encode_roster(roster);
    let mut confirmed = vec![false; roster.len()];
    confirmed[0] = true;
    let mut last = Instant::now() - REPEAT;
    loop {
        interrupted(stop)?;
        let now = Instant::now();
        if now.duration_since(last) >= REPEAT {
            let roster = Control::Join {
                body: payload.clone(),
            };
            node.member_mut()
                .send_control(Dest::All, roster)
                .map_err(|e| Fatal::new(super::EXIT_FAILED, format!("roster: {e}")))?;
            last = now;
        }
        for (r, c) in confirmed.iter_mut().enumerate() {
            if !*c && node.member_mut().take_p2p(now, r as u16).is_some() {
                *c = true;
            }
        }
        if confirmed.iter().all(|c| *c) {
            return Ok(());
        }
        if now >= deadline {
            let missing: Vec<String> = confirmed
                .iter()
                .zip(roster)
                .filter(|(c, _)| !**c)
                .map(|(_, m)| format_mac(m))
                .collect();
            return Err(Fatal::new(
                EXIT_JOIN_TIMEOUT,
                format!(
                    "join timeout: receivers {} were heard but did not confirm the roster",
                    missing.join(", ")
                ),
            ));
        }
        node.turn(&WallClock, Some(Duration::from_millis(5)))?;
    }
}

/// Receiver, on the bare link: says hello until a roster that names this host arrives.
/// Returns the roster (sender first).
pub fn hello(
    link: &mut dyn Link,
    group: u32,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<Vec<MacAddr>, Fatal> {
    let me = link.local_mac();
    let mut payload = HELLO.to_vec();
    payload.extend_from_slice(&me);
    let frame = join_frame(group, NO_RANK, &payload);
    let mut last = Instant::now() - REPEAT;
    let mut excluded = false;
    loop {
        interrupted(stop)?;
        let now = Instant::now();
        if now.duration_since(last) >= REPEAT {
            link.send(BROADCAST_MAC, &frame)?;
            link.flush()?;
            last = now;
        }
        if now >= deadline {
            return Err(Fatal::new(
                EXIT_JOIN_TIMEOUT,
                if excluded {
                    "join: a transfer started without this host (the sender already had all the receivers it expected)".to_string()
                } else {
                    "join timeout: no sender published a roster (is `ethbcast send` running on this segment with the same --group-id?)".to_string()
                },
            ));
        }
        let mut found = None;
        link.recv(Some((deadline - now).min(REPEAT)), &mut |src, pdu| {
            let Ok(f) = Frame::new_checked(pdu) else {
                return;
            };
            if f.kind() != Kind::Join || f.group() != group || f.src() != 0 {
                return;
            }
            let Some(roster) = decode_roster(f.payload()) else {
                return;
            };
            if roster[0] != src {
                return;
            }
            if roster.contains(&me) {
                found = Some(roster);
            } else {
                excluded = true;
            }
        })?;
        if let Some(r) = found {
            return Ok(r);
        }
    }
}
