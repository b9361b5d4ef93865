#!/bin/sh
# Install PostgreSQL server binaries (initdb, pg_ctl) for the metadata tests' second database.
# The tests start their own throwaway cluster (tests/support/postgres.py); this only installs.
# Idempotent and quiet: it does nothing when the binaries are already there. Debian/Ubuntu only.
set -eu

have_postgres() {
    command -v initdb >/dev/null 2>&1 && return 0
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if have_postgres; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_postgres.sh: apt-get not found; install the PostgreSQL server another way" >&2
    exit 1
fi

as_root=""
if [ "$(id -u)" -ne 0 ]; then
    as_root="sudo"
fi

# noninteractive: no prompts from debconf; the package's own cluster is never started here.
$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null

have_postgres
