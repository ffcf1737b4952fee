#!/usr/bin/env bash
# System packages only the tests need (idempotent: installs what is missing, nothing else).
#   chromium: tests/report renders report.html headless and checks every image loaded.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    echo "test system deps: installing ${need[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi
