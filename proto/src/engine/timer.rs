//! The engine's timers: one table that holds every deadline of the engine and answers
//! [`Engine::poll_timeout`](super::Engine::poll_timeout).
//!
//! A timer is named by a [`Timer`]: one of the four of a receive stream ([`StreamTimer`]), the
//! retransmission timer of a destination of this member's broadcasts, or the poll of the
//! designated receiver for a lost pull request. The receive streams and the sender keep no
//! deadline of their own: the engine hands them the table (a stream a [`StreamTimers`] view of
//! its own four) when it calls them, and asks the table which timers fired.
//!
//! **Layout.** Deadlines are nanoseconds from one instant (the first deadline ever set), either
//! side, so that a deadline takes 8 bytes. A stream's four deadlines have a place in a slab,
//! made with the stream; a destination's deadline has a place made with the destinations (at
//! the first broadcast): a member pays for the timers of what it has, not of every rank. Every
//! armed deadline is also in one ordered set, so that the earliest is found at once and a
//! timeout visits only what fired; a stream is there once, at its earliest deadline, so that
//! re-arming one of its timers to a later instant than another's touches the set not at all.
//!
//! **Invariants.** The ordered set holds exactly one entry per armed destination timer, one
//! for the armed pull timer, and one per stream with any armed timer, at the earliest of them.
//! A deadline is [`STOPPED`] if and only if its timer is not armed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::Rank;

/// A timer of a receive stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamTimer {
    /// The next acknowledgement (or, with a tree, report) is due. Lazy while the stream moves
    /// as the quiet timer of a tree's report (see `Acks::quiet`).
    Ack,
    /// The gaps gathered so far are asked for, or the missing frames asked for again.
    Nack,
    /// The last report to the tree's parent is sent again (a lost report, or a lagging
    /// subtree's keepalive).
    Report,
    /// Messages held back for fellows' requests are released (`EngineConfig::peer_hold`). Lazy:
    /// pushed back when it fires if the stream moved since it was armed.
    Hold,
}

impl StreamTimer {
    /// How many timers a stream has.
    const COUNT: usize = 4;
}

/// A timer of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A timer of the receive stream whose timers have this place (see
    /// [`TimerTable::add_stream`]).
    Stream(StreamPlace, StreamTimer),
    /// The retransmission timer of this destination of the member's broadcasts.
    Retransmit(Rank),
    /// The poll of the designated receiver for a pull request that may have been lost.
    Pull,
}

/// Where a receive stream's timers lie in the table (given when the stream is made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct StreamPlace(u32);

/// What the ordered set holds: a stream (at its earliest deadline), a destination, the pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    Stream(StreamPlace),
    Retransmit(Rank),
    Pull,
}

/// The deadline of a timer that is not armed.
const STOPPED: i64 = i64::MIN;

/// Every timer of one engine. See the module documentation.
#[derive(Debug)]
pub(crate) struct TimerTable {
    /// The instant the deadlines count from: the first deadline ever set.
    epoch: Option<Instant>,
    /// Each stream's deadlines, by place, with the root of the stream that has the place.
    streams: Vec<([i64; StreamTimer::COUNT], Rank)>,
    /// Places of streams that went away, for the next stream made.
    free: Vec<StreamPlace>,
    /// Each destination's retransmission deadline, by rank (empty until the destinations are
    /// made).
    retransmit: Vec<i64>,
    /// The pull poll's deadline.
    pull: i64,
    /// Every armed entry at its deadline (see the module's invariants).
    armed: BTreeSet<(i64, Entry)>,
    /// Room for one rank per member, kept between calls (see [`TimerTable::fired`]).
    fired: Vec<Rank>,
    /// Members in the group (the room `fired` is made with at its first use).
    size: usize,
}

impl TimerTable {
    /// The timers of an engine of a group of `size` members: none armed.
    pub(crate) fn new(size: u16) -> TimerTable {
        TimerTable {
            epoch: None,
            streams: Vec::new(),
            free: Vec::new(),
            retransmit: Vec::new(),
            pull: STOPPED,
            armed: BTreeSet::new(),
            fired: Vec::new(),
            size: usize::from(size),
        }
    }

