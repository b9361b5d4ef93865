"""Bearer tokens with scopes (produce, consume, admin, monitor), from settings.

`monitor` is read-only (GET admin endpoints, /metrics) for dashboards; `admin` includes it.

With no token configured the broker is open (development only; the broker logs it at start).
Tokens are kept as SHA-256 digests, so a lookup does not compare secrets byte by byte.
"""

from __future__ import annotations

import hashlib

from app.api.errors import ApiError
from app.settings import Scope

_BEARER_PREFIX = "bearer "


class Authenticator:
    def __init__(self, tokens: dict[str, list[Scope]]) -> None:
        self._scopes_by_digest = {
            hashlib.sha256(token.encode()).digest(): _with_implied(scopes)
            for token, scopes in tokens.items()
        }
        self.is_open = not self._scopes_by_digest

    def check(self, authorization: str | None, scope: Scope) -> None:
        """Raise UNAUTHORIZED (no or unknown token) or FORBIDDEN (token without `scope`)."""
        if self.is_open:
            return
        if authorization is None or not authorization[:7].lower() == _BEARER_PREFIX:
            raise ApiError("UNAUTHORIZED", "send 'Authorization: Bearer <token>'")
        token = authorization[7:].strip()
        scopes = self._scopes_by_digest.get(hashlib.sha256(token.encode()).digest())
        if scopes is None:
            raise ApiError("UNAUTHORIZED", "the bearer token is not valid")
        if scope not in scopes:
            raise ApiError("FORBIDDEN", f"this operation needs the {scope.value!r} scope")


def _with_implied(scopes: list[Scope]) -> frozenset[Scope]:
    """An admin token may also do what a monitor token does (what it reads, it may change)."""
    granted = frozenset(scopes)
    return granted | {Scope.MONITOR} if Scope.ADMIN in granted else granted
