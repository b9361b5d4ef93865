"""The `twinlog` command: serve, dev, openapi, settings-doc, store-info, export, report, ha."""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.cli.client import EXIT_CLOSED_PIPE, add_address_arguments
from app.cli.ha import add_commands as add_ha_commands
from app.cli.lookup import add_commands as add_lookup_commands
from app.cli.messages import add_commands as add_message_commands
from app.cli.metadata import add_commands as add_metadata_commands
from app.cli.receive import add_commands as add_receive_commands
from app.cli.snapshots import add_commands as add_snapshot_commands
from app.cli.timers import add_commands as add_timer_commands
from store import BrokerRole, MessageStore, StoreConfig, StoreError
from store.errors import ConfigError

DEFAULT_OPENAPI_PATH = Path("openapi") / "openapi.json"
DEFAULT_SETTINGS_DOC_PATH = Path("docs") / "settings.md"


def _store_info(arguments: argparse.Namespace) -> int:
    """Recover a stopped store's data dir and print what it holds."""
    config = StoreConfig(
        data_dir=Path(arguments.data_dir),
        mapped_file_size_bytes=arguments.mapped_file_size_bytes,
    )
    store = MessageStore(config)
    try:
        report = store.start()
    except StoreError as error:
        print(f"twinlog: {error}", file=sys.stderr)
        return 2
    try:
        topics = {
            topic: {str(q): store.queue_offset_range(topic, q) for q in queue_ids}
            for topic, queue_ids in store.queues.topics().items()
        }
        print(json.dumps({
            "recovery": asdict(report),
            "min_offset": store.min_offset,
            "max_offset": store.max_offset,
            "topics": topics,
        }, indent=2))
    finally:
        store.shutdown()
    return 0


# Flags of `serve`: flag -> setting. Only flags given on the command line override the
# environment and the TOML file.
SERVE_FLAGS = {
    "role": "broker_role",
    "http_host": "http_host",
    "http_port": "http_port",
    "ha_port": "ha_listen_port",
    "ha_master_address": "ha_master_address",
    "master_http_address": "master_http_address",
    "data_dir": "data_dir",
    "flush_disk_type": "flush_disk_type",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
    "dledger_listen_fd": "dledger_listen_fd",
}


def _serve_overrides(arguments: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        setting: getattr(arguments, flag) for flag, setting in SERVE_FLAGS.items()
        if getattr(arguments, flag) is not None
    }
    for assignment in arguments.set or []:
        name, separator, value = assignment.partition("=")
        if not separator or not name:
            raise SystemExit(f"twinlog: --set expects name=value, got {assignment!r}")
        overrides[name.strip()] = value
    return overrides


def _serve(arguments: argparse.Namespace) -> int:
    from app.api.main import create_app
    from app.server.fd_budget import FdBudgetError, fd_budget, raise_nofile_limit
    from app.server.http_server import build_server
    from app.settings import ReplicationMode, SettingsError, load_settings
    from store.metadata.migrate import MigrationFailed, migrate_in_child

    config_file = Path(arguments.config) if arguments.config else None
    http_socket = _inherited_http_socket(arguments.http_listen_fd)
    overrides = _serve_overrides(arguments)
    if http_socket is not None:
        # The gateway serves the inherited socket: its address is the one ids and logs name.
        overrides["http_host"], overrides["http_port"] = http_socket.getsockname()[:2]
    try:
        settings = load_settings(config_file, **overrides)
        if settings.replication_mode is ReplicationMode.DLEDGER:
            settings.to_dledger_transport_config()  # the secret, or the open port by name
        else:
            settings.to_ha_config().check_authentication()
    except (SettingsError, ConfigError) as error:
        print(f"twinlog: invalid settings: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.replication_mode is ReplicationMode.DLEDGER:
        if settings.dledger_secret is None:
            logging.getLogger("twinlog").warning(
                "THE DLEDGER PORT IS UNAUTHENTICATED (dledger_allow_unauthenticated is set): "
                "anyone who reaches it can vote and push entries")
    elif settings.ha_secret is None:
        logging.getLogger("twinlog").warning(
            "THE HA LINK IS UNAUTHENTICATED (ha_allow_unauthenticated is set): %s",
            "this slave applies whatever the peer at ha_master_address sends"
            if settings.broker_role is BrokerRole.SLAVE else
            f"anyone who reaches port {settings.ha_listen_port} can read the whole commit log "
            "and acknowledge SYNC_MASTER puts")
    try:
        budget = fd_budget(settings, raise_nofile_limit())
    except FdBudgetError as error:
        print(f"twinlog: {error}", file=sys.stderr)
        return 2
    try:
        # Alembic runs in a child, so that the broker never holds it (store/metadata/migrate.py).
        migrate_in_child(settings.metadata_database_url)
    except (MigrationFailed, OSError, subprocess.SubprocessError) as error:
        print(f"twinlog: the metadata database could not be migrated: {error}", file=sys.stderr)
        return 2
    app = create_app(settings)
    server = build_server(app, settings, budget,
                          Path(arguments.port_file) if arguments.port_file else None)
    # uvicorn re-raises the stop signal after its graceful shutdown; with these handlers in
    # place that ends here, and a broker stopped cleanly by SIGTERM or Ctrl-C exits with 0.
    stop_signals: list[int] = []
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda signum, _: stop_signals.append(signum))
    server.run(sockets=None if http_socket is None else [http_socket])
    return 0 if server.started else 3


