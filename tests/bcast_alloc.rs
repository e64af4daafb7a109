//! A broadcast allocates nothing in steady state, at the root or at a receiver, with either
//! hardware algorithm, in both forms of the call: `bcast` on a `Vec` passed to every call
//! (the root lends it, a receiver's capacity takes the message) and `bcast_into` on a slice
//! of the length every member agrees on. A length that differs is a typed error that leaves
//! the buffer alone.
//!
//! The members run as threads of this process on an in-process link whose frames live in
//! fixed slots (the link allocates nothing per frame), and each thread counts its own
//! allocations with the counting allocator. Before the count starts, the warm-up grows what a
//! member keeps to the deepest the measured rounds can need: it loses frames, so that the
//! repair paths have run, and in one round every receiver lets a root's whole burst of
//! messages arrive before it receives the first, so that the queue of complete messages
//! waiting for their receive has held a whole burst.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use ethbcast::{Algorithm, Group, GroupError, GroupOptions, Link, LinkError, MacAddr, Rank};
use ethbcast_sys::alloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// Largest PDU of the in-process link.
const MTU: usize = 1500;
/// Frames a port holds before it drops (the protocol repairs what is dropped).
const SLOTS: usize = 1024;
/// A lossy port loses every this many-th frame it sends.
const LOSE_EVERY: u64 = 29;

/// Frames waiting at one port, in fixed slots.
struct Queue {
    bytes: Vec<u8>,
    meta: Vec<(MacAddr, usize)>,
    head: usize,
    len: usize,
}

struct Port {
    mac: MacAddr,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Whether it loses frames it sends, and how many it sent.
    lossy: AtomicBool,
    sent: AtomicU64,
    /// Broadcasts its member has made as the root.
    rooted: AtomicU64,
}

/// A switch between the threads of this process: every frame to a group or broadcast
/// address reaches every other port, a frame to a station address reaches that station.
struct Hub {
    ports: Vec<Port>,
}

impl Hub {
    fn new(n: usize) -> Arc<Hub> {
        let ports = (0..n)
            .map(|i| Port {
                mac: MacAddr([0x02, 0, 0, 0, 0x0a, i as u8]),
                queue: Mutex::new(Queue {
                    bytes: vec![0; SLOTS * MTU],
                    meta: vec![(MacAddr([0; 6]), 0); SLOTS],
                    head: 0,
                    len: 0,
                }),
                ready: Condvar::new(),
                lossy: AtomicBool::new(false),
                sent: AtomicU64::new(0),
                rooted: AtomicU64::new(0),
            })
            .collect();
        Arc::new(Hub { ports })
    }

    fn macs(&self) -> Vec<MacAddr> {
        self.ports.iter().map(|p| p.mac).collect()
    }
}

struct HubLink {
    hub: Arc<Hub>,
    me: usize,
}

impl Link for HubLink {
    fn local_mac(&self) -> MacAddr {
        self.hub.ports[self.me].mac
    }

    fn max_pdu(&self) -> usize {
        MTU
    }

    fn send(&mut self, dst: MacAddr, pdu: &[u8]) -> Result<(), LinkError> {
        let src = self.local_mac();
        let me = &self.hub.ports[self.me];
        let sent = me.sent.fetch_add(1, Ordering::Relaxed);
        if me.lossy.load(Ordering::Relaxed) && sent.is_multiple_of(LOSE_EVERY) {
            return Ok(());
        }
        let group = dst.0[0] & 1 == 1;
        for (i, port) in self.hub.ports.iter().enumerate() {
            if i == self.me || !(group || dst == port.mac) {
                continue;
            }
            let mut q = port.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if q.len == SLOTS {
                continue;
            }
            let slot = (q.head + q.len) % SLOTS;
            q.bytes[slot * MTU..slot * MTU + pdu.len()].copy_from_slice(pdu);
            q.meta[slot] = (src, pdu.len());
            q.len += 1;
            port.ready.notify_one();
        }
        Ok(())
    }

    fn join_group(&mut self, _group: MacAddr) -> Result<(), LinkError> {
        Ok(())
    }

    fn leave_group(&mut self, _group: MacAddr) -> Result<(), LinkError> {
        Ok(())
    }

    fn recv_ready(&mut self, f: &mut dyn FnMut(MacAddr, &[u8])) -> Result<usize, LinkError> {
        let port = &self.hub.ports[self.me];
        let mut q = port.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let n = q.len;
        while q.len > 0 {
            let (src, len) = q.meta[q.head];
            f(src, &q.bytes[q.head * MTU..q.head * MTU + len]);
            q.head = (q.head + 1) % SLOTS;
            q.len -= 1;
        }
        Ok(n)
    }

