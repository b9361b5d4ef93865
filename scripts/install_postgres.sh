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

# The package's own cluster is never started here.
sh "$(dirname "$0")/apt_install.sh" postgresql

have_postgres
