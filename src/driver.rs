//! The one driver: runs a [`Member`] over a [`Link`] with a clock.
//!
//! Everything above the links is sans-IO; this is the only loop that moves frames between a
//! member and a medium and reads a clock. One turn ([`Driver::turn`]) sends what the member
//! has, waits for frames no longer than the member's next timer, feeds every frame in, fires
//! due timers and sends again. The blocking calls of [`crate::group::Group`] are loops of
//! turns with a deadline ([`Driver::run_until`]), so none waits forever; the simulated
//! cluster ([`crate::cluster`]) runs the same turns in virtual time, the switch's clock
//! ([`crate::link::sim::SimNet`]) standing in for the wall clock.

use std::time::{Duration, Instant};

use crate::link::sim::SimNet;
use crate::link::{Link, LinkError};
use ethbcast_proto::Member;
pub(crate) use ethbcast_proto::{Clock, Machine};

/// The wall clock of real links.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

impl WallClock {
    /// Microseconds since the Unix epoch (0 before it): the calendar time a join seals into its
    /// challenges, so that a member prefers a coordinator's newest one.
    pub(crate) fn unix_micros(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}

impl Clock for SimNet {
    fn now(&self) -> Instant {
        SimNet::now(self)
    }
}

/// Frames handled between two readings of the clock while a batch is fed in: timers need no
/// finer grain, and at line rate one reading per frame was a visible share of a receiver's
/// time.
const FRAMES_PER_CLOCK_READ: u32 = 64;

/// How long a turn waits at most while the link's send queue is full: the frames the machine
/// still has are offered again then, even if nothing arrives and no timer fires.
const SEND_RETRY: Duration = Duration::from_millis(50);

/// When [`Driver::run_until`] sends what the machine has once the call's value came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sends {
    /// Before returning the value. A call can complete before the frames it made left (a
    /// root's small message is handed over whole): they go now, not at the next call, which
    /// may come after a long computation.
    Now,
    /// For a call that needs nothing sent once its result came in (a receiver's message):
    /// when the frames of a turn complete the call and made only acknowledgements
    /// ([`Machine::has_data_to_send`] says no), it returns before sending them; they leave at
    /// the start of the next call or turn. The caller has
    /// its message one system call sooner; the acknowledgement leaves when the member next
    /// waits, off the broadcast's critical path.
    Deferred,
}

/// A machine (a member, by default) and the link it runs on.
pub(crate) struct Driver<L, M = Member> {
    member: M,
    link: L,
    buf: Vec<u8>,
    /// Where the machine's payloads left in the link lie, when the link prunes what it
    /// retains (see [`Link::prune_held`]).
    refs: Vec<usize>,
    /// The machine may have frames to send (see [`Driver::unflushed`]).
    unflushed: bool,
}

impl<L, M: std::fmt::Debug> std::fmt::Debug for Driver<L, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("machine", &self.member)
            .finish()
    }
}

impl<L: Link, M: Machine> Driver<L, M> {
    /// Drives `machine` over `link`.
    pub(crate) fn new(machine: M, link: L) -> Driver<L, M> {
        let buf = vec![0u8; link.max_pdu().max(ethbcast_proto::OVERHEAD)];
        Driver {
            member: machine,
            link,
            buf,
            refs: Vec::new(),
            // A machine may be made with frames to send (a join's first hello).
            unflushed: true,
        }
    }

    /// The machine.
    pub(crate) fn member(&self) -> &M {
        &self.member
    }
    /// The machine, for calls (after which it may have frames to send).
    pub(crate) fn member_mut(&mut self) -> &mut M {
        self.unflushed = true;
        &mut self.member
    }
    /// The link.
    pub(crate) fn link(&self) -> &L {
        &self.link
    }

    /// Hands every frame the member has to the link.
    pub(crate) fn flush(&mut self, now: Instant) -> Result<(), LinkError> {
        // Only as much as the link takes without a long queue: the rest stays with the
        // machine, which puts repairs and control before fresh data when it is asked again.
        self.unflushed = false;
        loop {
            if !self.link.tx_ready() {
                self.unflushed = true;
                break;
            }
            // Written where the link sends it from (a ring's TX slot), or into `buf` for a
            // link that copies anyway.
            let member = &mut self.member;
            let fill = &mut |out: &mut [u8]| member.poll_transmit(now, out);
            if !self.link.send_with(&mut self.buf, fill)? {
                break;
            }
        }
        self.link.flush()
    }

