"""`twinlog serve --port-file PATH`: the ports a broker actually bound, for whoever started it.

With `--http-port 0` and `--ha-port 0` the kernel picks free ports while the broker binds them,
so no other process can take a port between "found free" and "bound" (a test or a supervisor
never has to guess one). Once uvicorn serves, this writes `{"http_port": ..., "ha_port": ...}`
(`ha_port` is null without an HA listener: a slave) to a temp name and renames it, so a reader
sees the whole file or none.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI


class PortReportingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI, port_file: Path | None) -> None:
        super().__init__(config)
        self._app = app
        self._port_file = port_file

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._port_file is not None:
            http_port = int(self.servers[0].sockets[0].getsockname()[1])
            write_port_file(self._port_file, http_port, _ha_port(self._app))


def _ha_port(app: FastAPI) -> int | None:
    broker = app.state.gateway.broker
    service = broker.replication.service if broker and broker.replication else None
    return service.listen_address[1] if service is not None else None


def write_port_file(path: Path, http_port: int, ha_port: int | None) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps({"http_port": http_port, "ha_port": ha_port}))
    os.replace(temp, path)


def read_port_file(path: Path) -> tuple[int, int | None] | None:
    """(http_port, ha_port) once the file exists, else None."""
    try:
        ports = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return int(ports["http_port"]), ports["ha_port"]
