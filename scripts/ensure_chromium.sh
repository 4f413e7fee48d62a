#!/usr/bin/env bash
# Make sure Debian's headless-capable chromium is installed, for the browser test of the "Try it" page
# (tests/test_try_paging.py). It talks to chromium over the DevTools protocol, so no driver is needed.
# CI runs as root on a clean Debian machine; elsewhere this uses sudo when it is available.
set -euo pipefail

find_chromium() {
    for name in chromium chromium-browser google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
    done
    return 1
}

if path=$(find_chromium); then
    echo "ensure_chromium: found $path"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "ensure_chromium: chromium is missing and I am not root (no sudo either)." >&2
    echo "  Install it yourself: apt-get update && apt-get install -y chromium" >&2
    exit 1
fi

echo "ensure_chromium: installing Debian's chromium with apt-get"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

if path=$(find_chromium); then
    echo "ensure_chromium: installed $path ($("$path" --version 2>/dev/null || echo 'version unknown'))"
else
    echo "ensure_chromium: apt-get finished but no chromium binary is on PATH" >&2
    exit 1
fi