    fn wait_ready(&mut self, wait: Duration) -> Result<bool, LinkError> {
        let port = &self.hub.ports[self.me];
        let q = port.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if q.len > 0 {
            return Ok(true);
        }
        let (q, _) = port
            .ready
            .wait_timeout(q, wait)
            .unwrap_or_else(PoisonError::into_inner);
        Ok(q.len > 0)
    }
}

/// A member's view of the hub beside its link: whether its port loses frames, and how many
/// broadcasts each member has made as the root.
struct Ports {
    hub: Arc<Hub>,
    me: usize,
}

impl Ports {
    fn set_lossy(&self, lossy: bool) {
        self.hub.ports[self.me]
            .lossy
            .store(lossy, Ordering::Relaxed);
    }

    /// Counts a broadcast this member made as the root.
    fn rooted(&self) {
        self.hub.ports[self.me]
            .rooted
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Broadcasts `root` has made so far.
    fn rooted_by(&self, root: Rank) -> u64 {
        self.hub.ports[usize::from(root.get())]
            .rooted
            .load(Ordering::SeqCst)
    }
}

/// Runs `member` on every port of a hub of `n`, each in its own thread with its group, and
/// returns what each gave, by rank.
fn run_group<T: Send + 'static>(
    n: usize,
    member: impl Fn(&mut Group, &Ports) -> Result<T, GroupError> + Send + Sync + 'static,
) -> Vec<T> {
    let hub = Hub::new(n);
    let member = Arc::new(member);
    let threads: Vec<_> = (0..n)
        .map(|me| {
            let (hub, member) = (hub.clone(), member.clone());
            std::thread::spawn(move || -> Result<T, GroupError> {
                let opts = GroupOptions {
                    timeout: Duration::from_secs(20),
                    ..GroupOptions::insecure()
                };
                let link = Box::new(HubLink {
                    hub: hub.clone(),
                    me,
                });
                let mut g = Group::from_link(link, hub.macs(), opts)?;
                let out = member(&mut g, &Ports { hub, me })?;
                g.flush()?;
                // Keep answering repairs while the others finish.
                for _ in 0..20 {
                    g.progress(Duration::from_millis(5))?;
                }
                Ok(out)
            })
        })
        .collect();
    threads
        .into_iter()
        .enumerate()
        .map(|(rank, t)| match t.join() {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => panic!("rank {rank}: {e}"),
            Err(_) => panic!("rank {rank} panicked"),
        })
        .collect()
}

/// Byte `i` of root `root`'s message in round `round`.
fn byte(root: Rank, round: usize, i: usize) -> u8 {
    (i as u8) ^ (root.get() as u8).wrapping_mul(37) ^ (round as u8)
}

/// Whether `got` is root `root`'s message of round `round` (compared without allocating).
fn is_message(got: &[u8], root: Rank, round: usize, len: usize) -> bool {
    got.len() == len
        && got
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(root, round, i))
}

const SIZES: [usize; 4] = [8, 1000, 4096, 65_536];
const ALGORITHMS: [Algorithm; 2] = [Algorithm::Simple, Algorithm::PushPull];

/// When receivers call, against their root.
#[derive(Clone, Copy, PartialEq)]
enum Late {
    /// At once.
    No,
    /// A moment after the root, so that its message is there before their receive.
    EachCall,
    /// Once the root has made its whole burst of simple broadcasts (every size, both forms),
    /// keeping the group going meanwhile: every message of the burst is complete before the
    /// first receive. No more can wait: every member makes its own burst between receiving
    /// this one and the root's next, so the next begins after all have received this one.
    WholeBurst,
}

/// Broadcasts one root makes in a row with one algorithm.
const BURST: u64 = 2 * SIZES.len() as u64;

