//! The host ring as a specification: every rank gets every message whole and in order, a full
//! ring holds its writer, and a dead rank, a stale or foreign segment or a wrong call order is a
//! typed error, never a hang.

use std::path::PathBuf;

use super::*;
use proptest::prelude::*;

/// Local rank `local` (rank `local` of the job) attaches with the default wait.
fn attach(
    path: &Path,
    layout: Layout,
    world: u16,
    local: usize,
    timeout: Duration,
) -> Result<HostRing, HostRingError> {
    HostRing::attach(
        path,
        layout,
        world,
        local,
        Rank::new(local as u16),
        Wait::default(),
        timeout,
    )
}

fn temp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "ethbcast-smp-test-{}-{name}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// A ring forged by another local user (issue 20, item 7): `nobody` writes a well-formed
/// segment (a real ring's bytes, its owner's process alive) at a job's name before the job
/// makes it. A local rank of the job must refuse it at once, without registering in it
/// (the forger would see the rank and could then release it into its own ring), and the
/// job's owner must neither use nor remove it. Needs root (to be two users); skips without
/// it unless `ETHBCAST_REQUIRE_NETNS=1`.
#[test]
fn a_ring_forged_by_another_user_is_refused() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    const NOBODY: u32 = 65534;
    let euid = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
    if euid != 0 {
        assert!(
            std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
            "needs root to act as a second local user (ETHBCAST_REQUIRE_NETNS=1)"
        );
        eprintln!("SKIPPED: a_ring_forged_by_another_user_is_refused: needs root");
        return;
    }
    let name = |tag: &str| {
        Path::new(SHM_DIR).join(format!(
            "ethbcast-smp-forged-{}-{tag}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ))
    };
    // The forger's bytes: a real, initialised ring whose owner (this process) is alive.
    let template = name("template");
    let world = SMALL.locals as u16;
    let timeout = Duration::from_millis(300);
    let real = HostRing::create(
        &template,
        SMALL,
        world,
        Rank::new(0),
        Wait::default(),
        timeout,
    )
    .unwrap();
    let forged = std::fs::read(&template).unwrap();
    drop(real);
    std::fs::remove_file(&template).unwrap();

    let path = name("job");
    let mut sh = std::process::Command::new("sh")
        .args(["-c", r#"umask 077 && cat > "$1""#, "sh"])
        .arg(&path)
        .uid(NOBODY)
        .gid(NOBODY)
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut sh.stdin.take().unwrap(), &forged).unwrap();
    assert!(
        sh.wait().unwrap().success(),
        "nobody writes the forged ring"
    );
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _cleanup = Remove(path.clone());
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), NOBODY);

    let t0 = Instant::now();
    match attach(&path, SMALL, world, 1, timeout) {
        Err(HostRingError::Shm(ShmError::Foreign { owner, .. })) => assert_eq!(owner, NOBODY),
        Err(e) => panic!("a local rank took the forged ring for its host's: {e}"),
        Ok(_) => panic!("a local rank attached to a ring forged by uid {NOBODY}"),
    }
    assert!(t0.elapsed() < timeout, "refused at once, not after waiting");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        forged,
        "the rank did not register in the forged ring"
    );
    match HostRing::create(&path, SMALL, world, Rank::new(0), Wait::default(), timeout) {
        Err(HostRingError::Shm(ShmError::Foreign { owner, .. })) => assert_eq!(owner, NOBODY),
        other => panic!("the owner replaced or used uid {NOBODY}'s file: {other:?}"),
    }
    assert!(path.exists(), "another user's file is not removed");
}

const SMALL: Layout = Layout {
    locals: 4,
    slots: 4,
    slot_payload: 256,
};

