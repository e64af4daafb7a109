//! The rate a link sends at: the speed its driver reports (`/sys/class/net/IFACE/speed`), or
//! the rate of a token bucket (`tbf`) at the root of its egress, whichever is lower. A
//! physical port reports its negotiated speed; a virtual one (veth, bridge) reports none, and
//! shaped by `tc qdisc add dev IFACE root tbf rate R ...` it sends at `R`, as a switch port of
//! that speed does. Used to choose defaults that depend on the medium (how long a message is
//! worth broadcasting rather than sending down a tree of TCP connections).
//!
//! The qdisc is read with one `RTM_GETQDISC` dump over a route netlink socket (no `unsafe`:
//! `nix` wraps the socket calls); only a `tbf` whose parent is the root counts.

use std::os::fd::AsRawFd;

use nix::sys::socket::{
    bind, recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
    SockType,
};

/// The link's rate in bits per second, if known: the lower of the reported speed and a root
/// `tbf`'s rate. `None` when the interface reports no speed and has no root `tbf`, or does
/// not exist.
pub fn link_rate(iface: &str) -> Option<u64> {
    let speed = reported_speed(iface);
    let shaped = nix::net::if_::if_nametoindex(iface)
        .ok()
        .and_then(|index| root_tbf_rate(index).ok().flatten());
    match (speed, shaped) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The speed the driver reports, in bits per second (`None` for -1, "Invalid argument" and
/// interfaces that are down or unknown).
pub fn reported_speed(iface: &str) -> Option<u64> {
    if iface.contains('/') || iface.is_empty() {
        return None;
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")).ok()?;
    let mbit: i64 = text.trim().parse().ok()?;
    (mbit > 0).then(|| mbit as u64 * 1_000_000)
}

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
const TCMSG_LEN: usize = 20;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;

/// The rate of the `tbf` at the root of interface `index`'s egress, in bits per second.
fn root_tbf_rate(index: u32) -> nix::Result<Option<u64>> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    let mut req = Vec::with_capacity(NLMSG_HDRLEN + TCMSG_LEN);
    req.extend_from_slice(&((NLMSG_HDRLEN + TCMSG_LEN) as u32).to_ne_bytes());
    req.extend_from_slice(&RTM_GETQDISC.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    req.extend_from_slice(&[0u8; TCMSG_LEN]); // AF_UNSPEC, every interface
    send(fd.as_raw_fd(), &req, MsgFlags::empty())?;
    let mut buf = vec![0u8; 32 * 1024];
    let mut found = None;
    // A dump comes in datagrams of several messages until NLMSG_DONE; at most a few hundred
    // qdiscs on any host, so a bound on the datagrams read keeps a confused kernel from
    // holding us.
    for _ in 0..1024 {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        match parse_dump(&buf[..n], index) {
            Dump::More(rate) => found = found.or(rate),
            Dump::Done(rate) => return Ok(found.or(rate)),
        }
    }
    Ok(found)
}

/// What one datagram of the dump held.
#[derive(Debug, PartialEq, Eq)]
enum Dump {
    /// More datagrams follow; the root tbf's rate if this one had it.
    More(Option<u64>),
    /// The dump ended (or failed) in this datagram.
    Done(Option<u64>),
}

/// Walks the netlink messages of one datagram of an `RTM_GETQDISC` dump, looking for the root
/// `tbf` of interface `index`. Malformed lengths end the walk.
fn parse_dump(mut buf: &[u8], index: u32) -> Dump {
    let mut rate = None;
    while buf.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Dump::Done(rate);
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => return Dump::Done(rate),
            RTM_NEWQDISC => {
                rate = rate.or_else(|| root_tbf_of(&buf[NLMSG_HDRLEN..len], index));
            }
            _ => {}
        }
        buf = &buf[align4(len).min(buf.len())..];
    }
    Dump::More(rate)
}

/// The rate of the qdisc message `msg` (a `tcmsg` and its attributes) if it is the root `tbf`
/// of interface `index`.
fn root_tbf_of(msg: &[u8], index: u32) -> Option<u64> {
    let tcm = msg.get(..TCMSG_LEN)?;
    let ifindex = u32::from_ne_bytes([tcm[4], tcm[5], tcm[6], tcm[7]]);
    let parent = u32::from_ne_bytes([tcm[12], tcm[13], tcm[14], tcm[15]]);
    if ifindex != index || parent != TC_H_ROOT {
        return None;
    }
    let attrs = &msg[TCMSG_LEN..];
    let kind = attr(attrs, TCA_KIND)?;
    if kind.split(|&b| b == 0).next()? != b"tbf" {
        return None;
    }
    let options = attr(attrs, TCA_OPTIONS)?;
    if let Some(r64) = attr(options, TCA_TBF_RATE64) {
        let bytes: [u8; 8] = r64.get(..8)?.try_into().ok()?;
        return Some(u64::from_ne_bytes(bytes) * 8);
    }
    // struct tc_tbf_qopt starts with the rate's tc_ratespec, whose `rate` (bytes per second)
    // is its last field, at offset 8.
    let parms = attr(options, TCA_TBF_PARMS)?;
    let bytes: [u8; 4] = parms.get(8..12)?.try_into().ok()?;
    Some(u64::from(u32::from_ne_bytes(bytes)) * 8)
}

/// The payload of the first attribute of type `kind` in a run of `rtattr`s.
fn attr(mut attrs: &[u8], kind: u16) -> Option<&[u8]> {
    while attrs.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
        let t = u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3FFF;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if t == kind {
            return Some(&attrs[4..len]);
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    None
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtattr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(payload);
        v.resize(align4(v.len()), 0);
        v
    }

    fn qdisc(ifindex: u32, parent: u32, kind: &str, options: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8; TCMSG_LEN];
        body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        body[12..16].copy_from_slice(&parent.to_ne_bytes());
        body.extend(rtattr(TCA_KIND, format!("{kind}\0").as_bytes()));
        body.extend(rtattr(TCA_OPTIONS, options));
        let mut msg = Vec::new();
        msg.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&RTM_NEWQDISC.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 10]);
        msg.extend(body);
        msg
    }

    fn tbf_parms(bytes_per_sec: u32) -> Vec<u8> {
        // tc_tbf_qopt: rate and peak rate (12 bytes each), limit, buffer, mtu.
        let mut p = vec![0u8; 36];
        p[8..12].copy_from_slice(&bytes_per_sec.to_ne_bytes());
        rtattr(TCA_TBF_PARMS, &p)
    }

    fn done() -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        m.extend_from_slice(&[0u8; 14]);
        m
    }

    /// The layout is the kernel's (`linux/rtnetlink.h`, `linux/pkt_sched.h`): a 1 Gbit/s
    /// tbf at the root of interface 7 is found among other interfaces' and other kinds'
    /// qdiscs; a tbf that is not at the root (under a class) does not count.
    #[test]
    fn the_root_tbf_of_the_interface_gives_the_rate() {
        let mut dump = qdisc(3, TC_H_ROOT, "tbf", &tbf_parms(12_500_000));
        dump.extend(qdisc(7, 0x0001_0001, "tbf", &tbf_parms(1_000)));
        dump.extend(qdisc(7, TC_H_ROOT, "pfifo_fast", &[]));
        dump.extend(qdisc(7, TC_H_ROOT, "tbf", &tbf_parms(125_000_000)));
        assert_eq!(parse_dump(&dump, 7), Dump::More(Some(1_000_000_000)));
        assert_eq!(parse_dump(&dump, 3), Dump::More(Some(100_000_000)));
        assert_eq!(parse_dump(&dump, 9), Dump::More(None));
        let mut ended = dump.clone();
        ended.extend(done());
        assert_eq!(parse_dump(&ended, 7), Dump::Done(Some(1_000_000_000)));
        // Rates of 4 GB/s and more come in TCA_TBF_RATE64.
        let mut opts = tbf_parms(u32::MAX);
        opts.extend(rtattr(TCA_TBF_RATE64, &5_000_000_000u64.to_ne_bytes()));
        let big = qdisc(2, TC_H_ROOT, "tbf", &opts);
        assert_eq!(parse_dump(&big, 2), Dump::More(Some(40_000_000_000)));
    }

    /// Truncated and lying lengths end the walk without reading past the datagram.
    #[test]
    fn malformed_dumps_give_no_rate_and_no_panic() {
        let good = qdisc(7, TC_H_ROOT, "tbf", &tbf_parms(125_000_000));
        for cut in 0..good.len() {
            let r = parse_dump(&good[..cut], 7);
            assert!(
                matches!(r, Dump::More(None) | Dump::Done(None)),
                "{cut}: {r:?}"
            );
        }
        let mut lying = good.clone();
        lying[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse_dump(&lying, 7), Dump::Done(None));
        let mut short_attr = good.clone();
        let at = NLMSG_HDRLEN + TCMSG_LEN;
        short_attr[at..at + 2].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse_dump(&short_attr, 7), Dump::More(None));
    }

    #[test]
    fn no_such_interface_has_no_rate() {
        assert_eq!(link_rate("ebc-none0"), None);
        assert_eq!(reported_speed("../../etc"), None);
    }
}
