#!/usr/bin/env bash
# Builds the Fast DDS peer for tests/robots/test_fastdds_peer.py (a second DDS vendor, so the
# ROS 2 bridge is tested against an implementation other than its own). Idempotent: installs
# Debian's libfastrtps-dev (Fast DDS 2.9) and fastddsgen only if missing, and rebuilds only
# when the binary is older than its sources. Output: build/fastdds_peer/fastdds_echo_peer.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/scripts/fastdds_peer"
OUT="$ROOT/build/fastdds_peer"
BIN="$OUT/fastdds_echo_peer"

if [ -x "$BIN" ] && [ -z "$(find "$SRC" "$0" -newer "$BIN" -type f 2>/dev/null)" ]; then
    echo "fastdds peer: up to date ($BIN)"
    exit 0
fi

need=()
dpkg -s libfastrtps-dev >/dev/null 2>&1 || need+=(libfastrtps-dev)
dpkg -s fastddsgen >/dev/null 2>&1 || need+=(fastddsgen)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v ip >/dev/null 2>&1 || need+=(iproute2)  # the test's private network namespace
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    echo "fastdds peer: installing ${need[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

mkdir -p "$OUT/gen"
(cd "$OUT/gen" && fastddsgen -typeros2 -replace "$SRC/RosMsgs.idl" >/dev/null)
cmake -S "$SRC" -B "$OUT/cmake" -DGEN_DIR="$OUT/gen" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$OUT/cmake" -j2 >/dev/null
cp "$OUT/cmake/fastdds_echo_peer" "$BIN"
echo "fastdds peer: built $BIN"
