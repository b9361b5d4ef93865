"""IdentityEnum: an Enum hashed by identity, for the statuses every put looks up.

`enum.Enum` hashes a member by hashing its name in Python code (`Enum.__hash__`), about
0.3 us a look-up on this machine; a put's answer looks its status up about six times (the
status map, the counters, `is_stored`). Members are singletons and compare by identity, so
the identity hash (object's, in C) agrees with equality; only the order in which a set of
members iterates changes, which names-hash order never fixed either (PYTHONHASHSEED).
"""

from __future__ import annotations

import enum


class IdentityEnum(enum.Enum):
    __hash__ = object.__hash__
