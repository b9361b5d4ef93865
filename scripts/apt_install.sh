#!/bin/sh
# Install Debian packages quietly and without prompts: `sh scripts/apt_install.sh PACKAGE...`.
# Shared by the install_*.sh scripts, which first check whether what they need is there.
set -eu

if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt_install.sh: apt-get not found; install $* another way" >&2
    exit 1
fi

as_root=""
if [ "$(id -u)" -ne 0 ]; then
    as_root="sudo"
fi

# noninteractive: no prompts from debconf.
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