/// An owner and `layout.locals - 1` attached ranks (ranks 0..locals), joined.
fn host(name: &str, layout: Layout, timeout: Duration) -> (HostRing, Vec<HostRing>) {
    let path = temp(name);
    let world = layout.locals as u16;
    let mut owner =
        HostRing::create(&path, layout, world, Rank::new(0), Wait::default(), timeout).unwrap();
    let locals: Vec<_> = (1..layout.locals)
        .map(|j| {
            let path = path.clone();
            std::thread::spawn(move || {
                HostRing::attach(
                    &path,
                    layout,
                    world,
                    j,
                    Rank::new(j as u16),
                    Wait::default(),
                    timeout,
                )
            })
        })
        .collect();
    owner.wait_attached(&mut no_duty).unwrap();
    owner.joined().unwrap();
    let locals = locals
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert!(!path.exists(), "the name is removed once everyone attached");
    (owner, locals)
}

fn pattern(call: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (call * 31 + i * 7 + (i >> 8)) as u8)
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    /// A broadcast of `len` bytes from local rank `root`, or from a rank on another host.
    Bcast {
        root: Option<usize>,
        len: usize,
    },
    Barrier,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::option::of(0usize..4), 0usize..2000)
            .prop_map(|(root, len)| Op::Bcast { root, len }),
        1 => Just(Op::Barrier),
    ]
}

/// Every rank runs `ops` as MPI ranks would; returns what each received, in order.
fn run(ops: Vec<Op>, layout: Layout) -> Vec<Vec<Vec<u8>>> {
    const REMOTE: Rank = Rank::new(100);
    let (owner, locals) = host("oracle", layout, Duration::from_secs(20));
    let mut threads = Vec::new();
    for mut ring in std::iter::once(owner).chain(locals) {
        let ops = ops.clone();
        threads.push(std::thread::spawn(move || {
            let me = ring.local();
            let mut got = Vec::new();
            for (call, op) in ops.iter().enumerate() {
                match *op {
                    Op::Bcast { root, len } => {
                        let data = pattern(call, len);
                        let root_rank = root.map_or(REMOTE, |r| Rank::new(r as u16));
                        if root == Some(me) || (root.is_none() && me == 0) {
                            ring.publish(root_rank, &data, &mut no_duty).unwrap();
                            got.push(data);
                        } else if me == 0 {
                            let mut v = Vec::new();
                            ring.read(root_rank, Sink::Vec(&mut v), &mut no_duty)
                                .unwrap();
                            got.push(v);
                        } else {
                            let mut buf = vec![0xEE; len];
                            ring.read(root_rank, Sink::Buf(&mut buf), &mut no_duty)
                                .unwrap();
                            got.push(buf);
                        }
                    }
                    Op::Barrier if me == 0 => {
                        ring.await_arrivals(&mut no_duty).unwrap();
                        ring.release(&mut no_duty).unwrap();
                    }
                    Op::Barrier => {
                        ring.arrive().unwrap();
                        ring.await_release(&mut no_duty).unwrap();
                    }
                }
            }
            ring.flush(&mut no_duty).unwrap();
            got
        }));
    }
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Against the oracle "every rank gets every message, whole and in call order":
    /// messages of 0 to 8 slots through a ring of 4 slots, from the owner, from local
    /// roots and from other hosts, mixed with barriers.
    #[test]
    fn every_rank_gets_every_message_whole_and_in_order(ops in proptest::collection::vec(op(), 1..40)) {
        let got = run(ops.clone(), SMALL);
        let want: Vec<Vec<u8>> = ops
            .iter()
            .enumerate()
            .filter_map(|(call, op)| match *op {
                Op::Bcast { len, .. } => Some(pattern(call, len)),
                Op::Barrier => None,
            })
            .collect();
        for (rank, g) in got.iter().enumerate() {
            prop_assert_eq!(g, &want, "rank {}", rank);
        }
    }
}

#[test]
fn a_long_run_of_large_messages_wraps_the_default_ring_many_times() {
    let ops: Vec<Op> = (0..60)
        .map(|i| Op::Bcast {
            root: (i % 5 != 4).then_some(i % 4),
            len: 65536 + i * 3,
        })
        .collect();
    let got = run(ops, Layout::new(4));
    for g in &got {
        assert_eq!(g.len(), 60);
        for (i, m) in g.iter().enumerate() {
            assert_eq!(m, &pattern(i, 65536 + i * 3), "message {i}");
        }
    }
}

