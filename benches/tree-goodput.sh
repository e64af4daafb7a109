#!/bin/bash
# Goodput of a keyed transfer to 3 receivers on the test-bed's 1 Gbit/s ports: one file
# (`send -i FILE`, `recv -o FILE`) against the same bytes as a tree of files (`send -i DIR`,
# `recv --extract DIR`). File and tree runs alternate, ROUNDS of each, so that both see the
# same phases of a shared machine; the medians are printed with the tree's over the file's.
# Goodput is the payload (the file's bytes, the same for the tree) over the sender's data time
# (join excluded), so the tree's headers count against it. Outputs go to /dev/shm: this
# measures the transfer, not a disk. Each output is checked against its input (cmp, diff -r).
#
#   cargo build --release -p ethbcast-tools --bin ethbcast -p ethbcast-testbed
#   sudo benches/tree-goodput.sh            # MB=200 FILES=1000 ROUNDS=5 BIN=target/release
#
# Needs root (network namespaces), iproute2, GNU coreutils and diffutils.
set -euo pipefail

BIN=${BIN:-target/release}
MB=${MB:-200}
FILES=${FILES:-1000}
ROUNDS=${ROUNDS:-5}
P=${PREFIX:-treegood}
work=$(mktemp -d /dev/shm/ethbcast-tree-goodput.XXXXXX)
cleanup() {
    "$BIN/ethbcast-testbed" down --prefix "$P" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$BIN/ethbcast-testbed" up 4 --rate 1gbit --prefix "$P" >/dev/null
"$BIN/ethbcast" keygen "$work/key" 2>/dev/null
head -c $((MB << 20)) /dev/urandom >"$work/file.bin"
# The same bytes as FILES files in 10 directories.
mkdir "$work/tree"
split -n "$FILES" -d -a 6 "$work/file.bin" "$work/tree/part-"
for f in "$work"/tree/part-*; do
    n=${f##*-}
    d="$work/tree/d$((10#$n % 10))"
    mkdir -p "$d"
    mv "$f" "$d/"
done

# One transfer of `$1` (file or tree); prints the seconds of its data.
run() {
    local kind=$1 i pids=() input out
    for i in 1 2 3; do
        rm -rf "$work/out$i"
        if [ "$kind" = file ]; then out=(-o "$work/out$i"); else out=(--extract "$work/out$i"); fi
        ip netns exec "$P-h$i" "$BIN/ethbcast" recv --iface eth0 --key-file "$work/key" \
            --quiet --wait 60 "${out[@]}" &
        pids+=($!)
    done
    if [ "$kind" = file ]; then input="$work/file.bin"; else input="$work/tree"; fi
    ip netns exec "$P-h0" "$BIN/ethbcast" send --iface eth0 --key-file "$work/key" \
        -i "$input" --receivers 3 --wait 30 --quiet --json 2>/dev/null >"$work/report.json"
    for p in "${pids[@]}"; do wait "$p"; done
    for i in 1 2 3; do
        if [ "$kind" = file ]; then
            cmp -s "$work/file.bin" "$work/out$i"
        else
            diff -r "$work/tree" "$work/out$i" >/dev/null
        fi || { echo "receiver $i: output differs from the input" >&2; exit 1; }
    done
    awk '/^  "seconds":/ { sub(/,/, "", $2); print $2; exit }' "$work/report.json"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/file.s"
: >"$work/tree.s"
for r in $(seq "$ROUNDS"); do
    f=$(run file)
    t=$(run tree)
    echo "$f" >>"$work/file.s"
    echo "$t" >>"$work/tree.s"
    awk -v r="$r" -v f="$f" -v t="$t" -v mb="$MB" 'BEGIN {
        b = mb * 1048576 * 8 / 1e6
        printf "round %d: file %.1f Mbit/s (%.2f s), tree %.1f Mbit/s (%.2f s)\n", r, b / f, f, b / t, t }'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v f="$(median <"$work/file.s")" -v t="$(median <"$work/tree.s")" -v mb="$MB" -v n="$FILES" 'BEGIN {
    b = mb * 1048576 * 8 / 1e6
    printf "median: file %.1f Mbit/s, tree of %d files %.1f Mbit/s: tree/file %.2f\n", b / f, n, b / t, f / t }'