    /// Whether the machine may have frames to send: the last flush stopped at a link that
    /// would not take more, or the machine was called, handed frames or timed out since
    /// (false: the last flush found nothing more and nothing reached the machine since, so a
    /// flush now would find nothing either: a machine's frames are made by its calls, frames
    /// and timers, not by time passing).
    #[cfg(test)]
    pub(crate) fn unflushed(&self) -> bool {
        self.unflushed
    }

    /// One turn: send, wait up to `wait` (or the member's next timer, if sooner; `None`:
    /// do not wait) for frames, hand them in, fire due timers, send again. Returns the
    /// frames received.
    pub(crate) fn turn(
        &mut self,
        clock: &impl Clock,
        wait: Option<Duration>,
    ) -> Result<usize, LinkError> {
        let n = self.receive(clock, wait)?;
        self.flush(clock.now())?;
        Ok(n)
    }

    /// A turn without its last step: sends what the member has, waits, feeds the frames in and
    /// fires due timers; what that made stays with the member until the next flush. The
    /// first step is skipped where it would find nothing ([`Driver::unflushed`]): in a
    /// simulated group of thousands every member turns for every couple of frames, and
    /// each flush asks the link and the member.
    fn receive(&mut self, clock: &impl Clock, wait: Option<Duration>) -> Result<usize, LinkError> {
        let now = clock.now();
        if self.unflushed {
            self.flush(now)?;
        }
        self.wait_and_feed(clock, now, wait)
    }

    /// [`Driver::receive`] after its send (at `now`): waits, feeds the frames in and fires due
    /// timers.
    fn wait_and_feed(
        &mut self,
        clock: &impl Clock,
        now: Instant,
        wait: Option<Duration>,
    ) -> Result<usize, LinkError> {
        // (Without a wait there is nothing to shorten: the link is not asked.)
        let wait = match wait {
            Some(w) if !self.link.tx_ready() => Some(w.min(SEND_RETRY)),
            w => w,
        };
        let wait = match (wait, self.member.poll_timeout()) {
            (Some(w), Some(t)) => Some(w.min(t.saturating_duration_since(now))),
            (w, _) => w,
        };
        let held = self.member.wants_frames_done();
        // Frames in and timers fired make what the next flush sends.
        self.unflushed = true;
        // Lent to two closures that never run at once: the frames' and the batch end's.
        let member = std::cell::RefCell::new(&mut self.member);
        let mut stamp = (now, 0u32);
        let mut take = |src, pdu: &[u8]| {
            // The first frame of a batch may come after a long wait: read the clock then.
            if stamp.1.is_multiple_of(FRAMES_PER_CLOCK_READ) {
                stamp.0 = clock.now();
            }
            stamp.1 = stamp.1.wrapping_add(1);
            member.borrow_mut().handle_frame(stamp.0, src, pdu);
        };
        let n = if held {
            self.link.recv_held(wait, &mut take, &mut |end| {
                member.borrow_mut().frames_done(clock.now(), end)
            })?
        } else {
            self.link.recv(wait, &mut take)?
        };
        if held && self.link.wants_prune() {
            // The frames the link retains that the machine no longer reads go now.
            self.refs.clear();
            self.member.link_refs(&mut self.refs);
            self.refs.sort_unstable();
            self.link.prune_held(&self.refs);
        }
        let now = clock.now();
        if self.member.poll_timeout().is_some_and(|t| t <= now) {
            self.member.handle_timeout(now);
        }
        Ok(n)
    }

