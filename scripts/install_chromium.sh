#!/bin/sh
# Install Debian's chromium for the dashboard test (tests/e2e/test_ui.py drives it headless
# through Playwright's Python API, with no browser download). Idempotent and quiet: nothing
# happens when chromium is already there. Debian/Ubuntu only.
set -eu

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
sh "$(dirname "$0")/apt_install.sh" chromium