def _inherited_http_socket(fd: int | None) -> socket.socket | None:
    """`--http-listen-fd N`: a bound TCP socket from the parent (family from the descriptor)."""
    if fd is None:
        return None
    inherited = socket.socket(fileno=fd)
    inherited.listen(2048)  # uvicorn's default backlog; listening twice is harmless
    return inherited


def _dev(arguments: argparse.Namespace) -> int:
    from app.cli.dev import DevLayout, run_dev
    from app.cli.dev_dledger import DLedgerDevLayout, run_dev_dledger

    if arguments.dledger:
        return run_dev_dledger(DLedgerDevLayout(
            data_root=Path(arguments.data_root), http_port=arguments.dledger_http_port,
            dledger_port=arguments.dledger_port), arguments.mapped_file_size_bytes)
    return run_dev(DevLayout(
        data_root=Path(arguments.data_root), master_http_port=arguments.master_http_port,
        slave_http_port=arguments.slave_http_port, ha_port=arguments.ha_port),
        arguments.mapped_file_size_bytes)


def _openapi(arguments: argparse.Namespace) -> int:
    from app.api import openapi
    from app.api.main import create_app
    from app.settings import Settings

    # Built from default settings, not the environment: the file must not vary by host.
    document = create_app(Settings.model_construct()).openapi()
    path = Path(arguments.output)
    if arguments.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != openapi.render_json(document):
            print(f"twinlog: {path} differs from the app; run `twinlog openapi`",
                  file=sys.stderr)
            return 1
        return 0
    openapi.write(document, path)
    print(f"wrote {path}")
    return 0


def _settings_doc(arguments: argparse.Namespace) -> int:
    from app.cli import settings_doc
    from app.settings import Settings

    path = Path(arguments.output)
    if arguments.check:
        if not settings_doc.check(path, Settings, SERVE_FLAGS):
            print(f"twinlog: {path} differs from the settings model; run "
                  f"`{settings_doc.REGENERATE_COMMAND}`", file=sys.stderr)
            return 1
        return 0
    settings_doc.write(path, Settings, SERVE_FLAGS)
    print(f"wrote {path}")
    return 0


