//! Messages held back for fellows' requests (`Config::peer_hold`): a complete message stays
//! with the stream, where a fellow's request for any of its frames finds it, until the stream
//! has moved a window's worth of frames past it or stopped moving for [`PEER_HOLD_WAIT`].
//!
//! **Invariants.** Held messages leave in order, and only from the front: delivery stays in the
//! root's order. The hold timer ([`StreamTimer::Hold`]) is armed exactly while a message is
//! held.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::Seq;

use super::super::timer::{StreamTimer, StreamTimers};
use super::super::{Config, Event};

/// With `Config::peer_hold`: how long a completed message is still held for fellows'
/// requests once its stream stopped moving (the end of a transfer, a pause of the root's
/// input). A fellow asks within its gathering wait and a few of its turns of a millisecond.
pub(in crate::engine) const PEER_HOLD_WAIT: Duration = Duration::from_millis(5);

/// A message complete but held back: its event, delivered once the stream reached `until`,
/// or once the stream stopped moving for [`PEER_HOLD_WAIT`].
#[derive(Debug)]
struct Held {
    event: Event,
    until: Seq,
}

/// The messages one stream holds back. See the module documentation.
#[derive(Debug)]
pub(super) struct Hold {
    held: VecDeque<Held>,
    /// The stream's next expected frame, and when it last moved, as the release last saw
    /// them.
    seen: Seq,
    moved: Option<Instant>,
    /// Messages are held (`Config::peer_hold`).
    enabled: bool,
}

impl Hold {
    /// Nothing held.
    pub(super) fn new(cfg: &Config) -> Hold {
        Hold {
            held: VecDeque::new(),
            seen: Seq::new(0),
            moved: None,
            enabled: cfg.peer_hold,
        }
    }

    /// Whether messages are held whole for fellows (`Config::peer_hold`).
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether a message completed now is held: while fellows ask (`copying`), and behind any
    /// message held before it, whatever it is (delivery stays in order).
    pub(super) fn takes(&self, copying: bool) -> bool {
        self.enabled && (copying || !self.held.is_empty())
    }

    /// Holds a complete message's `event` until the stream reaches `until`.
    pub(super) fn push(&mut self, event: Event, until: Seq) {
        self.held.push_back(Held { event, until });
    }

    /// Delivers into `events` the held messages whose time came by `now`, the stream being at
    /// `expected`, in order, and keeps the hold timer in step.
    pub(super) fn release(
        &mut self,
        now: Instant,
        expected: Seq,
        timers: &mut StreamTimers<'_>,
        events: &mut VecDeque<Event>,
    ) {
        if self.held.is_empty() {
            // Every frame comes here: a stream without loss holds nothing.
            return;
        }
        if expected != self.seen {
            self.seen = expected;
            self.moved = Some(now);
        }
        // The wait runs from the stream's last move: a slow stream (a busy host) holds by
        // frames, not by time.
        let quiet_at = self.moved.unwrap_or(now) + PEER_HOLD_WAIT;
        while let Some(h) = self.held.front() {
            if expected < h.until && quiet_at > now {
                break;
            }
            let h = self.held.pop_front().expect("not empty");
            events.push_back(h.event);
        }
        let at = match timers.get(StreamTimer::Hold) {
            _ if self.held.is_empty() => None,
            Some(t) if t > now => Some(t),
            _ => Some(quiet_at),
        };
        timers.set_or_stop(StreamTimer::Hold, at);
    }

    /// Delivers every held message now (the stream is going away).
    pub(super) fn release_all(
        &mut self,
        timers: &mut StreamTimers<'_>,
        events: &mut VecDeque<Event>,
    ) {
        events.extend(self.held.drain(..).map(|h| h.event));
        timers.stop(StreamTimer::Hold);
    }

    /// The bytes of held message `msg_id` (its low 32 bits) of length `len`, if it is held.
    pub(super) fn find(&self, msg_id: u32, len: usize) -> Option<&Vec<u8>> {
        self.held.iter().find_map(|h| match &h.event {
            Event::Delivered(m) if m.msg_id as u32 == msg_id && m.data.len() == len => {
                Some(&m.data)
            }
            _ => None,
        })
    }

    /// Heap bytes of the messages held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.held
            .iter()
            .map(|h| match &h.event {
                Event::Delivered(m) => m.data.capacity(),
                _ => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::timer::TimerTable;
    use super::super::super::Message;
    use super::*;
    use crate::Rank;

    fn delivered(id: u64) -> Event {
        Event::Delivered(Message {
            root: Rank::new(0),
            msg_id: id,
            data: vec![id as u8; 3],
        })
    }

    #[test]
    fn held_messages_leave_in_order_by_frames_or_a_quiet_stream() {
        let mut c = Config::new(1, Rank::new(1), 2);
        c.peer_hold = true;
        let mut h = Hold::new(&c);
        let mut table = TimerTable::new(2);
        let place = table.add_stream(Rank::new(0));
        let mut events = VecDeque::new();
        let t0 = Instant::now();
        assert!(!h.takes(false) && h.takes(true));
        h.push(delivered(0), Seq::new(10));
        assert!(h.takes(false), "behind a held message");
        h.push(delivered(1), Seq::new(20));
        assert_eq!(h.find(1, 3), Some(&vec![1; 3]));
        assert_eq!(h.find(1, 4), None);
        h.release(t0, Seq::new(5), &mut table.stream(place), &mut events);
        assert!(events.is_empty());
        assert_eq!(
            table.stream(place).get(StreamTimer::Hold),
            Some(t0 + PEER_HOLD_WAIT)
        );
        // By frames: the first only.
        h.release(t0, Seq::new(10), &mut table.stream(place), &mut events);
        assert_eq!(events.len(), 1);
        // By a quiet stream: the rest, and the timer stops.
        let t1 = t0 + PEER_HOLD_WAIT;
        h.release(t1, Seq::new(10), &mut table.stream(place), &mut events);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1], delivered(1));
        assert!(!table.stream(place).is_armed(StreamTimer::Hold));
        h.push(delivered(2), Seq::new(30));
        h.release_all(&mut table.stream(place), &mut events);
        assert_eq!(events.len(), 3);
    }
}