    /// Turns until `ready` gives a value or `deadline` passes (`Ok(None)`). Waits at most
    /// `slice` per turn, so that `ready` is asked again at least that often. What the
    /// machine has to send when the value comes leaves as `sends` says.
    pub(crate) fn run_until<T>(
        &mut self,
        clock: &impl Clock,
        deadline: Instant,
        slice: Duration,
        sends: Sends,
        mut ready: impl FnMut(&mut M) -> Option<T>,
    ) -> Result<Option<T>, LinkError> {
        let defer = sends == Sends::Deferred;
        let mut received = false;
        loop {
            if let Some(v) = ready(self.member_mut()) {
                // A deferred call completed by received frames leaves what they made for the
                // next call, if that is acknowledgements only: data (a tree relay's copies for
                // its children) goes now, or its receivers would wait for that next call.
                if !(defer && received) || self.member.has_data_to_send() {
                    self.flush(clock.now())?;
                }
                return Ok(Some(v));
            }
            let now = clock.now();
            if now >= deadline {
                if defer && received {
                    self.flush(now)?;
                }
                return Ok(None);
            }
            // The turn's first step, sending what the member holds, can complete the call by
            // itself (a flush is done once its last acknowledgement left): look again before
            // waiting.
            self.flush(now)?;
            if let Some(v) = ready(self.member_mut()) {
                return Ok(Some(v));
            }
            let wait = Some((deadline - now).min(slice));
            self.wait_and_feed(clock, now, wait)?;
            if defer {
                received = true;
            } else {
                self.flush(clock.now())?;
            }
        }
    }

    /// Sends whatever the member has and waits up to `timeout` until the link has handed all
    /// of it to the device; returns whether it did. For a member that sends its last words and
    /// exits.
    pub(crate) fn drain(
        &mut self,
        clock: &impl Clock,
        timeout: Duration,
    ) -> Result<bool, LinkError> {
        self.flush(clock.now())?;
        self.link.drain(timeout)
    }

    /// Ends a batch outside a turn: the machine is told what the link holds now (see
    /// [`Machine::frames_done`]), none of it leaving. For bytes a machine consumed outside a
    /// turn, or left in the link's frames.
    pub(crate) fn frames_done(&mut self, now: Instant) {
        self.unflushed = true;
        let member = &mut self.member;
        self.link.with_held(&mut |end| member.frames_done(now, end));
    }

    /// Asks the link to keep up to `frames` received frames after each batch for the machine
    /// (see [`Link::retain`]); returns how many it keeps.
    pub(crate) fn retain(&mut self, frames: usize) -> usize {
        self.link.retain(frames)
    }

    /// Takes the driver apart.
    pub(crate) fn into_parts(self) -> (M, L) {
        (self.member, self.link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{SimConfig, SimPort};
    use ethbcast_proto::Transmit;

    /// A machine with `left` frames of 1000 bytes to send to port 1, nothing else.
    #[derive(Debug)]
    struct Sends {
        left: usize,
        to: ethbcast_proto::MacAddr,
    }

    impl Machine for Sends {
        fn handle_frame(&mut self, _: Instant, _: ethbcast_proto::MacAddr, _: &[u8]) {}
        fn handle_timeout(&mut self, _: Instant) {}
        fn poll_timeout(&self) -> Option<Instant> {
            None
        }
        fn poll_transmit(&mut self, _: Instant, buf: &mut [u8]) -> Option<Transmit> {
            self.left = self.left.checked_sub(1)?;
            buf[..1000].fill(7);
            Some(Transmit {
                dst: self.to,
                len: 1000,
            })
        }
    }

    /// Port 0 of a switch at 100 Mbit/s whose transmit queue holds two full frames, driving
    /// a machine with `frames` to send.
    fn driver(frames: usize) -> (SimNet, Driver<SimPort, Sends>) {
        let net = SimNet::new(SimConfig {
            rate_bps: Some(100_000_000),
            tx_queue: Some(2),
            ..SimConfig::new(2)
        })
        .unwrap();
        let mut ports = net.all_ports();
        let to = ports[1].local_mac();
        let machine = Sends { left: frames, to };
        (net, Driver::new(machine, ports.swap_remove(0)))
    }

    #[test]
    fn a_driver_says_whether_its_machine_may_have_frames_left_to_send() {
        let (net, mut d) = driver(6);
        d.flush(net.now()).unwrap();
        assert!(d.unflushed(), "the queue took at most two frames");
        let left = d.member().left;
        assert!((1..=4).contains(&left), "{left} frames left");
        // As the queue drains, flushes send the rest, until one finds nothing left.
        while d.unflushed() {
            let t = net.next_event().expect("the queue drains");
            net.advance_to(t);
            d.flush(net.now()).unwrap();
        }
        assert_eq!(d.member().left, 0, "everything went");
        // A machine with nothing to send is never held back.
        let (net, mut idle) = driver(0);
        idle.flush(net.now()).unwrap();
        assert!(!idle.unflushed());
        // A machine lent for a call may have something to send.
        let _ = idle.member_mut();
        assert!(idle.unflushed());
    }
}