#[test]
fn hosts_are_numbered_by_their_lowest_rank() {
    let h = Hosts::from_labels(&["b", "a", "b", "c", "a"]).unwrap();
    assert_eq!(h.size(), 5);
    assert_eq!(h.count(), 3);
    assert_eq!(h.host(Rank::new(0)), Some(0));
    assert_eq!(h.host(Rank::new(1)), Some(1));
    assert_eq!(h.host(Rank::new(3)), Some(2));
    assert_eq!(h.host(Rank::new(5)), None);
    assert_eq!(h.ranks_on(0), &[0, 2].map(Rank::new));
    assert_eq!(h.ranks_on(1), &[1, 4].map(Rank::new));
    assert_eq!(h.local_index(Rank::new(4)), Some(1));
    assert_eq!(h.local_index(Rank::new(3)), Some(0));
    assert!(h.shares_hosts());
    let b = Hosts::blocks(10, 4).unwrap();
    assert_eq!(b.count(), 3);
    assert_eq!(b.ranks_on(2), &[8, 9].map(Rank::new));
    assert!(!Hosts::blocks(3, 1).unwrap().shares_hosts());
    assert!(Hosts::blocks(3, 0).is_err());
    assert!(Hosts::from_labels::<u8>(&[]).is_err());
}

#[test]
fn a_buffer_of_another_length_is_left_alone_and_the_ring_goes_on() {
    let (mut owner, mut locals) = host("length", SMALL, Duration::from_secs(5));
    owner
        .publish(Rank::new(0), &pattern(1, 700), &mut no_duty)
        .unwrap();
    owner
        .publish(Rank::new(0), &pattern(2, 10), &mut no_duty)
        .unwrap();
    let mut short = vec![7u8; 50];
    let e = locals[0]
        .read(Rank::new(0), Sink::Buf(&mut short), &mut no_duty)
        .unwrap_err();
    assert!(
        matches!(
            e,
            HostRingError::Length {
                root,
                got: 700,
                want: 50
            } if root == Rank::new(0)
        ),
        "{e}"
    );
    assert_eq!(short, vec![7u8; 50]);
    let mut next = vec![0u8; 10];
    locals[0]
        .read(Rank::new(0), Sink::Buf(&mut next), &mut no_duty)
        .unwrap();
    assert_eq!(next, pattern(2, 10));
}

#[test]
fn collectives_in_different_orders_are_reported_not_delivered() {
    let (mut owner, mut locals) = host("order", SMALL, Duration::from_secs(5));
    owner.publish(Rank::new(0), b"data", &mut no_duty).unwrap();
    locals[0].arrive().unwrap();
    let e = locals[0].await_release(&mut no_duty).unwrap_err();
    assert!(e.to_string().contains("same order"), "{e}");
    let mut buf = [0u8; 4];
    let e = locals[1]
        .read(Rank::new(3), Sink::Buf(&mut buf), &mut no_duty)
        .unwrap_err();
    assert!(e.to_string().contains("root 3"), "{e}");
}

