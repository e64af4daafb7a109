//! `ethbcast-bench latency`, `barrier`, `throughput` and `demo --quick` through the binary, on
//! small test-beds. Structure and completeness only: no timed asserts.

use std::process::Command;

use ethbcast_tools::testbed::netns_available;
use serde_json::Value;

fn bench(args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ethbcast-bench"))
        .args(args)
        .output()
        .expect("run ethbcast-bench");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "ethbcast-bench {args:?} failed: {}\nstderr: {stderr}",
        out.status
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (v, stderr)
}

/// A test-bed prefix unique to this test process (namespaces are machine-wide, and other
/// checkouts may run test-beds at the same time).
fn prefix(tag: &str) -> String {
    format!("b5{tag}{:x}", std::process::id() & 0xffff)
}

fn positive(v: &Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"));
    assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {v}");
    x
}

#[test]
fn latency_reports_every_algorithm_group_and_size() {
    if !netns_available("latency_reports_every_algorithm_group_and_size", false) {
        return;
    }
    let (v, _) = bench(&[
        "latency",
        "--testbed",
        "4",
        "--nodes",
        "2,4",
        "--sizes",
        "8,4096",
        "--iters",
        "20",
        "--warmup",
        "5",
        "--blocks",
        "2",
        "--breakdown",
        "--prefix",
        &prefix("l"),
        "--json",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    // The three algorithms and the raw floor, measured in the same run.
    assert_eq!(rows.len(), 4 * 2 * 2, "{v}");
    for algo in ["floor", "ppbcast", "sbcast", "tree"] {
        for nodes in [2, 4] {
            for size in [8, 4096] {
                let row = rows
                    .iter()
                    .find(|r| r["algo"] == algo && r["nodes"] == nodes && r["size"] == size)
                    .unwrap_or_else(|| panic!("no row {algo} {nodes} {size} in {v}"));
                let mean = positive(row, "mean80_us");
                positive(row, "median_us");
                let p99 = positive(row, "p99_us");
                let max = positive(row, "max_us");
                assert!(max >= p99 && max >= mean, "{row}");
            }
        }
    }
    assert_eq!(v["growth"].as_array().expect("growth").len(), 3 * 2);
    let ratios = v["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 2 * 2);
    assert!(ratios
        .iter()
        .all(|r| r["ppbcast_over_tree"].as_f64().is_some()));
    assert!(v["method"].as_str().unwrap().contains("LAST receiver"));
    assert_eq!(v["backend"], "ring");
    assert_eq!(v["wait"], "block");
    // Every protocol row over the floor of the same group and size.
    let over = v["over_floor"].as_array().expect("over_floor");
    assert_eq!(over.len(), 3 * 2 * 2, "{v}");
    for o in over {
        let r = positive(o, "ratio");
        let (a, f) = (positive(o, "algo_us"), positive(o, "floor_us"));
        assert!((r - a / f).abs() < 1e-9, "{o}");
    }
    // The breakdown: every row has its instants, and they add up to no more than the whole.
    let b = v["breakdown"].as_array().expect("breakdown");
    assert_eq!(b.len(), 4 * 2 * 2, "{v}");
    for x in b {
        assert!(x["samples"].as_u64().unwrap() > 0, "{x}");
        positive(x, "to_last_rx_us");
        positive(x, "kick_us");
    }
}

#[test]
fn latency_cost_counts_the_work_per_broadcast_of_protocol_and_floor() {
    if !netns_available(
        "latency_cost_counts_the_work_per_broadcast_of_protocol_and_floor",
        false,
    ) {
        return;
    }
    let (v, _) = bench(&[
        "latency",
        "--testbed",
        "3",
        "--nodes",
        "2,3",
        "--sizes",
        "8,256",
        "--algos",
        "ppbcast",
        "--iters",
        "40",
        "--warmup",
        "5",
        "--blocks",
        "2",
        "--cost",
        "--prefix",
        &prefix("c"),
        "--json",
    ]);
    let cost = v["cost"].as_array().expect("cost");
    // The floor and PPBCAST, two group sizes, two message sizes.
    assert_eq!(cost.len(), 2 * 2 * 2, "{v}");
    for c in cost {
        assert_eq!(c["broadcasts"], 40, "{c}");
        // Repairs the members sent meanwhile (none on the floor, which has no protocol).
        let repairs = c["repairs"].as_u64().expect("repairs");
        if c["algo"] == "floor" {
            assert_eq!(repairs, 0, "{c}");
        }
        let p = &c["per_bcast"];
        for key in ["syscalls", "sendto", "ctx_switches", "cpu_us"] {
            positive(p, key);
        }
        let sendto = p["sendto"].as_f64().unwrap();
        if c["algo"] == "floor" {
            // One frame per broadcast, one kick of the TX ring: exactly one send, by the root.
            assert!(
                (sendto - 1.0).abs() < 0.05,
                "floor sends {sendto} per broadcast: {c}"
            );
            assert!(c["over_floor"].is_null(), "{c}");
        } else {
            // The root sends the message at least.
            assert!(sendto >= 1.0, "{c}");
            let floor = cost
                .iter()
                .find(|f| {
                    f["algo"] == "floor" && f["nodes"] == c["nodes"] && f["size"] == c["size"]
                })
                .expect("the floor of the same row");
            let x = &c["over_floor"];
            for key in ["syscalls", "sendto", "ctx_switches", "cpu_us"] {
                let want = p[key].as_f64().unwrap() / floor["per_bcast"][key].as_f64().unwrap();
                assert!((positive(x, key) - want).abs() < 1e-9, "{key}: {c}");
            }
        }
    }
}

#[test]
fn floor_measures_raw_broadcast_to_every_host_on_the_xdp_backend() {
    if !netns_available(
        "floor_measures_raw_broadcast_to_every_host_on_the_xdp_backend",
        false,
    ) {
        return;
    }
    // 4096 B is three frames: the last receiver must have all of them.
    let (v, _) = bench(&[
        "floor",
        "--testbed",
        "3",
        "--nodes",
        "2,3",
        "--sizes",
        "8,4096",
        "--iters",
        "20",
        "--warmup",
        "5",
        "--backend",
        "xdp",
        "--prefix",
        &prefix("f"),
        "--json",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2 * 2, "{v}");
    assert!(rows.iter().all(|r| r["algo"] == "floor"), "{v}");
    for r in rows {
        positive(r, "mean80_us");
    }
    assert_eq!(v["backend"], "xdp");
    assert!(v["over_floor"].as_array().unwrap().is_empty());
    assert!(v["method"].as_str().unwrap().contains("no protocol"));
}

#[test]
fn barrier_reports_both_kinds() {
    if !netns_available("barrier_reports_both_kinds", false) {
        return;
    }
    let (v, _) = bench(&[
        "barrier",
        "--testbed",
        "4",
        "--nodes",
        "2,4",
        "--iters",
        "20",
        "--warmup",
        "5",
        "--prefix",
        &prefix("b"),
        "--json",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2 * 2, "{v}");
    for kind in ["broadcast", "dissemination"] {
        for nodes in [2, 4] {
            let row = rows
                .iter()
                .find(|r| r["kind"] == kind && r["nodes"] == nodes)
                .unwrap_or_else(|| panic!("no row {kind} {nodes} in {v}"));
            positive(row, "mean80_us");
            positive(row, "max_us");
        }
    }
}

#[test]
fn throughput_delivers_everything_and_counts_frames() {
    if !netns_available("throughput_delivers_everything_and_counts_frames", false) {
        return;
    }
    let (v, _) = bench(&[
        "throughput",
        "--testbed",
        "4",
        "--size",
        "4MiB",
        "--prefix",
        &prefix("t"),
        "--json",
    ]);
    assert_eq!(v["receivers"], 3);
    assert_eq!(v["bytes"], 4 << 20);
    positive(&v, "seconds");
    positive(&v, "goodput_mb_s");
    // 4 MiB in frames of at most 1500 bytes: at least 2800 first transmissions.
    assert!(v["data_frames"].as_u64().unwrap() >= 2800, "{v}");
    assert!(v["ack_frames"].as_u64().unwrap() > 0, "{v}");
    // Sender and receivers used CPU, and the per-GiB figure is their sum over 4 MiB.
    let cpu = &v["cpu"];
    let (s, r) = (positive(cpu, "sender_s"), positive(cpu, "receivers_s"));
    let per_gib = positive(cpu, "per_gib_s");
    assert!((per_gib - (s + r) * 256.0).abs() < 1e-6 * per_gib, "{cpu}");
}

#[test]
fn demo_quick_writes_png_plots() {
    if !netns_available("demo_quick_writes_png_plots", false) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ethbcast-demo-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_ethbcast-bench"))
        .args(["demo", "--quick", "--prefix", &prefix("d"), "--out"])
        .arg(&dir)
        .output()
        .expect("run ethbcast-bench demo");
    assert!(
        out.status.success(),
        "demo failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("broadcast latency"), "{stdout}");
    assert!(stdout.contains("barrier latency"), "{stdout}");
    let pngs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    for stem in [
        "latency-vs-size-2nodes",
        "latency-vs-size-4nodes",
        "latency-vs-size-8nodes",
        "latency-vs-nodes-8B",
        "latency-vs-nodes-256B",
        "barrier-vs-nodes",
        "throughput",
        "memory-msave",
    ] {
        assert!(
            pngs.iter().any(|p| p.file_stem().unwrap() == stem),
            "{stem}.png missing in {pngs:?}"
        );
    }
    for p in &pngs {
        let b = std::fs::read(p).unwrap();
        assert!(
            b.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is not a PNG",
            p.display()
        );
        assert!(p.with_extension("svg").exists());
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("demo.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "testbed");
    // Every phase ran with the full demo's group and message sizes, the raw floor among them
    // (on shaped ports a 64 KiB floor needs ports that queue the message, as a switch does).
    let full_shape = |latency: &Value, what: &str| {
        let rows = latency["rows"].as_array().expect("rows");
        for algo in ["floor", "ppbcast", "sbcast", "tree"] {
            for nodes in [2, 4, 8] {
                for size in [8, 256, 4096, 65536] {
                    assert!(
                        rows.iter().any(|r| r["algo"] == algo
                            && r["nodes"] == nodes
                            && r["size"] == size
                            && r["mean80_us"].as_f64().is_some_and(|m| m > 0.0)),
                        "{what}: no {algo} row for {nodes} nodes, {size} B"
                    );
                }
            }
        }
    };
    full_shape(&json["latency"], "unshaped");
    for s in json["shaped"].as_array().expect("shaped runs") {
        full_shape(&s["latency"], s["rate"].as_str().unwrap());
    }
    let barrier_nodes: Vec<u64> = json["barrier"]["rows"]
        .as_array()
        .expect("barrier rows")
        .iter()
        .filter_map(|r| r["nodes"].as_u64())
        .collect();
    for n in [2, 4, 8] {
        assert!(
            barrier_nodes.contains(&n),
            "barrier at {n}: {barrier_nodes:?}"
        );
    }
    // The same comparison on ports shaped to Fast and Gigabit Ethernet speeds, its plots
    // and table in a folder per rate.
    assert!(stdout.contains("every port shaped to 100mbit"), "{stdout}");
    assert!(stdout.contains("every port shaped to 1gbit"), "{stdout}");
    let shaped = json["shaped"].as_array().expect("shaped runs");
    let rates: Vec<&str> = shaped.iter().map(|s| s["rate"].as_str().unwrap()).collect();
    assert_eq!(rates, ["100mbit", "1gbit"]);
    for s in shaped {
        let rows = s["latency"]["rows"].as_array().expect("rows");
        assert!(!rows.is_empty(), "{s}");
        let rate = s["rate"].as_str().unwrap();
        assert!(dir.join(rate).join("latency.csv").exists(), "{rate}");
        assert!(
            dir.join(rate).join("latency-vs-size-2nodes.png").exists(),
            "{rate}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_on_the_simulator_compares_the_hardware_algorithms() {
    let dir = std::env::temp_dir().join(format!("ethbcast-demo-sim-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_ethbcast-bench"))
        .args(["demo", "--quick", "--sim", "--out"])
        .arg(&dir)
        .output()
        .expect("run ethbcast-bench demo --sim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("NO TEST-BED"), "{stderr}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("demo.json")).unwrap()).unwrap();
    assert_eq!(json["mode"], "simulator");
    let rows = json["latency"]["rows"].as_array().unwrap();
    // sbcast, ppbcast and the binomial tree of point-to-point sends, at two
    // sizes and two group sizes each.
    // sizes and three group sizes each: the full demo's shape.
    assert_eq!(rows.len(), 3 * 4 * 3, "{rows:?}");
    for algo in ["sbcast", "ppbcast", "tree"] {
        assert_eq!(
            rows.iter().filter(|r| r["algo"] == algo).count(),
            12,
            "{algo}: {rows:?}"
        );
    }
    assert!(rows.iter().all(|r| r["mean80_us"].as_f64().unwrap() > 0.0));
    assert!(std::fs::read(dir.join("latency-vs-size-4nodes.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    let _ = std::fs::remove_dir_all(&dir);
}
