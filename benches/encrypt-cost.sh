#!/bin/bash
# What encryption costs a transfer: one file of MB MiB from one sender to RECEIVERS receivers on
# the test-bed's 1 Gbit/s ports, keyed and encrypted (the default), keyed and authenticated only
# (`--no-encrypt`), and without a key (`--insecure`), the three alternating for ROUNDS rounds so
# that each sees the same phases of the machine. Per setting, the medians of goodput (the file's
# bytes over the sender's data time, join excluded), of the sender's CPU per GiB and of the
# receivers' CPU per GiB (summed over receivers, per GiB each received), and the encrypted
# setting's ratios to the others. Outputs go to /dev/shm and are checked against the input.
#
#   cargo build --release -p ethbcast-tools --bin ethbcast -p ethbcast-testbed
#   sudo benches/encrypt-cost.sh          # MB=128 RECEIVERS=8 ROUNDS=5 BIN=target/release
#
# Needs root (network namespaces), iproute2, GNU time (/usr/bin/time) and coreutils.
set -euo pipefail

BIN=${BIN:-target/release}
MB=${MB:-128}
RECEIVERS=${RECEIVERS:-8}
ROUNDS=${ROUNDS:-5}
P=${PREFIX:-enccost}
work=$(mktemp -d /dev/shm/ethbcast-encrypt-cost.XXXXXX)
cleanup() {
    "$BIN/ethbcast-testbed" down --prefix "$P" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$BIN/ethbcast-testbed" up $((RECEIVERS + 1)) --rate 1gbit --prefix "$P" >/dev/null
"$BIN/ethbcast" keygen "$work/key" 2>/dev/null
head -c $((MB << 20)) /dev/urandom >"$work/file.bin"

# One transfer with the options of setting `$1`; prints "seconds sender_cpu receivers_cpu".
run() {
    local opts i pids=()
    case $1 in
        encrypted) opts=(--key-file "$work/key") ;;
        authenticated) opts=(--key-file "$work/key" --no-encrypt) ;;
        plain) opts=(--insecure) ;;
    esac
    for i in $(seq "$RECEIVERS"); do
        rm -f "$work/out$i"
        ip netns exec "$P-h$i" /usr/bin/time -f "%U %S" -o "$work/cpu$i" \
            "$BIN/ethbcast" recv --iface eth0 "${opts[@]}" --quiet --wait 60 -o "$work/out$i" &
        pids+=($!)
    done
    ip netns exec "$P-h0" /usr/bin/time -f "%U %S" -o "$work/cpu0" \
        "$BIN/ethbcast" send --iface eth0 "${opts[@]}" -i "$work/file.bin" \
        --receivers "$RECEIVERS" --wait 30 --quiet --json 2>/dev/null >"$work/report.json"
    for p in "${pids[@]}"; do wait "$p"; done
    for i in $(seq "$RECEIVERS"); do
        cmp -s "$work/file.bin" "$work/out$i" || { echo "receiver $i: output differs" >&2; exit 1; }
    done
    local secs recv=0
    secs=$(awk '/^  "seconds":/ { sub(/,/, "", $2); print $2; exit }' "$work/report.json")
    for i in $(seq "$RECEIVERS"); do
        recv=$(awk -v a="$recv" '{ print a + $1 + $2 }' "$work/cpu$i")
    done
    echo "$secs $(awk '{ print $1 + $2 }' "$work/cpu0") $recv"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
settings="encrypted authenticated plain"
for s in $settings; do : >"$work/$s"; done
for r in $(seq "$ROUNDS"); do
    for s in $settings; do
        out=$(run "$s")
        echo "$out" >>"$work/$s"
        echo "round $r $s: $out" | awk -v mb="$MB" -v n="$RECEIVERS" '{
            g = mb / 1024; printf "round %s %-13s %.1f Mbit/s, sender %.2f s/GiB, receivers %.2f s/GiB\n",
            $2, $3, mb * 8.388608 / $4, $5 / g, $6 / g / n }'
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for s in $settings; do
    g=$(awk -v mb="$MB" '{ print mb * 8.388608 / $1 }' "$work/$s" | median)
    cs=$(awk -v mb="$MB" '{ print $2 / (mb / 1024) }' "$work/$s" | median)
    cr=$(awk -v mb="$MB" -v n="$RECEIVERS" '{ print $3 / (mb / 1024) / n }' "$work/$s" | median)
    echo "$s $g $cs $cr" >>"$work/medians"
    printf "median %-13s %.1f Mbit/s, sender %.2f CPU s/GiB, receivers %.2f CPU s/GiB\n" "$s" "$g" "$cs" "$cr"
done
awk 'NR == 1 { g = $2; s = $3; r = $4; next }
     { printf "encrypted / %s: goodput %.2f, sender CPU %.2f, receivers CPU %.2f\n", $1, g / $2, s / $3, r / $4 }' \
    "$work/medians"