def _version() -> str:
    """The installed distribution's version (its metadata, not a constant kept in step)."""
    try:
        return importlib.metadata.version("twinlog")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twinlog", description="twinlog: a replicated message store (RocketMQ-style)."
    )
    parser.add_argument("--version", action="version", version=f"twinlog {_version()}")
    add_address_arguments(parser)  # the admin commands' --url and --token, before their name
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("store-info", help="recover a data dir and print its offsets")
    info.add_argument("--data-dir", required=True)
    info.add_argument("--mapped-file-size-bytes", type=int, default=1 << 30)
    info.set_defaults(handler=_store_info)

    serve = commands.add_parser(
        "serve", help="run one broker (HTTP gateway + store + replication)",
        description="Run one broker. Settings come from flags, then TWINLOG_* environment "
                    "variables, then the TOML file (--config or TWINLOG_CONFIG_FILE).")
    serve.add_argument("--config", help="TOML settings file")
    serve.add_argument("--role", choices=["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"])
    serve.add_argument("--http-host")
    serve.add_argument("--http-port", type=int)
    serve.add_argument("--ha-port", type=int, help="HA listen port (a master's)")
    serve.add_argument("--ha-master-address", help="host:port of the master's HA (a slave's)")
    serve.add_argument("--master-http-address",
                       help="http://host:port of the master (a slave's metadata sync)")
    serve.add_argument("--data-dir")
    serve.add_argument("--flush-disk-type", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    serve.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert")
    serve.add_argument("--port-file", help="once serving, write the bound HTTP and HA ports "
                                           "here as JSON (for --http-port 0 --ha-port 0)")
    serve.add_argument("--http-listen-fd", type=int, metavar="FD",
                       help="serve HTTP on this inherited, bound TCP socket (tests and "
                            "supervisors bind first: every port known before start)")
    serve.add_argument("--dledger-listen-fd", type=int, metavar="FD",
                       help="the DLedger peer port on this inherited, bound TCP socket")
    serve.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="any other setting, e.g. --set slave_timeout_ms=1000")
    serve.set_defaults(handler=_serve)

    dev = commands.add_parser(
        "dev", help="run a SYNC_MASTER and its SLAVE locally, open auth, 64 MiB log files "
                    "(Ctrl-C stops both)")
    dev.add_argument("--data-root", default="data")  # ports: 0 lets the kernel pick one
    dev.add_argument("--master-http-port", type=int, default=8080)
    dev.add_argument("--slave-http-port", type=int, default=8081)
    dev.add_argument("--ha-port", type=int, default=10912)
    dev.add_argument("--dledger", action="store_true",
                     help="run a DLedger group of three instead (n0, n1, n2)")
    dev.add_argument("--dledger-http-port", type=int, default=8080,
                     help="with --dledger: HTTP ports from this one (0: the kernel picks)")
    dev.add_argument("--dledger-port", type=int, default=20911,
                     help="with --dledger: DLedger ports from this one (0: the kernel picks)")
    dev.add_argument("--mapped-file-size-bytes", type=int, default=None,
                     help="commit-log file size of new data dirs (default "
                          "TWINLOG_MAPPED_FILE_SIZE_BYTES, else 64 MiB; a data dir keeps the "
                          "size its files have)")
    dev.set_defaults(handler=_dev)

    spec = commands.add_parser("openapi", help="write the OpenAPI document of the app")
    spec.add_argument("--output", default=str(DEFAULT_OPENAPI_PATH))
    spec.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    spec.set_defaults(handler=_openapi)
    reference = commands.add_parser(
        "settings-doc", help="write the settings reference (docs/settings.md) from the model")
    reference.add_argument("--output", default=str(DEFAULT_SETTINGS_DOC_PATH))
    reference.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    reference.set_defaults(handler=_settings_doc)
    add_snapshot_commands(commands)
    add_ha_commands(commands)
    add_metadata_commands(commands)
    add_message_commands(commands)
    add_receive_commands(commands)
    add_timer_commands(commands)
    add_lookup_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if getattr(arguments, "handler", None) is None:
        parser.print_help()
        return 0
    try:
        code = int(arguments.handler(arguments))
        sys.stdout.flush()  # a reader gone shows here, not as a traceback at exit
    except BrokenPipeError:
        # The reader of the output went away (`twinlog consume T | head -3`): no traceback,
        # the status a command killed by SIGPIPE has in a shell. What was still buffered
        # goes nowhere instead of raising again when the interpreter flushes at exit.
        _discard_stdout()
        return EXIT_CLOSED_PIPE
    return code


def _discard_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):  # stdout replaced (a test)
        pass


if __name__ == "__main__":
    raise SystemExit(main())
