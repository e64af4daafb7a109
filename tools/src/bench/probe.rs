//! The latency breakdown's instruments: a link that records the instants of one iteration
//! (first send, flush, first frame received, back to waiting), and the stamps a member takes of
//! each iteration with them. [`super::latency`] and [`super::floor`] stamp alike.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ethbcast::{Link, LinkError, MacAddr, Transmit};

/// Wraps `inner` in a [`ProbedLink`] whose probe becomes this thread's [`probe`].
pub fn install(inner: Box<dyn Link + Send>) -> Box<dyn Link + Send> {
    let p = Arc::new(Probe::new());
    PROBE.with(|t| *t.borrow_mut() = Some(p.clone()));
    Box::new(ProbedLink { inner, probe: p })
}

thread_local! {
    static PROBE: RefCell<Option<Arc<Probe>>> = const { RefCell::new(None) };
}

/// The probe of the link this thread opened with [`super::bed::open_link`], if probing.
pub fn probe() -> Option<Arc<Probe>> {
    PROBE.with(|t| t.borrow().clone())
}

/// Instants on a member's link since the last [`Probe::mark`]: the first `send`, the first
/// `flush` after it, the first frame received. Shared between the link (inside the member's
/// group) and the benchmark loop of the same thread, so it is atomics, not a lock.
#[derive(Debug)]
pub struct Probe {
    base: Instant,
    first_send: AtomicU64,
    flushed: AtomicU64,
    first_rx: AtomicU64,
    waits: AtomicU64,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            base: Instant::now(),
            first_send: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            first_rx: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }

    /// Forgets what was seen: the next send, flush and frame are recorded.
    pub fn mark(&self) {
        for a in [&self.first_send, &self.flushed, &self.first_rx, &self.waits] {
            a.store(0, Ordering::Relaxed);
        }
    }

    fn stamp(&self, a: &AtomicU64) {
        if a.load(Ordering::Relaxed) == 0 {
            let ns = self.base.elapsed().as_nanos() as u64 + 1;
            a.store(ns, Ordering::Relaxed);
        }
    }

    fn at(&self, a: &AtomicU64) -> Option<Instant> {
        match a.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(self.base + Duration::from_nanos(ns - 1)),
        }
    }

    /// (first send, first flush after it, first frame received) since the mark.
    pub fn seen(&self) -> (Option<Instant>, Option<Instant>, Option<Instant>) {
        (
            self.at(&self.first_send),
            self.at(&self.flushed),
            self.at(&self.first_rx),
        )
    }

    /// The first waiting `recv` after the flush (the root going back to sleep).
    pub fn waits(&self) -> Option<Instant> {
        self.at(&self.waits)
    }
}

/// A link that records the instants of [`Probe`] and otherwise passes everything through.
/// Its cost is one clock reading per recorded instant (tens of nanoseconds).
pub struct ProbedLink {
    inner: Box<dyn Link + Send>,
    probe: Arc<Probe>,
}

impl Link for ProbedLink {
    fn local_mac(&self) -> MacAddr {
        self.inner.local_mac()
    }
    fn max_pdu(&self) -> usize {
        self.inner.max_pdu()
    }
    fn join_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        self.inner.join_group(group)
    }
    fn leave_group(&mut self, group: MacAddr) -> Result<(), LinkError> {
        self.inner.leave_group(group)
    }
    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        self.probe.stamp(&self.probe.first_send);
        self.inner.send(dst, pdu)
    }
    fn send_with(
        &mut self,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> Result<bool, LinkError> {
        let probe = &self.probe;
        self.inner.send_with(scratch, &mut |out| {
            let t = fill(out);
            if t.is_some() {
                probe.stamp(&probe.first_send);
            }
            t
        })
    }
    fn flush(&mut self) -> Result<(), LinkError> {
        let r = self.inner.flush();
        if self.probe.first_send.load(Ordering::Relaxed) != 0 {
            self.probe.stamp(&self.probe.flushed);
        }
        r
    }
    fn drain(&mut self, timeout: Duration) -> Result<bool, LinkError> {
        self.inner.drain(timeout)
    }
    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        self.recv(None, f)
    }
    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        self.inner.wait_ready(wait)
    }
    fn recv(
        &mut self,
        wait: Option<Duration>,
        f: &mut dyn FnMut(MacAddr, &[u8]),
    ) -> Result<usize, LinkError> {
        let probe = &self.probe;
        if wait.is_some() && probe.flushed.load(Ordering::Relaxed) != 0 {
            probe.stamp(&probe.waits);
        }
        self.inner.recv(wait, &mut |src, pdu| {
            probe.stamp(&probe.first_rx);
            f(src, pdu)
        })
    }
}

/// What one member of a latency or floor run returns.
#[derive(Debug, Clone, Default)]
pub struct MemberRun {
    /// Its stamps.
    pub stamps: Vec<Stamp>,
    /// Its work per entry over the measured iterations ([`super::cpu::Meter`]).
    pub counts: Vec<super::cpu::Counts>,
    /// Repair frames it sent per entry over the same windows (the root; none on the floor).
    pub repairs: Vec<u64>,
}

/// What one member saw of one iteration: `t` defines the latency (the root's call, a
/// receiver's return); with probing, the link's instants (root: first send, the flush after
/// it; receiver: the first frame received).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    /// The root's call, or the receiver's return.
    pub t: Instant,
    /// Root: first frame handed to the link. Receiver: first frame received.
    pub a: Option<Instant>,
    /// Root: the link flush after it. Receiver: unused.
    pub b: Option<Instant>,
    /// Root: its first waiting receive after the flush (back to sleep). Receiver: unused.
    pub c: Option<Instant>,
}

impl Stamp {
    /// The root's stamp at `t` with what this thread's probe saw, if probing.
    pub fn root(t: Instant) -> Stamp {
        let (send, flushed, _) = probe().map_or((None, None, None), |p| p.seen());
        Stamp {
            t,
            a: send,
            b: flushed,
            c: None,
        }
    }

    /// A receiver's stamp at `t` with what this thread's probe saw, if probing.
    pub fn receiver(t: Instant) -> Stamp {
        let (_, _, rx) = probe().map_or((None, None, None), |p| p.seen());
        Stamp {
            t,
            a: rx,
            b: None,
            c: None,
        }
    }
}

/// Clears this thread's probe (before an iteration), if probing.
pub fn mark_probe() {
    if let Some(p) = probe() {
        p.mark();
    }
}

/// The root, before its next iteration: completes its previous stamp with what happened after
/// its call returned (going back to waiting; and the first send and flush, if the call
/// returned before handing its frames to the link), then clears the probe.
pub fn root_mark_probe(out: &mut [Stamp]) {
    if let Some(p) = probe() {
        if let Some(last) = out.last_mut() {
            let (send, flushed, _) = p.seen();
            last.a = last.a.or(send);
            last.b = last.b.or(flushed);
            last.c = last.c.or(p.waits());
        }
        p.mark();
    }
}

/// A receiver done with an iteration at `t`: its stamp (kept in `out` if `measured`), the probe
/// cleared, the root told through `done`.
pub fn receiver_done(out: &mut Vec<Stamp>, t: Instant, done: &AtomicUsize, measured: bool) {
    let stamp = Stamp::receiver(t);
    mark_probe();
    done.fetch_add(1, Ordering::AcqRel);
    if measured {
        out.push(stamp);
    }
}
