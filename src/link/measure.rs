//! Measuring a [`Link`]: small-frame round-trip latency (ping-pong) and frame rate.
//!
//! Why here and generic: the same code measures every backend (ring, socket, pnet, the
//! simulator), so the numbers compare the media, not the harnesses. The functions only need a
//! `&mut dyn Link` each; setting up the media (network namespaces, threads) is the caller's job
//! (see `examples/pingpong.rs` and the benchmark tool).
//!
//! The PDUs sent here are not ethbcast frames (they carry a magic tag and a sequence number);
//! links do not look inside PDUs, so this measures the link alone.

use super::{Link, LinkError, MacAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Tag at the start of every measurement PDU, so stray frames are ignored.
const MAGIC: [u8; 4] = *b"EBPP";
/// Smallest measurement frame (its tag and sequence number): not a group's smallest frame
/// ([`ethbcast_proto::MIN_PDU`], which a join accepts), only what a probe carries.
pub const MIN_PROBE_LEN: usize = 12;

/// Result of [`ping`].
#[derive(Debug, Clone, PartialEq)]
pub struct PingReport {
    /// Round trips completed.
    pub round_trips: usize,
    /// Pings that got no answer within the timeout.
    pub lost: usize,
    /// Median round-trip time.
    pub median: Duration,
    /// 99th percentile round-trip time.
    pub p99: Duration,
    /// Fastest round trip.
    pub min: Duration,
    /// Slowest round trip.
    pub max: Duration,
}

/// Result of [`blast`] + [`sink`].
#[derive(Debug, Clone, PartialEq)]
pub struct RateReport {
    /// Frames handed to `send`.
    pub sent: u64,
    /// Frames the receiver got.
    pub received: u64,
    /// Sending time.
    pub elapsed: Duration,
}

impl RateReport {
    /// Frames sent per second.
    pub fn sent_per_sec(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Frames received per second (of sending time).
    pub fn received_per_sec(&self) -> f64 {
        self.received as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn encode(buf: &mut [u8], seq: u64) {
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..12].copy_from_slice(&seq.to_be_bytes());
}

fn decode(pdu: &[u8]) -> Option<u64> {
    if pdu.len() < MIN_PROBE_LEN || pdu[..4] != MAGIC {
        return None;
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(&pdu[4..12]);
    Some(u64::from_be_bytes(s))
}

/// Sends `n` pings of `pdu_len` bytes to `peer` (a MAC or the broadcast address), one at a
/// time, each waiting up to `timeout` for its echo (from [`echo`] on the other end), and
/// reports the round-trip times.
pub fn ping(
    link: &mut dyn Link,
    peer: MacAddr,
    n: usize,
    pdu_len: usize,
    timeout: Duration,
) -> Result<PingReport, LinkError> {
    let pdu_len = pdu_len.max(MIN_PROBE_LEN);
    let mut buf = vec![0u8; pdu_len];
    let mut rtts = Vec::with_capacity(n);
    let mut lost = 0;
    for seq in 0..n as u64 {
        encode(&mut buf, seq);
        let t0 = Instant::now();
        link.send(peer, &buf)?;
        link.flush()?;
        let deadline = t0 + timeout;
        let mut answered = false;
        while !answered {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            link.recv(Some(left), &mut |_, pdu| {
                answered |= decode(pdu) == Some(seq);
            })?;
        }
        if answered {
            rtts.push(t0.elapsed());
        } else {
            lost += 1;
        }
    }
    rtts.sort_unstable();
    let pick = |q: f64| {
        if rtts.is_empty() {
            Duration::ZERO
        } else {
            rtts[((rtts.len() - 1) as f64 * q).round() as usize]
        }
    };
    Ok(PingReport {
        round_trips: rtts.len(),
        lost,
        median: pick(0.5),
        p99: pick(0.99),
        min: pick(0.0),
        max: pick(1.0),
    })
}

/// Answers every measurement PDU with the same PDU, sent back to its source, until `stop` is
/// set. Returns how many it answered.
pub fn echo(link: &mut dyn Link, stop: &AtomicBool) -> Result<u64, LinkError> {
    let mut answered = 0;
    let mut pending: Vec<(MacAddr, Vec<u8>)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        link.recv(Some(Duration::from_millis(5)), &mut |src, pdu| {
            if decode(pdu).is_some() {
                pending.push((src, pdu.to_vec()));
            }
        })?;
        for (src, pdu) in pending.drain(..) {
            link.send(src, &pdu)?;
            answered += 1;
        }
        link.flush()?;
    }
    Ok(answered)
}

/// Sends numbered PDUs of `pdu_len` bytes to `dst` as fast as the link takes them, for
/// `duration`; flushes every `batch` frames. Returns the frames sent and the time taken.
pub fn blast(
    link: &mut dyn Link,
    dst: MacAddr,
    pdu_len: usize,
    duration: Duration,
    batch: usize,
) -> Result<(u64, Duration), LinkError> {
    let mut buf = vec![0u8; pdu_len.max(MIN_PROBE_LEN)];
    let batch = batch.max(1) as u64;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < duration {
        for _ in 0..batch {
            encode(&mut buf, sent);
            link.send(dst, &buf)?;
            sent += 1;
        }
        link.flush()?;
    }
    Ok((sent, t0.elapsed()))
}

/// Counts measurement PDUs until `stop` is set and nothing arrived for `idle`.
pub fn sink(link: &mut dyn Link, stop: &AtomicBool, idle: Duration) -> Result<u64, LinkError> {
    let mut received = 0u64;
    loop {
        let n = link.recv(Some(idle), &mut |_, pdu| {
            if decode(pdu).is_some() {
                received += 1;
            }
        })?;
        if n == 0 && stop.load(Ordering::Acquire) {
            return Ok(received);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurement_pdus_round_trip_and_reject_strays() {
        let mut b = [0u8; 64];
        encode(&mut b, 77);
        assert_eq!(decode(&b), Some(77));
        assert_eq!(decode(&b[..8]), None);
        b[0] = b'X';
        assert_eq!(decode(&b), None);
    }
}