/// One round: every root, algorithm and size, with both forms of the call; `late` says when
/// receivers call, and `made` counts each root's broadcasts so far. Returns the broadcasts
/// made, or the first wrong message.
fn round(
    g: &mut Group,
    ports: &Ports,
    round: usize,
    late: Late,
    made: &mut [u64],
    buf: &mut Vec<u8>,
    fixed: &mut [u8],
) -> Result<u64, String> {
    let mut calls = 0;
    for algo in ALGORITHMS {
        for root in Rank::all(g.size()) {
            let me = g.rank() == root;
            let mine = &mut made[usize::from(root.get())];
            if late == Late::WholeBurst && algo == Algorithm::Simple && !me {
                let whole = *mine + BURST;
                let since = std::time::Instant::now();
                while ports.rooted_by(root) < whole {
                    if since.elapsed() > Duration::from_secs(20) {
                        return Err(format!("{root} did not make its burst"));
                    }
                    g.progress(Duration::from_millis(1))
                        .map_err(|e| e.to_string())?;
                }
            }
            *mine += BURST;
            for len in SIZES {
                if late == Late::EachCall && !me {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if me {
                    buf.clear();
                    buf.extend((0..len).map(|i| byte(root, round, i)));
                }
                g.bcast_with(root, buf, algo).map_err(|e| e.to_string())?;
                if me {
                    ports.rooted();
                }
                if !is_message(buf, root, round, len) {
                    return Err(format!("bcast from {root}, {len} B, {algo:?}: wrong bytes"));
                }
                let slice = &mut fixed[..len];
                if me {
                    slice
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, b)| *b = byte(root, round, i));
                } else {
                    slice.fill(0);
                }
                g.bcast_into_with(root, slice, algo)
                    .map_err(|e| e.to_string())?;
                if me {
                    ports.rooted();
                }
                if !is_message(slice, root, round, len) {
                    return Err(format!(
                        "bcast_into from {root}, {len} B, {algo:?}: wrong bytes"
                    ));
                }
                calls += 2;
            }
        }
    }
    Ok(calls)
}

#[test]
fn broadcasts_allocate_nothing_in_steady_state_at_the_root_or_a_receiver() {
    const WARM: usize = 4;
    const MEASURED: usize = 5;
    let counts = run_group(4, |g, ports| {
        let mut buf = Vec::new();
        let mut fixed = vec![0u8; SIZES[SIZES.len() - 1]];
        let mut made = vec![0u64; usize::from(g.size())];
        // Warm-up: with lost frames, with receivers late by a call, then by a whole burst,
        // then as measured.
        for r in 0..WARM {
            ports.set_lossy(r + 1 < WARM);
            let late = [Late::EachCall, Late::WholeBurst][..]
                .get(r)
                .copied()
                .unwrap_or(Late::No);
            if let Err(e) = round(g, ports, r, late, &mut made, &mut buf, &mut fixed) {
                return Ok(Err(e));
            }
        }
        let before = CountingAlloc::thread_allocations();
        let mut calls = 0;
        for r in WARM..WARM + MEASURED {
            match round(g, ports, r, Late::No, &mut made, &mut buf, &mut fixed) {
                Ok(c) => calls += c,
                Err(e) => return Ok(Err(e)),
            }
        }
        let allocations = CountingAlloc::thread_allocations() - before;
        Ok(Ok((calls, allocations)))
    });
    for (rank, c) in counts.into_iter().enumerate() {
        let (calls, allocations) = c.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(
            allocations, 0,
            "rank {rank} allocated {allocations} times in {calls} broadcasts of steady state"
        );
    }
}

/// The slice form takes exactly the root's length: a receiver whose buffer is shorter or
/// longer gets [`GroupError::Length`] with both lengths, its buffer untouched, and the group
/// goes on (the next call with the right length delivers).
#[test]
fn a_buffer_of_another_length_than_the_roots_is_a_length_error_and_stays_untouched() {
    let results = run_group(2, |g, _| {
        let mut seen = Vec::new();
        for (sent, given) in [(8usize, 16usize), (100, 10)] {
            if g.rank() == Rank::new(0) {
                let mut msg = vec![7u8; sent];
                g.bcast_into(Rank::new(0), &mut msg)?;
            } else {
                let mut mine = vec![0xAA; given];
                let r = g.bcast_into(Rank::new(0), &mut mine);
                seen.push((
                    r.err().map(|e| match e {
                        GroupError::Length { root, got, want } => Ok((root, got, want)),
                        e => Err(e.to_string()),
                    }),
                    mine.iter().all(|&b| b == 0xAA),
                ));
            }
        }
        let mut right = vec![if g.rank() == Rank::new(0) { 9u8 } else { 0 }; 32];
        g.bcast_into(Rank::new(0), &mut right)?;
        Ok((seen, right))
    });
    let (seen, right) = &results[1];
    assert_eq!(
        seen,
        &vec![
            (Some(Ok((Rank::new(0), 8, 16))), true),
            (Some(Ok((Rank::new(0), 100, 10))), true)
        ]
    );
    assert_eq!(
        right,
        &vec![9u8; 32],
        "the group goes on after a length error"
    );
}
