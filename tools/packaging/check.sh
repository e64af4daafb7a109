#!/usr/bin/env bash
# Checks the two ways of installing ethbcast that README's "Installing on a cluster" gives, as
# an administrator would use them (CI runs this after the tests; needs root, cargo-deb, dpkg):
#
# 1. `cargo install --path tools --root DIR` gives ethbcast and ethbcast-bench,
#    `cargo install --path tools/testbed --root DIR` ethbcast-testbed.
# 2. `cargo deb -p ethbcast-tools` builds the package `ethbcast`; `dpkg -i` installs
#    /usr/bin/ethbcast with cap_net_raw,cap_net_admin+ep, root:ethbcast and mode 0750 (the
#    group created), man pages, completions, the systemd unit; `nobody` cannot run the
#    installed binary, `nobody` in the group ethbcast can and opens a raw socket with it;
#    reinstalling (what an upgrade does) keeps all of that and a locally edited
#    /etc/default/ethbcast-recv;
#    `dpkg --purge` removes it all again.
#
# The package is removed on exit, also when a check fails. A package `ethbcast` that was
# installed before is left alone: the script refuses to run.
set -euo pipefail
cd "$(dirname "$0")/../.."
# setcap/getcap live in /usr/sbin, which a non-login PATH may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

step() { echo "packaging: $*"; }
fail() { echo "packaging: FAILED: $*" >&2; exit 1; }

command -v cargo-deb >/dev/null || fail "cargo-deb is missing: cargo install cargo-deb --locked"
if dpkg-query -W -f '${Status}' ethbcast 2>/dev/null | grep -q installed; then
  fail "a package ethbcast is already installed; remove it first (dpkg --purge ethbcast)"
fi

work=$(mktemp -d)
netns="ethbcast-pkg-$$"
cleanup() {
  ip netns del "$netns" 2>/dev/null || true
  dpkg --purge ethbcast >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "cargo install --path tools (and tools/testbed) --root $work/root"
cargo install --locked --quiet --path tools --root "$work/root"
cargo install --locked --quiet --path tools/testbed --root "$work/root"
for bin in ethbcast ethbcast-bench ethbcast-testbed; do
  "$work/root/bin/$bin" --version >/dev/null || fail "cargo install: $bin does not run"
done

step "cargo deb -p ethbcast-tools"
deb=$(cargo deb -p ethbcast-tools | grep '\.deb$' | tail -n 1)
[ -f "$deb" ] || fail "cargo deb printed no package path"

step "dpkg -i $deb"
dpkg -i "$deb" >/dev/null

caps=$(getcap /usr/bin/ethbcast)
echo "  $caps"
case "$caps" in
  *cap_net_admin,cap_net_raw=ep*) ;;
  *) fail "getcap /usr/bin/ethbcast: want cap_net_admin,cap_net_raw=ep" ;;
esac

getent group ethbcast >/dev/null || fail "the package created no group ethbcast"
owner=$(stat -c '%a %U %G' /usr/bin/ethbcast)
[ "$owner" = "750 root ethbcast" ] || fail "/usr/bin/ethbcast is '$owner', want '750 root ethbcast'"

for page in ethbcast ethbcast-send ethbcast-recv ethbcast-keygen ethbcast-doctor; do
  path=$(man -w "$page") || fail "man -w $page"
  echo "  $path"
done
MANPAGER=cat MANWIDTH=100 man ethbcast 2>/dev/null | grep -q "Exit codes" \
  || fail "man ethbcast does not render the exit codes"

completion=/usr/share/bash-completion/completions/ethbcast
[ -f "$completion" ] || fail "no bash completion at $completion"
# What bash offers after `ethbcast re<TAB>` and `ethbcast recv --ou<TAB>`.
got=$(bash -c "source $completion
  COMP_WORDS=(ethbcast re); COMP_CWORD=1; _ethbcast ethbcast re ethbcast; echo \"\${COMPREPLY[*]}\"
  COMP_WORDS=(ethbcast recv --ou); COMP_CWORD=2; _ethbcast ethbcast --ou recv; echo \"\${COMPREPLY[*]}\"")
[ "$got" = $'recv\n--output' ] || fail "bash completion offered: $got"
[ -f /usr/share/zsh/vendor-completions/_ethbcast ] || fail "no zsh completion"
[ -f /usr/share/fish/vendor_completions.d/ethbcast.fish ] || fail "no fish completion"

systemd-analyze verify ethbcast-recv@eth0.service || fail "systemd-analyze verify ethbcast-recv@eth0.service"

step "nobody may not run the installed binary; nobody in the group ethbcast may"
ip netns add "$netns"
ip -n "$netns" link add eth0 type veth peer name eth1
ip -n "$netns" link set eth0 up
ip -n "$netns" link set eth1 up
set +e
# Through a shell that runs as nobody: setpriv itself still holds root's capabilities when it
# executes its command, so it could execute a file that nobody may.
out=$(ip netns exec "$netns" setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
  sh -c 'exec /usr/bin/ethbcast recv --insecure --iface eth0 --wait 1' 2>&1)
rc=$?
set -e
[ "$rc" = 126 ] || fail "nobody outside the group: want exit 126 (not executable), got $rc: $out"
# With the capabilities the raw socket opens and the receiver waits for a sender: exit 3
# (join timeout) after 1 s. Without them it would be exit 4 with the CAP_NET_RAW advice.
gid=$(getent group ethbcast | cut -d: -f3)
set +e
out=$(ip netns exec "$netns" setpriv --reuid=65534 --regid=65534 --groups="$gid" --inh-caps=-all \
  sh -c 'exec /usr/bin/ethbcast recv --insecure --iface eth0 --wait 1' 2>&1)
rc=$?
set -e
[ "$rc" = 3 ] || fail "nobody in the group ethbcast: want exit 3 (join timeout), got $rc: $out"

step "reinstall (as an upgrade does) keeps the capabilities and local settings"
echo "ETHBCAST_RECV_OPTS=--group-id 7  # local" >> /etc/default/ethbcast-recv
dpkg -i --force-confold "$deb" >/dev/null
getcap /usr/bin/ethbcast | grep -q 'cap_net_admin,cap_net_raw=ep' || fail "capabilities lost on reinstall"
[ "$(stat -c '%a %G' /usr/bin/ethbcast)" = "750 ethbcast" ] || fail "owner or mode lost on reinstall"
grep -q "# local" /etc/default/ethbcast-recv || fail "/etc/default/ethbcast-recv lost its local edit"

step "dpkg --purge ethbcast"
dpkg --purge ethbcast >/dev/null
for f in /usr/bin/ethbcast /usr/share/man/man1/ethbcast.1.gz "$completion" \
  /lib/systemd/system/ethbcast-recv@.service /etc/default/ethbcast-recv; do
  [ ! -e "$f" ] || fail "$f is still there after purge"
done
step "all checks passed"
