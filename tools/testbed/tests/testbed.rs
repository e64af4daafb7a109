//! Integration tests of the network-namespace test-bed.
//!
//! They need root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2/nftables. With
//! `ETHBCAST_REQUIRE_NETNS=1` (CI) a missing privilege or tool fails the test;
//! otherwise the test prints "SKIPPED: reason" to stderr and passes.
//!
//! Traffic is raw Ethernet (EtherType 0x88B5, the one the loss rules match),
//! sent and received with AF_PACKET sockets opened by threads inside the host
//! namespaces (`netns::spawn_in`), so it never leaves namespaces created here.
//! Each test uses its own prefix (test tag + pid) so tests run in parallel.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ethbcast_testbed::netns;
use ethbcast_testbed::{Host, Rate, Testbed, TestbedConfig, TestbedError, BRIDGE, ETHERTYPE};
use pnet_datalink::Channel;

const BROADCAST: [u8; 6] = [0xff; 6];
const MAGIC: &[u8; 8] = b"EBCTBTST";

fn netns_available(test: &str, need_nft: bool) -> bool {
    ethbcast_testbed::netns_available(test, need_nft)
}

/// A short prefix unique to this test and process.
fn prefix(tag: &str) -> String {
    format!("t{tag}{:x}", std::process::id() & 0xfff)
}

fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// `ip -n NS -j ARGS`, parsed.
fn ip_json(ns: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new("ip")
        .args(["-n", ns, "-j"])
        .args(args)
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "ip -n {ns} -j {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ip JSON")
}

fn tc_qdisc(ns: &str, dev: &str) -> String {
    let out = Command::new("tc")
        .args(["-n", ns, "qdisc", "show", "dev", dev])
        .output()
        .expect("run tc");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u32) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0);
    f
}

fn open_eth0() -> (
    Box<dyn pnet_datalink::DataLinkSender>,
    Box<dyn pnet_datalink::DataLinkReceiver>,
) {
    let iface = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == "eth0")
        .expect("eth0 in this namespace");
    let config = pnet_datalink::Config {
        read_timeout: Some(Duration::from_millis(20)),
        promiscuous: false,
        ..Default::default()
    };
    match pnet_datalink::channel(&iface, config).expect("AF_PACKET channel") {
        Channel::Ethernet(tx, rx) => (tx, rx),
        _ => panic!("unexpected channel type"),
    }
}

/// A receiver thread in `host`'s namespace collecting the sequence numbers of
/// test frames from `from` addressed to `host` (its MAC or broadcast), split
/// into (broadcast, unicast).
struct Receiver {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(BTreeSet<u32>, BTreeSet<u32>)>,
}

impl Receiver {
    fn start(host: &Host, from: [u8; 6]) -> Receiver {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let me = host.mac;
        let stop2 = stop.clone();
        let handle = netns::spawn_in(&host.netns, move || {
            let (_tx, mut rx) = open_eth0();
            ready_tx.send(()).unwrap();
            let (mut bcast, mut ucast) = (BTreeSet::new(), BTreeSet::new());
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                match rx.next() {
                    Ok(f) => {
                        if f.len() >= 26
                            && f[6..12] == from
                            && f[12..14] == ETHERTYPE.to_be_bytes()
                            && &f[14..22] == MAGIC
                        {
                            let seq = u32::from_be_bytes(f[22..26].try_into().unwrap());
                            if f[0..6] == BROADCAST {
                                bcast.insert(seq);
                            } else if f[0..6] == me {
                                ucast.insert(seq);
                            }
                        }
                    }
                    Err(_) if stop2.load(Ordering::SeqCst) => break,
                    Err(_) => {}
                }
            }
            (bcast, ucast)
        })
        .expect("spawn receiver");
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("receiver ready");
        Receiver { stop, handle }
    }

    fn finish(self) -> (BTreeSet<u32>, BTreeSet<u32>) {
        std::thread::sleep(Duration::from_millis(150));
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().expect("receiver thread")
    }
}