/// Garbage in a slot's header (a crashed or buggy writer) gives an error, never a read
/// outside the slot or a panic.
#[test]
fn corrupt_entries_are_refused() {
    let corruptions: [(usize, u64); 5] = [
        (S_LEN, 1 << 40),
        (S_LEN, 300),
        (S_OFFSET, 64),
        (S_TOTAL, u64::MAX),
        (S_KIND, 99),
    ];
    for (field, value) in corruptions {
        let (mut owner, mut locals) = host("corrupt", SMALL, Duration::from_secs(5));
        owner
            .publish(Rank::new(0), &pattern(0, 600), &mut no_duty)
            .unwrap();
        let slot = owner.layout.slot(0);
        owner
            .word(slot + field)
            .unwrap()
            .store(value, Ordering::Relaxed);
        let mut v = Vec::new();
        let e = locals[0]
            .read(Rank::new(0), Sink::Vec(&mut v), &mut no_duty)
            .unwrap_err();
        assert!(
            matches!(e, HostRingError::Protocol(_)),
            "field {field}: {e}"
        );
    }
    // A stamp ahead of the reader: the slot was overwritten.
    let (owner, mut locals) = host("lapped", SMALL, Duration::from_secs(5));
    let slot = owner.layout.slot(0);
    owner
        .word(slot + S_STAMP)
        .unwrap()
        .store(5, Ordering::Release);
    let e = locals[0]
        .read(Rank::new(0), Sink::Vec(&mut Vec::new()), &mut no_duty)
        .unwrap_err();
    assert!(e.to_string().contains("overwritten"), "{e}");
}

