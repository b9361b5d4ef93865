"""One broker and the services it runs besides HTTP: replication by role, metadata sync, the
idempotency window, periodic snapshots."""
