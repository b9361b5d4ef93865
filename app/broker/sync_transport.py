"""How a slave's metadata sync reaches its master: one GET at a time, with the standard
library's http.client (an HTTP client package costs a broker about 5 MB it would hold for four
requests a minute, issue 31).

`SyncTransport` is the seam: a callable from a `SyncRequest` to a `SyncAnswer`. `HttpTransport`
is the real one, a new connection per request (closed when the answer is read); tests pass
their own callable to answer, fail or hold a request. A master that cannot be reached (refused,
timed out, a TLS certificate not trusted, a broken answer) raises `MasterUnreachable`; an
answer that is not 200 or larger than `answer_bytes_max` is `MasterRefused`, naming the
request and the status.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

ANSWER_BYTES_MAX = 64 * 1024 * 1024  # one exported table; past it the pull fails, named
REFUSAL_TEXT_MAX = 200  # of a refusal's body, in its error


@dataclass(frozen=True, slots=True)
class SyncRequest:
    path: str  # from the master's root, e.g. /admin/sync/topics
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    status: int
    body: bytes


SyncTransport = Callable[[SyncRequest], SyncAnswer]


class MasterUnreachable(Exception):
    """No answer: the connection was refused, timed out, failed TLS or broke mid-answer."""


class MasterRefused(Exception):
    """The master answered, but not with a table: a status other than 200, or too large."""


def refusal(url: str, answer: SyncAnswer) -> MasterRefused:
    text = answer.body[:REFUSAL_TEXT_MAX].decode("utf-8", errors="replace")
    return MasterRefused(f"GET {url}: {answer.status}: {text}")


class HttpTransport:
    """GETs under `base_url` (http or https, with an optional path prefix). An https master's
    certificate is verified against `ssl_context` (the caller's choice of CAs)."""

    def __init__(self, base_url: str, *, timeout_s: float,
                 ssl_context: ssl.SSLContext | None = None,
                 answer_bytes_max: int = ANSWER_BYTES_MAX) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http(s)://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._answer_bytes_max = answer_bytes_max

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout_s,
                                               context=self._ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)

    def __call__(self, request: SyncRequest) -> SyncAnswer:
        url = f"{self.base_url}{request.path}"
        connection = self._connection()
        try:
            connection.request("GET", self._prefix + request.path, headers=dict(request.headers))
            response = connection.getresponse()
            declared = response.getheader("content-length")
            if declared is not None and declared.isdigit() \
                    and int(declared) > self._answer_bytes_max:
                raise self._too_large(url)
            body = response.read(self._answer_bytes_max + 1)
            if len(body) > self._answer_bytes_max:
                raise self._too_large(url)
            return SyncAnswer(response.status, body)
        except (OSError, http.client.HTTPException) as error:
            raise MasterUnreachable(f"GET {url}: {type(error).__name__}: {error}") from error
        finally:
            connection.close()

    def _too_large(self, url: str) -> MasterRefused:
        return MasterRefused(f"GET {url}: the answer is larger than {self._answer_bytes_max} "
                             "bytes (the bound of one table)")
