"""A small TCP proxy on 127.0.0.1 for fault tests: forwards both ways, and can stall (stop
forwarding, keep the sockets open: a blackholed link), cut (close every connection) or
reorder (swap the next two chunks the target sends)."""

from __future__ import annotations

import select
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()
        self.bytes_to_target = 0
        self.bytes_from_target = 0
        self._reorder = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stall(self) -> None:
        self._forwarding.clear()

    def resume(self) -> None:
        self._forwarding.set()

    def reorder(self) -> None:
        """The next two chunks from the target reach the client in swapped order (a chunk
        with nothing after it within a select round goes out as it is: a peer waiting for an
        answer must not wait forever)."""
        self._reorder = True

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for left, right in pairs:
            for sock in (left, right):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def close(self) -> None:
        self._stop.set()
        self.cut()
        self._listener.close()
        for thread in self._threads:
            thread.join(2)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            thread = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        sockets = [client, upstream]
        held: bytes | None = None  # a chunk from the target waiting for the next one
        try:
            while not self._stop.is_set():
                if not self._forwarding.wait(0.05):
                    continue
                readable, _, _ = select.select(sockets, [], [], 0.05)
                if held is not None and upstream not in readable:
                    client.sendall(held)  # no second chunk to swap it with
                    self.bytes_from_target += len(held)
                    held, self._reorder = None, False
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    if not self._forwarding.is_set():
                        # Stalled after select: hold the bytes until resumed or closed.
                        while not self._forwarding.wait(0.05):
                            if self._stop.is_set():
                                return
                    if source is upstream and self._reorder:
                        if held is None:
                            held = data
                            continue
                        data, held, self._reorder = data + held, None, False
                    target = upstream if source is client else client
                    target.sendall(data)
                    if source is client:
                        self.bytes_to_target += len(data)
                    else:
                        self.bytes_from_target += len(data)
        except (OSError, ValueError):  # cut() closed the sockets (select sees fd -1)
            return
        finally:
            for sock in sockets:
                sock.close()
