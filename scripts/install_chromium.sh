#!/bin/sh
# Install Debian's chromium for the dashboard test (tests/e2e/test_ui.py drives it headless
# through Playwright's Python API, with no browser download). Idempotent and quiet: nothing
# happens when chromium is already there. Debian/Ubuntu only.
set -eu

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_chromium.sh: apt-get not found; install chromium another way" >&2
    exit 1
fi

as_root=""
if [ "$(id -u)" -ne 0 ]; then
    as_root="sudo"
fi

$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends chromium >/dev/null
