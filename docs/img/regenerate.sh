#!/usr/bin/env bash
# Regenerates the README's two pictures, as root (the test-bed is network namespaces):
#   docs/img/latency-vs-nodes.svg    the demo's broadcast latency against the group size at
#                                    256 bytes: PPBCAST, SBCAST, the binomial tree, the raw floor
#                                    (ethbcast-bench demo)
#   docs/img/distribute-goodput.svg  goodput per receiver of ethbcast send/recv against UDPCast
#                                    and raw broadcast frames, 8 receivers, 256 MiB, 1 Gbit/s
#                                    ports, 0% and 1% loss (ethbcast-bench distribute)
# and puts the table of the same distribute run (distribute-goodput.md) into README.md between
# its markers, so that the chart and the table beside it come from one run (a test of
# ethbcast-tools checks that they agree); and docs/large-groups.md's two plots of the scale
# study on the simulator, 16 to 4096 members (docs/img/scale-goodput.svg,
# docs/img/scale-root-control.svg; its table is scale.csv). Every other plot, and the runs'
# tables (demo.txt, distribute.txt, scale.txt), stay in OUT (default bench-out).
#
# Usage: sudo bash docs/img/regenerate.sh [OUT]      (about 15 minutes, plus the release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench-out}
if [ "$(id -u)" != 0 ]; then
    echo "regenerate.sh: run as root: the benchmarks build a test-bed of network namespaces" >&2
    exit 1
fi
# distribute runs the ethbcast binary beside ethbcast-bench: build both.
cargo build --release -p ethbcast-tools --bin ethbcast --bin ethbcast-bench
# Test-bed prefixes of their own, so that a test-bed of the same default name elsewhere on the
# machine is left alone.
bench() { cargo run --release -q -p ethbcast-tools --bin ethbcast-bench -- "$@"; }
mkdir -p "$out"
bench demo --out "$out" --prefix ebimgd | tee "$out/demo.txt"
bench distribute --receivers 8 --mib 256 --rate 1gbit --loss 0,1 --prefix ebimg --out "$out" | tee "$out/distribute.txt"
cp "$out/latency-vs-nodes-256B.svg" docs/img/latency-vs-nodes.svg
cp "$out/distribute-goodput.svg" docs/img/distribute-goodput.svg
bench scale --nodes 16,64,256,1024,2048,4096 --out "$out" | tee "$out/scale.txt"
cp "$out/scale-goodput.svg" "$out/scale-root-control.svg" docs/img/
# The goodput table replaces the lines between README's markers.
awk -v table="$out/distribute-goodput.md" '
    /<!-- distribute-goodput table: end -->/ { inside = 0 }
    !inside { print }
    /<!-- distribute-goodput table: begin -->/ {
        while ((getline line < table) > 0) print line
        inside = 1
    }
' README.md > README.md.new
mv README.md.new README.md
echo "wrote docs/img/latency-vs-nodes.svg, docs/img/distribute-goodput.svg, docs/img/scale-goodput.svg, docs/img/scale-root-control.svg and README.md's goodput table (tables: $out/demo.txt, $out/distribute.txt, $out/scale.txt)"