#[test]
fn a_dead_rank_stops_the_writer_with_an_error_not_the_timeout() {
    let (mut owner, locals) = host("dead", SMALL, Duration::from_secs(20));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let at = owner.layout.cursor(2);
    owner
        .word(at + L_PID)
        .unwrap()
        .store(u64::from(dead), Ordering::Relaxed);
    let t0 = Instant::now();
    let mut result = Ok(());
    for i in 0..=SMALL.slots {
        result = owner.publish(Rank::new(0), &pattern(i, 8), &mut no_duty);
        if result.is_err() {
            break;
        }
    }
    let e = result.unwrap_err();
    assert!(matches!(e, HostRingError::RankGone { rank: 2, .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    drop(locals);
}

/// The ring is bounded: a writer a whole ring ahead waits, and a slot is reused only
/// once every attached rank has read it (the slowest cursor frees it, not the first).
#[test]
fn a_full_ring_holds_the_writer_until_every_rank_has_read() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let (owner, mut locals) = host("bounded", SMALL, Duration::from_secs(10));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let written = Arc::clone(&written);
        let mut owner = owner;
        std::thread::spawn(move || {
            for i in 0..=SMALL.slots {
                owner
                    .publish(Rank::new(0), &pattern(i, 100), &mut no_duty)
                    .unwrap();
                written.fetch_add(1, Ordering::SeqCst);
            }
            owner
        })
    };
    let settle = || std::thread::sleep(Duration::from_millis(100));
    settle();
    assert_eq!(
        written.load(Ordering::SeqCst),
        SMALL.slots,
        "one entry per slot, no more"
    );
    // All but the slowest rank read the oldest entry: its slot stays taken.
    let mut buf = vec![0u8; 100];
    for l in &mut locals[1..] {
        l.read(Rank::new(0), Sink::Buf(&mut buf), &mut no_duty)
            .unwrap();
        assert_eq!(buf, pattern(0, 100));
    }
    settle();
    assert_eq!(written.load(Ordering::SeqCst), SMALL.slots);
    locals[0]
        .read(Rank::new(0), Sink::Buf(&mut buf), &mut no_duty)
        .unwrap();
    assert_eq!(buf, pattern(0, 100));
    let _owner = writer.join().unwrap();
    assert_eq!(written.load(Ordering::SeqCst), SMALL.slots + 1);
    // Every rank still reads the rest whole, the last one from the reused slot.
    for l in &mut locals {
        for i in 1..=SMALL.slots {
            l.read(Rank::new(0), Sink::Buf(&mut buf), &mut no_duty)
                .unwrap();
            assert_eq!(buf, pattern(i, 100), "rank {} entry {i}", l.local());
        }
    }
}

/// One copy of each message per host: the segment grows by one cursor block per rank, the
/// ring's bytes do not depend on how many ranks read it.
#[test]
fn the_segment_holds_one_ring_and_a_cursor_block_per_rank() {
    let (owner, _locals) = host("size", SMALL, Duration::from_secs(5));
    assert_eq!(owner.seg.len(), SMALL.segment_bytes());
    let two = Layout { locals: 2, ..SMALL };
    assert_eq!(SMALL.ring_bytes(), two.ring_bytes());
    assert_eq!(
        SMALL.segment_bytes() - two.segment_bytes(),
        2 * CURSOR_BYTES
    );
}

#[test]
fn a_detached_rank_no_longer_holds_the_ring() {
    let (mut owner, mut locals) = host("detach", SMALL, Duration::from_secs(2));
    for mut l in locals.drain(..) {
        l.detach().unwrap();
    }
    for i in 0..3 * SMALL.slots {
        owner
            .publish(Rank::new(0), &pattern(i, 300), &mut no_duty)
            .unwrap();
    }
}

#[test]
fn waits_end_at_the_timeout_with_an_error() {
    let (_owner, mut locals) = host("timeout", SMALL, Duration::from_millis(100));
    let t0 = Instant::now();
    let e = locals[0]
        .read(Rank::new(0), Sink::Vec(&mut Vec::new()), &mut no_duty)
        .unwrap_err();
    assert!(matches!(e, HostRingError::Timeout { .. }), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn duties_run_while_the_owner_waits() {
    let (mut owner, _locals) = host("duty", SMALL, Duration::from_millis(50));
    let mut runs = 0;
    let e = owner
        .await_arrivals(&mut || -> Result<(), HostRingError> {
            runs += 1;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(e, HostRingError::Timeout { .. }), "{e}");
    assert!(runs >= 5, "the duty ran {runs} times in 50 ms");
}

#[test]
fn a_stale_segment_of_a_dead_owner_is_replaced() {
    let path = temp("stale");
    let layout = Layout::new(2);
    // A segment as a crashed job leaves it: complete, joined, its owner gone.
    {
        let stale = HostRing::create(
            &path,
            layout,
            2,
            Rank::new(0),
            Wait::default(),
            Duration::from_secs(1),
        )
        .unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        stale
            .word(H_OWNER_PID)
            .unwrap()
            .store(u64::from(dead), Ordering::Relaxed);
        stale
            .word(H_STATE)
            .unwrap()
            .store(STATE_JOINED, Ordering::Release);
        std::mem::forget(stale);
    }
    let local = {
        let path = path.clone();
        std::thread::spawn(move || attach(&path, layout, 2, 1, Duration::from_secs(5)))
    };
    std::thread::sleep(Duration::from_millis(30));
    let mut owner = HostRing::create(
        &path,
        layout,
        2,
        Rank::new(0),
        Wait::default(),
        Duration::from_secs(5),
    )
    .unwrap();
    owner.wait_attached(&mut no_duty).unwrap();
    owner.joined().unwrap();
    let mut local = local.join().unwrap().unwrap();
    owner.publish(Rank::new(0), b"fresh", &mut no_duty).unwrap();
    let mut buf = [0u8; 5];
    local
        .read(Rank::new(0), Sink::Buf(&mut buf), &mut no_duty)
        .unwrap();
    assert_eq!(&buf, b"fresh");
}

#[test]
fn a_segment_of_another_geometry_or_a_taken_block_is_refused() {
    let path = temp("layout");
    let mut owner = HostRing::create(
        &path,
        SMALL,
        4,
        Rank::new(0),
        Wait::default(),
        Duration::from_secs(1),
    )
    .unwrap();
    let other = Layout { locals: 3, ..SMALL };
    let e = attach(&path, other, 4, 1, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, HostRingError::Layout { .. }), "{e}");
    let e = attach(&path, SMALL, 5, 1, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, HostRingError::Layout { .. }), "{e}");
    owner
        .word(owner.layout.cursor(2) + L_RANK)
        .unwrap()
        .store(8, Ordering::Relaxed);
    let e = attach(&path, SMALL, 4, 2, Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(e, HostRingError::SlotTaken { holder: 7, .. }),
        "{e}"
    );
    owner.failed().unwrap();
    let e = attach(&path, SMALL, 4, 1, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(e, HostRingError::Timeout { .. }), "{e}");
}