    /// A place for the timers of `root`'s new receive stream, none of them armed.
    pub(crate) fn add_stream(&mut self, root: Rank) -> StreamPlace {
        match self.free.pop() {
            Some(p) => {
                self.streams[p.0 as usize] = ([STOPPED; StreamTimer::COUNT], root);
                p
            }
            None => {
                self.streams.push(([STOPPED; StreamTimer::COUNT], root));
                StreamPlace((self.streams.len() - 1) as u32)
            }
        }
    }

    /// Stops the timers of the stream at `place`, which goes away, and frees the place.
    pub(crate) fn remove_stream(&mut self, place: StreamPlace) {
        if let Some(at) = self.stream_earliest(place) {
            self.armed.remove(&(at, Entry::Stream(place)));
        }
        self.streams[place.0 as usize].0 = [STOPPED; StreamTimer::COUNT];
        self.free.push(place);
    }

    /// Makes a retransmission timer for every rank (not armed), once: the destinations are
    /// made at the member's first broadcast.
    pub(crate) fn add_retransmit(&mut self) {
        if self.retransmit.is_empty() {
            self.retransmit = vec![STOPPED; self.size];
        }
    }

    /// The view of the timers of the stream at `place`.
    pub(crate) fn stream(&mut self, place: StreamPlace) -> StreamTimers<'_> {
        StreamTimers { table: self, place }
    }

    /// When `timer` fires, if it is armed.
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.instant(self.deadline(timer))
    }

    /// Whether `timer` is armed.
    pub(crate) fn is_armed(&self, timer: Timer) -> bool {
        self.deadline(timer) != STOPPED
    }

    /// Whether `timer` is armed and its time has come by `now`.
    pub(crate) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// Arms `timer` to fire at `at` (or re-arms it). Deadlines more than 292 years from the
    /// first one are taken as 292 years.
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        let epoch = *self.epoch.get_or_insert(at);
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let at = if at >= epoch {
            nanos(at - epoch)
        } else {
            // Never `STOPPED`: one nanosecond later at most.
            (-nanos(epoch - at)).max(STOPPED + 1)
        };
        self.put(timer, at);
    }

    /// Arms `timer` at `at`, or stops it with `None`.
    pub(crate) fn set_or_stop(&mut self, timer: Timer, at: Option<Instant>) {
        match at {
            Some(at) => self.set(timer, at),
            None => self.stop(timer),
        }
    }

    /// Stops `timer`.
    pub(crate) fn stop(&mut self, timer: Timer) {
        self.put(timer, STOPPED);
    }

    /// The earliest deadline of any armed timer.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        let &(at, _) = self.armed.first()?;
        self.instant(at)
    }

    /// The roots of the streams with a timer due by `now`, in rank order (a list kept
    /// between calls, with room for every member: give it back with
    /// [`TimerTable::give_back`]).
    pub(crate) fn fired_streams(&mut self, now: Instant) -> Vec<Rank> {
        self.fired(now, |t, e| match e {
            Entry::Stream(p) => Some(t.streams[p.0 as usize].1),
            Entry::Retransmit(_) | Entry::Pull => None,
        })
    }

    /// The destinations whose retransmission timer is due by `now`, in rank order (as
    /// [`TimerTable::fired_streams`]).
    pub(crate) fn fired_retransmits(&mut self, now: Instant) -> Vec<Rank> {
        self.fired(now, |_, e| match e {
            Entry::Retransmit(r) => Some(r),
            Entry::Stream(_) | Entry::Pull => None,
        })
    }

    /// The ranks `rank_of` gives for the armed entries due by `now`, in rank order.
    fn fired(
        &mut self,
        now: Instant,
        rank_of: impl Fn(&TimerTable, Entry) -> Option<Rank>,
    ) -> Vec<Rank> {
        let mut fired = self.take_list();
        let Some(now) = self.nanos_of(now) else {
            return fired;
        };
        for &(at, e) in &self.armed {
            if at > now {
                break;
            }
            fired.extend(rank_of(self, e));
        }
        fired.sort_unstable();
        fired
    }

    /// Gives back a list of [`TimerTable::fired_streams`], for the next call.
    pub(crate) fn give_back(&mut self, list: Vec<Rank>) {
        if list.capacity() >= self.fired.capacity() {
            self.fired = list;
        }
    }

    /// An empty list, with the room the last one grew to (a list made with room for every
    /// member was 2 bytes per fellow at every member; few streams fire at once).
    fn take_list(&mut self) -> Vec<Rank> {
        let mut v = std::mem::take(&mut self.fired);
        v.clear();
        v
    }

    /// `now` in nanoseconds from the epoch, as far as any deadline is concerned (`None`: no
    /// deadline was ever set).
    fn nanos_of(&self, now: Instant) -> Option<i64> {
        let epoch = self.epoch?;
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        Some(if now >= epoch {
            nanos(now - epoch)
        } else {
            -nanos(epoch - now)
        })
    }

    /// The stored deadline of `timer`.
    fn deadline(&self, timer: Timer) -> i64 {
        match timer {
            Timer::Stream(p, k) => self.streams[p.0 as usize].0[k as usize],
            Timer::Retransmit(r) => self.retransmit.get(r.index()).copied().unwrap_or(STOPPED),
            Timer::Pull => self.pull,
        }
    }

    /// The earliest armed deadline of the stream at `place`.
    fn stream_earliest(&self, place: StreamPlace) -> Option<i64> {
        let at = self.streams[place.0 as usize].0;
        at.iter().copied().filter(|&n| n != STOPPED).min()
    }

    /// Stores `at` as `timer`'s deadline, keeping the ordered set in step.
    fn put(&mut self, timer: Timer, at: i64) {
        match timer {
            Timer::Stream(p, k) => {
                if self.streams[p.0 as usize].0[k as usize] == at {
                    return;
                }
                let before = self.stream_earliest(p);
                self.streams[p.0 as usize].0[k as usize] = at;
                let after = self.stream_earliest(p);
                if before != after {
                    self.move_entry(Entry::Stream(p), before, after);
                }
            }
            Timer::Retransmit(r) => {
                let Some(d) = self.retransmit.get_mut(r.index()) else {
                    return;
                };
                let before = std::mem::replace(d, at);
                if before != at {
                    let armed = |n: i64| (n != STOPPED).then_some(n);
                    self.move_entry(Entry::Retransmit(r), armed(before), armed(at));
                }
            }
            Timer::Pull => {
                let before = std::mem::replace(&mut self.pull, at);
                if before != at {
                    let armed = |n: i64| (n != STOPPED).then_some(n);
                    self.move_entry(Entry::Pull, armed(before), armed(at));
                }
            }
        }
    }

    /// Moves `entry` in the ordered set from `before` to `after` (either may be none).
    fn move_entry(&mut self, entry: Entry, before: Option<i64>, after: Option<i64>) {
        if let Some(b) = before {
            self.armed.remove(&(b, entry));
        }
        if let Some(a) = after {
            self.armed.insert((a, entry));
        }
    }

    /// The instant `nanos` from the epoch; `None` for [`STOPPED`].
    fn instant(&self, nanos: i64) -> Option<Instant> {
        if nanos == STOPPED {
            return None;
        }
        let epoch = self.epoch?;
        let d = Duration::from_nanos(nanos.unsigned_abs());
        Some(if nanos >= 0 { epoch + d } else { epoch - d })
    }
}

