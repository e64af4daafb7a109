#!/usr/bin/env bash
# Builds the MPI interposer once per MPI implementation, each with its own mpicc:
#   target/mpi/libethbcast_mpi-openmpi.so   (Debian: openmpi-bin libopenmpi-dev)
#   target/mpi/libethbcast_mpi-mpich.so     (Debian: mpich libmpich-dev)
# Usage: bash capi/mpi/build.sh [openmpi] [mpich]     (default: both)
# The Rust C ABI is linked in statically (cargo build --release -p ethbcast-capi), so each
# .so is self-contained. ETHBCAST_CAPI_LIB=path/to/libethbcast_capi.a uses an already built
# library instead; ETHBCAST_MPI_OUT=dir writes elsewhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
impls=("$@")
[ ${#impls[@]} -gt 0 ] || impls=(openmpi mpich)
lib="${ETHBCAST_CAPI_LIB:-}"
if [ -z "$lib" ]; then
  (cd "$root" && cargo build --release -p ethbcast-capi)
  lib="$root/target/release/libethbcast_capi.a"
fi
out="${ETHBCAST_MPI_OUT:-$root/target/mpi}"
mkdir -p "$out"
for impl in "${impls[@]}"; do
  case "$impl" in
    openmpi) cc=mpicc.openmpi; pkgs="openmpi-bin libopenmpi-dev" ;;
    mpich) cc=mpicc.mpich; pkgs="mpich libmpich-dev" ;;
    *) echo "build.sh: unknown MPI implementation '$impl' (openmpi, mpich)" >&2; exit 2 ;;
  esac
  command -v "$cc" >/dev/null || { echo "build.sh: $cc not found: apt-get install $pkgs" >&2; exit 1; }
  "$cc" -std=gnu11 -O2 -fPIC -shared -Wall -Wextra -Werror \
    -DETHBCAST_MPI_IMPL="\"$impl\"" -I "$root/capi" "$root/capi/mpi/ethbcast_mpi.c" "$lib" \
    -Wl,--version-script="$root/capi/mpi/exports.map" -Wl,-z,defs -lpthread -ldl -lm \
    -o "$out/libethbcast_mpi-$impl.so"
  echo "$out/libethbcast_mpi-$impl.so"
done