/// Sends `count` test frames (seq `first..first+count`) from `host` to `dst`.
fn send(host: &Host, dst: [u8; 6], first: u32, count: u32) {
    let src = host.mac;
    netns::run_in(&host.netns, move || {
        let (mut tx, _rx) = open_eth0();
        for seq in first..first + count {
            tx.send_to(&frame(dst, src, seq), None)
                .expect("send_to result")
                .expect("send frame");
            if seq % 16 == 15 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
    .expect("enter sender namespace");
}

/// Sends `count` frames from host `from` to `dst`; returns what each of the
/// `to` hosts received (broadcast seqs, unicast seqs).
fn exchange(
    tb: &Testbed,
    from: usize,
    dst: [u8; 6],
    to: &[usize],
    first: u32,
    count: u32,
) -> Vec<(BTreeSet<u32>, BTreeSet<u32>)> {
    let src = tb.hosts()[from].mac;
    let receivers: Vec<Receiver> = to
        .iter()
        .map(|&i| Receiver::start(&tb.hosts()[i], src))
        .collect();
    send(&tb.hosts()[from], dst, first, count);
    receivers.into_iter().map(Receiver::finish).collect()
}

fn all(first: u32, count: u32) -> BTreeSet<u32> {
    (first..first + count).collect()
}

#[test]
fn up3_creates_hosts_with_eth0_and_distinct_macs_and_down_removes_them() {
    if !netns_available("up3_creates_hosts", false) {
        return;
    }
    let p = prefix("up");
    let tb = Testbed::up(&TestbedConfig::new(3).prefix(&p)).expect("up");
    assert_eq!(tb.hosts().len(), 3);
    let mut macs = BTreeSet::new();
    for (i, h) in tb.hosts().iter().enumerate() {
        assert_eq!(h.index, i);
        assert_eq!(h.netns, format!("{p}-h{i}"));
        assert_eq!(h.iface, "eth0");
        assert!(netns_exists(&h.netns));
        let link = ip_json(&h.netns, &["link", "show", "eth0"]);
        let link = &link[0];
        assert_eq!(link["address"].as_str().unwrap(), h.mac_string());
        assert_eq!(link["operstate"].as_str().unwrap(), "UP", "{link}");
        let lo = ip_json(&h.netns, &["link", "show", "lo"]);
        assert!(lo[0]["flags"].as_array().unwrap().iter().any(|f| f == "UP"));
        assert!(macs.insert(h.mac), "duplicate MAC {}", h.mac_string());
        assert_eq!(h.mac[0] & 0x03, 0x02, "locally administered unicast");
        // No IPv6 noise.
        let addrs = ip_json(&h.netns, &["-6", "addr", "show", "dev", "eth0"]);
        assert!(
            addrs.as_array().unwrap().iter().all(|a| a["addr_info"]
                .as_array()
                .map(|v| v.is_empty())
                .unwrap_or(true)),
            "IPv6 addresses on {}: {addrs}",
            h.netns
        );
    }
    let sw = tb.switch_netns().to_owned();
    assert_eq!(sw, format!("{p}-sw"));
    let br = ip_json(&sw, &["-d", "link", "show", BRIDGE]);
    let data = &br[0]["linkinfo"]["info_data"];
    assert_eq!(data["stp_state"], 0, "{data}");
    assert_eq!(data["forward_delay"], 0, "{data}");
    assert_eq!(data["mcast_snooping"], 0, "{data}");
    let ports = ip_json(&sw, &["link", "show", "master", BRIDGE]);
    let names: BTreeSet<&str> = ports
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ifname"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["p0", "p1", "p2"]));

    let names: Vec<String> = tb.hosts().iter().map(|h| h.netns.clone()).collect();
    tb.down().expect("down");
    assert!(!netns_exists(&sw));
    for n in &names {
        assert!(!netns_exists(n), "{n} still exists");
    }
    let st = Testbed::status(&p).unwrap();
    assert!(st.switch.is_none() && st.hosts.is_empty());
}

#[test]
fn broadcast_from_h0_reaches_h1_and_h2_through_the_bridge() {
    if !netns_available("broadcast_reaches_all", false) {
        return;
    }
    let p = prefix("bc");
    let tb = Testbed::up(&TestbedConfig::new(3).prefix(&p)).expect("up");
    let got = exchange(&tb, 0, BROADCAST, &[1, 2], 0, 50);
    for (i, (b, u)) in got.iter().enumerate() {
        assert_eq!(b, &all(0, 50), "host {} broadcast", i + 1);
        assert!(u.is_empty());
    }
    // Unicast to h2 reaches h2 (h1 ignores it: not its MAC).
    let h2 = tb.hosts()[2].mac;
    let got = exchange(&tb, 0, h2, &[1, 2], 100, 10);
    assert_eq!(got[1].1, all(100, 10));
    assert!(got[0].1.is_empty());
}

#[test]
fn rate_installs_tbf_on_both_directions() {
    if !netns_available("rate_installs_tbf", false) {
        return;
    }
    let p = prefix("rt");
    let rate: Rate = "100mbit".parse().unwrap();
    let tb = Testbed::up(&TestbedConfig::new(2).prefix(&p).rate(rate)).expect("up");
    for h in tb.hosts() {
        let q = tc_qdisc(&h.netns, "eth0");
        assert!(q.contains("tbf") && q.contains("rate 100Mbit"), "{q}");
        let q = tc_qdisc(tb.switch_netns(), &format!("p{}", h.index));
        assert!(q.contains("tbf") && q.contains("rate 100Mbit"), "{q}");
    }
    // Traffic still flows.
    let got = exchange(&tb, 1, BROADCAST, &[0], 0, 20);
    assert_eq!(got[0].0, all(0, 20));
}

/// A host's own port pushes back instead of dropping, as a NIC's queue does: 200 full frames
/// (300 KB, more than a socket's send buffer and four 64 KiB messages) sent back to back by a
/// blocking socket of one host of a 100 Mbit/s test-bed reach the two others whole, and no
/// port's queue drops a frame.
#[test]
fn a_burst_crosses_shaped_ports_whole() {
    if !netns_available("a_burst_crosses_shaped_ports_whole", false) {
        return;
    }
    let p = prefix("bu");
    let rate: Rate = "100mbit".parse().unwrap();
    let tb = Testbed::up(&TestbedConfig::new(3).prefix(&p).rate(rate)).expect("up");
    let src = tb.hosts()[0].mac;
    let receivers: Vec<Receiver> = [1, 2]
        .iter()
        .map(|&i| Receiver::start(&tb.hosts()[i], src))
        .collect();
    let count = 200;
    netns::run_in(&tb.hosts()[0].netns, move || {
        let (mut tx, _rx) = open_eth0();
        for seq in 0..count {
            let mut f = frame(BROADCAST, src, seq);
            f.resize(1514, 0);
            tx.send_to(&f, None)
                .expect("send_to result")
                .expect("send frame");
        }
    })
    .unwrap();
    for (i, r) in receivers.into_iter().enumerate() {
        let (b, _) = r.finish();
        assert_eq!(b, all(0, count), "host {} missed frames", i + 1);
    }
    assert_eq!(tb.port_drops().expect("tc -s"), vec![]);
}

#[test]
fn rate_limit_bounds_throughput() {
    if !netns_available("rate_limit_bounds_throughput", false) {
        return;
    }
    let p = prefix("tp");
    let rate: Rate = "10mbit".parse().unwrap();
    let tb = Testbed::up(&TestbedConfig::new(2).prefix(&p).rate(rate)).expect("up");
    let src = tb.hosts()[0].mac;
    let rx = Receiver::start(&tb.hosts()[1], src);
    // Blast full-size frames for 500 ms; ENOBUFS is tbf pushing back.
    let run = Duration::from_millis(500);
    netns::run_in(&tb.hosts()[0].netns, move || {
        let (mut tx, _rx) = open_eth0();
        let start = Instant::now();
        let mut seq = 0u32;
        while start.elapsed() < run {
            let mut f = frame(BROADCAST, src, seq);
            f.resize(1514, 0);
            if let Some(Ok(())) = tx.send_to(&f, None) {
                seq += 1;
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    })
    .unwrap();
    let (b, _) = rx.finish();
    let bytes = b.len() as u64 * 1514;
    eprintln!(
        "10mbit for 500 ms: {} frames, {bytes} bytes received",
        b.len()
    );
    // 10 Mbit/s for 0.5 s = 625 kB, plus the bucket and queue. Without the
    // limit a veth moves far more (hundreds of MB/s).
    assert!(bytes > 200_000, "too little got through: {bytes} bytes");
    assert!(bytes < 1_200_000, "rate limit not effective: {bytes} bytes");
}

#[test]
fn loss_rule_drops_and_counts() {
    if !netns_available("loss_rule_drops_and_counts", true) {
        return;
    }
    let p = prefix("ls");
    let mut tb = Testbed::up(&TestbedConfig::new(3).prefix(&p).loss_pct(100.0)).expect("up");
    let out = Command::new("ip")
        .args(["netns", "exec", tb.switch_netns(), "nft", "list", "ruleset"])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&out.stdout);
    assert!(
        rules.contains("ether type 0x88b5 counter name \"loss_drops\" drop"),
        "{rules}"
    );
    assert_eq!(tb.loss_counter().unwrap(), 0);

    let got = exchange(&tb, 0, BROADCAST, &[1, 2], 0, 20);
    assert!(got[0].0.is_empty() && got[1].0.is_empty(), "{got:?}");
    // Flooded to 2 ports, dropped on each.
    assert_eq!(tb.loss_counter().unwrap(), 40);

    tb.set_loss(0.0).unwrap();
    let got = exchange(&tb, 0, BROADCAST, &[1, 2], 100, 20);
    assert_eq!(got[0].0, all(100, 20));
    assert_eq!(got[1].0, all(100, 20));
    assert_eq!(tb.loss_counter().unwrap(), 40, "counter kept, nothing new");

    tb.set_loss(50.0).unwrap();
    assert_eq!(tb.loss_pct(), 50.0);
    let got = exchange(&tb, 0, BROADCAST, &[1], 1000, 400);
    let n = got[0].0.len();
    assert!((100..=300).contains(&n), "50% loss let {n}/400 through");
    // Both receivers' ports count: at least h1's drops.
    assert!(tb.loss_counter().unwrap() >= 40 + (400 - n as u64));

    let e = tb.set_loss(101.0).unwrap_err();
    assert!(matches!(e, TestbedError::InvalidConfig(_)), "{e}");
    assert_eq!(tb.loss_pct(), 50.0);
    let st = Testbed::status(&p).unwrap();
    assert!(st.drops.unwrap().loss >= 40);
}

#[test]
fn drop_broadcast_to_isolates_one_host_from_broadcast_only() {
    if !netns_available("drop_broadcast_to", true) {
        return;
    }
    let p = prefix("db");
    let mut tb = Testbed::up(&TestbedConfig::new(3).prefix(&p)).expect("up");
    tb.drop_broadcast_to(1, true).unwrap();
    assert_eq!(tb.broadcast_dropped_hosts(), vec![1]);
    let got = exchange(&tb, 0, BROADCAST, &[1, 2], 0, 20);
    assert!(got[0].0.is_empty(), "h1 got broadcast: {:?}", got[0]);
    assert_eq!(got[1].0, all(0, 20));
    let c = tb.drop_counters().unwrap();
    assert_eq!(c.isolated, 20);
    assert_eq!(c.loss, 0);

    // Unicast to the isolated host still arrives.
    let h1 = tb.hosts()[1].mac;
    let got = exchange(&tb, 0, h1, &[1], 100, 10);
    assert_eq!(got[0].1, all(100, 10));
    // So does its own broadcast to others.
    let got = exchange(&tb, 1, BROADCAST, &[2], 200, 10);
    assert_eq!(got[0].0, all(200, 10));

    tb.drop_broadcast_to(1, false).unwrap();
    assert!(tb.broadcast_dropped_hosts().is_empty());
    let got = exchange(&tb, 0, BROADCAST, &[1, 2], 300, 20);
    assert_eq!(got[0].0, all(300, 20));
    assert_eq!(got[1].0, all(300, 20));
    assert_eq!(tb.drop_counters().unwrap().isolated, 20);

    let e = tb.drop_broadcast_to(3, true).unwrap_err();
    assert!(
        matches!(e, TestbedError::NoSuchHost { index: 3, .. }),
        "{e}"
    );
}

#[test]
fn up_is_idempotent_and_down_prefix_removes_leftovers() {
    if !netns_available("up_is_idempotent", false) {
        return;
    }
    let p = prefix("id");
    let first = Testbed::up(&TestbedConfig::new(4).prefix(&p)).expect("first up");
    first.keep(); // simulate a crashed run's leftovers
    assert!(netns_exists(&format!("{p}-h3")));
    let second = Testbed::up(&TestbedConfig::new(2).prefix(&p)).expect("second up");
    assert_eq!(second.hosts().len(), 2);
    assert!(
        !netns_exists(&format!("{p}-h3")),
        "leftover host not removed"
    );
    assert!(!netns_exists(&format!("{p}-h2")));
    let got = exchange(&second, 0, BROADCAST, &[1], 0, 5);
    assert_eq!(got[0].0, all(0, 5));
    second.keep();
    assert_eq!(Testbed::down_prefix(&p).unwrap(), 3);
    assert_eq!(Testbed::down_prefix(&p).unwrap(), 0);
    assert!(!netns_exists(&format!("{p}-sw")));
}

#[test]
fn drop_tears_down_after_a_panic() {
    if !netns_available("drop_tears_down_after_a_panic", false) {
        return;
    }
    let p = prefix("pn");
    let p2 = p.clone();
    let result = std::panic::catch_unwind(move || {
        let _tb = Testbed::up(&TestbedConfig::new(2).prefix(&p2)).expect("up");
        assert!(netns_exists(&format!("{p2}-h1")));
        panic!("deliberate panic inside a test-bed test");
    });
    assert!(result.is_err());
    for n in [format!("{p}-sw"), format!("{p}-h0"), format!("{p}-h1")] {
        assert!(!netns_exists(&n), "{n} survived the panic");
    }
}

#[test]
fn netns_threads_and_processes_run_inside_the_host() {
    if !netns_available("netns_threads_and_processes", false) {
        return;
    }
    let p = prefix("ns");
    let tb = Testbed::up(&TestbedConfig::new(2).prefix(&p)).expect("up");
    let h1 = tb.hosts()[1].clone();
    // A thread inside h1 sees exactly lo and eth0 with h1's MAC.
    let ifaces = netns::run_in(&h1.netns, || {
        pnet_datalink::interfaces()
            .into_iter()
            .map(|i| (i.name, i.mac.map(|m| m.octets())))
            .collect::<Vec<_>>()
    })
    .unwrap();
    let names: BTreeSet<&str> = ifaces.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["eth0", "lo"]));
    assert!(ifaces.contains(&("eth0".to_owned(), Some(h1.mac))));
    // The calling thread is unaffected.
    assert!(!pnet_datalink::interfaces()
        .iter()
        .any(|i| i.mac == Some(h1.mac.into())));
    // A process via `ip netns exec`.
    let out = netns::command_in(&h1.netns, "ip")
        .unwrap()
        .args(["-br", "link", "show", "eth0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&h1.mac_string()));
    let mut child = netns::spawn_process_in(&h1.netns, "true", Vec::<&str>::new()).unwrap();
    assert!(child.wait().unwrap().success());
    // Errors, not panics, for a namespace that doesn't exist.
    assert!(netns::spawn_in(&format!("{p}-h9"), || ()).is_err());
}

/// Whether process `pid` still runs (a zombie counts as ended).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").split_whitespace().next();
            !matches!(state, Some("Z") | Some("X"))
        })
        .unwrap_or(false)
}

/// Whether process `pid` has ended within 5 s (a SIGKILL takes effect asynchronously).
fn ends(pid: i32) -> bool {
    let t0 = Instant::now();
    while running(pid) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    !running(pid)
}

/// Starts `sleep 600` in `netns` in a session of its own (as an MPI launcher's ranks run),
/// printing its pid; returns that pid.
fn orphan_in(netns: &str) -> i32 {
    let out = netns::command_in(netns, "sh")
        .unwrap()
        .args([
            "-c",
            "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!",
        ])
        .output()
        .expect("sh");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pid")
}

#[test]
fn end_processes_and_down_end_what_runs_in_the_namespaces() {
    if !netns_available("end_processes", false) {
        return;
    }
    let tb = Testbed::up(&TestbedConfig::new(2).prefix(prefix("end"))).expect("up");
    let first = orphan_in(&tb.hosts()[1].netns);
    assert!(running(first), "the orphan did not start");
    assert_eq!(tb.end_processes(), 1);
    assert!(ends(first), "pid {first} survived end_processes");
    assert_eq!(tb.end_processes(), 0, "nothing left");

    let second = orphan_in(&tb.hosts()[0].netns);
    assert!(running(second));
    tb.down().expect("down");
    assert!(ends(second), "pid {second} survived down");
}

/// `ethbcast-testbed up --ip`: every host has its IPv4 address with a broadcast address and a
/// route for multicast, so an IP multicast tool (UDPCast) moves a file across the test-bed.
#[test]
fn up_with_ip_gives_hosts_addresses_broadcast_and_a_multicast_route_that_udpcast_uses() {
    if !netns_available(
        "up_with_ip_gives_hosts_addresses_broadcast_and_a_multicast_route_that_udpcast_uses",
        false,
    ) {
        return;
    }
    let (Some(sender), Some(receiver)) = (
        ethbcast_testbed::find_tool("udp-sender"),
        ethbcast_testbed::find_tool("udp-receiver"),
    ) else {
        assert!(
            std::env::var("ETHBCAST_REQUIRE_NETNS").as_deref() != Ok("1"),
            "udpcast is missing"
        );
        eprintln!("SKIPPED: udpcast is missing");
        return;
    };
    let bin = env!("CARGO_BIN_EXE_ethbcast-testbed");
    let p = prefix("ip");
    let up = Command::new(bin)
        .args(["up", "2", "--ip", "--json", "--prefix", &p])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let tb: serde_json::Value = serde_json::from_slice(&up.stdout).unwrap();
    assert_eq!(
        tb["ipv4"],
        serde_json::json!(["10.88.0.1", "10.88.0.2"]),
        "{tb}"
    );
    let down = || {
        let _ = Command::new(bin).args(["down", "--prefix", &p]).status();
    };
    let ns = |i: usize| format!("{p}-h{i}");
    for i in 0..2 {
        let addrs = ip_json(&ns(i), &["-4", "addr", "show", "dev", "eth0"]);
        let a = &addrs[0]["addr_info"][0];
        assert_eq!(a["local"], format!("10.88.0.{}", i + 1), "{addrs}");
        assert_eq!(a["prefixlen"], 24, "{addrs}");
        assert_eq!(a["broadcast"], "10.88.0.255", "{addrs}");
        let routes = ip_json(&ns(i), &["route", "show", "224.0.0.0/4"]);
        assert_eq!(routes[0]["dev"], "eth0", "{routes}");
    }
    let dir = std::env::temp_dir().join(format!("ethbcast-tb-ip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let output = dir.join("out");
    let mut r = netns::command_in(&ns(1), receiver.to_str().unwrap())
        .unwrap()
        .args(["--interface", "eth0", "--nokbd", "--file"])
        .arg(&output)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let s = netns::command_in(&ns(0), sender.to_str().unwrap())
        .unwrap()
        .args([
            "--interface",
            "eth0",
            "--nokbd",
            "--min-receivers",
            "1",
            "--max-wait",
            "10",
            "--file",
        ])
        .arg(&input)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut s = s;
    let t0 = Instant::now();
    let finished = loop {
        if let Some(st) = s.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = s.kill();
    let _ = s.wait();
    let _ = r.kill();
    let _ = r.wait();
    let got = std::fs::read(&output).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    down();
    assert!(
        finished.is_some_and(|st| st.success()),
        "udp-sender did not finish: {finished:?}"
    );
    assert!(
        got == data,
        "udp-receiver got {} bytes of {}",
        got.len(),
        data.len()
    );
}