/// The timers of one receive stream, in its engine's table.
#[derive(Debug)]
pub(crate) struct StreamTimers<'a> {
    table: &'a mut TimerTable,
    place: StreamPlace,
}

impl StreamTimers<'_> {
    /// When `timer` fires, if it is armed.
    pub(crate) fn get(&self, timer: StreamTimer) -> Option<Instant> {
        self.table.get(Timer::Stream(self.place, timer))
    }

    /// Arms `timer` to fire at `at` (or re-arms it).
    pub(crate) fn set(&mut self, timer: StreamTimer, at: Instant) {
        self.table.set(Timer::Stream(self.place, timer), at)
    }

    /// Arms `timer` at `at`, or stops it with `None`.
    pub(crate) fn set_or_stop(&mut self, timer: StreamTimer, at: Option<Instant>) {
        self.table.set_or_stop(Timer::Stream(self.place, timer), at)
    }

    /// Stops `timer`.
    pub(crate) fn stop(&mut self, timer: StreamTimer) {
        self.table.stop(Timer::Stream(self.place, timer))
    }

    /// Whether `timer` is armed.
    pub(crate) fn is_armed(&self, timer: StreamTimer) -> bool {
        self.table.is_armed(Timer::Stream(self.place, timer))
    }

    /// Whether `timer` is armed and its time has come by `now`.
    pub(crate) fn is_expired(&self, timer: StreamTimer, now: Instant) -> bool {
        self.table.is_expired(Timer::Stream(self.place, timer), now)
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, Instant};

    use crate::Rank;

    use super::{StreamTimer, Timer, TimerTable};

    #[test]
    fn deadlines_either_side_of_the_first_come_back_exactly() {
        let t0 = Instant::now();
        let mut t = TimerTable::new(4);
        let s = t.add_stream(Rank::new(1));
        assert_eq!(t.next_timeout(), None);
        let mut v = t.stream(s);
        v.set(StreamTimer::Ack, t0 + Duration::from_millis(5));
        v.set(StreamTimer::Nack, t0 + Duration::from_nanos(1));
        v.set(
            StreamTimer::Hold,
            t0 + Duration::from_secs(100 * 365 * 86_400),
        );
        assert_eq!(v.get(StreamTimer::Ack), Some(t0 + Duration::from_millis(5)));
        assert_eq!(v.get(StreamTimer::Nack), Some(t0 + Duration::from_nanos(1)));
        assert!(v.is_expired(StreamTimer::Nack, t0 + Duration::from_nanos(1)));
        assert!(!v.is_expired(StreamTimer::Ack, t0 + Duration::from_millis(4)));
        assert!(!v.is_armed(StreamTimer::Report));
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_nanos(1)));
        let mut v = t.stream(s);
        v.stop(StreamTimer::Nack);
        assert_eq!(t.next_timeout(), Some(t0 + Duration::from_millis(5)));
        let mut v = t.stream(s);
        v.set_or_stop(StreamTimer::Ack, None);
        v.stop(StreamTimer::Hold);
        assert_eq!(t.next_timeout(), None);
        // Earlier than the epoch.
        t.set(Timer::Pull, t0 - Duration::from_millis(3));
        assert_eq!(t.get(Timer::Pull), Some(t0 - Duration::from_millis(3)));
    }

    #[test]
    fn the_earliest_of_every_kind_answers_and_only_what_fired_is_named() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = TimerTable::new(8);
        let a = t.add_stream(Rank::new(5));
        let b = t.add_stream(Rank::new(2));
        t.stream(a).set(StreamTimer::Nack, t0 + ms(4));
        t.stream(b).set(StreamTimer::Report, t0 + ms(6));
        // Destinations have no timers until they are made.
        t.set(Timer::Retransmit(Rank::new(3)), t0 + ms(1));
        assert_eq!(t.next_timeout(), Some(t0 + ms(4)));
        t.add_retransmit();
        t.set(Timer::Retransmit(Rank::new(3)), t0 + ms(2));
        t.set(Timer::Retransmit(Rank::new(1)), t0 + ms(9));
        t.set(Timer::Pull, t0 + ms(3));
        assert_eq!(t.next_timeout(), Some(t0 + ms(2)));
        let streams = t.fired_streams(t0 + ms(6));
        assert_eq!(streams, [Rank::new(2), Rank::new(5)], "in rank order");
        t.give_back(streams);
        let dests = t.fired_retransmits(t0 + ms(6));
        assert_eq!(dests, [Rank::new(3)]);
        t.give_back(dests);
        assert!(t.fired_streams(t0 + ms(3)).is_empty());
        // A stream's later timer moves nothing; its earliest does.
        t.stream(a).set(StreamTimer::Hold, t0 + ms(8));
        assert_eq!(t.fired_streams(t0 + ms(4)), [Rank::new(5)]);
        t.stream(a).stop(StreamTimer::Nack);
        assert!(t.fired_streams(t0 + ms(4)).is_empty());
        assert_eq!(t.fired_streams(t0 + ms(8)), [Rank::new(2), Rank::new(5)]);
        // A stream that goes away takes its timers along, and its place is made again.
        t.remove_stream(a);
        assert_eq!(t.fired_streams(t0 + ms(8)), [Rank::new(2)]);
        let c = t.add_stream(Rank::new(7));
        assert_eq!(c, a);
        assert!(!t.stream(c).is_armed(StreamTimer::Hold));
        t.stop(Timer::Retransmit(Rank::new(3)));
        t.stop(Timer::Pull);
        t.stream(b).stop(StreamTimer::Report);
        assert_eq!(t.next_timeout(), Some(t0 + ms(9)));
    }
}
