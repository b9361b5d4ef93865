"""The `twinlog` command: serve, the admin commands (HTTP only), the dev supervisors and the
offline data-dir tools."""
