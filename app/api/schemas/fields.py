"""Bounds, patterns and field types shared by the resources' models."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema

KEYS_PER_MESSAGE_MAX = 32


PROPERTIES_PER_MESSAGE_MAX = 64


QUEUE_ID_MAX = 1023


TOPIC_PATTERN = r"^[A-Za-z0-9_%|-]{1,127}$"


GROUP_PATTERN = r"^[A-Za-z0-9_%|-]{1,255}$"


# Patterns leave out C1 controls (\x7f-\x9f) too: JSON Schema's \s and Python's differ there
# (\x85), and the spec must refuse exactly what the broker refuses.
_KEY_CHARACTER = r"[^\s,\x00-\x1f\x7f-\x9f]"


MessageKey = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=rf"^{_KEY_CHARACTER}+$")]


# The X-Twinlog-Keys header: 1 to KEYS_PER_MESSAGE_MAX keys joined by commas (spaces or tabs
# around them allowed), nothing else.
_HEADER_KEY = rf"[ \t]*{_KEY_CHARACTER}{{1,128}}[ \t]*"


KEYS_HEADER_PATTERN = rf"^{_HEADER_KEY}(,{_HEADER_KEY}){{0,{KEYS_PER_MESSAGE_MAX - 1}}}$"


# The header as the spec shows it, with its pattern, for an endpoint that only documents
# (app/api/asgi_route.py): the produce callables check it with Python's re (app/api/produce.py).
# Given to pydantic as a pattern, its regex engine (Rust's) would expand the bounded repeats of
# a Unicode class into about 13 MB of automaton that every broker holds for good (issue 31).
KeysHeader = Annotated[str, WithJsonSchema({"type": "string", "pattern": KEYS_HEADER_PATTERN})]


MessageTag = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=r"^[^|\x00-\x1f]+$")]


PropertyName = Annotated[str, StringConstraints(min_length=1, max_length=64,
                                                pattern=r"^[A-Za-z0-9_.-]+$")]


PropertyValue = Annotated[str, StringConstraints(max_length=4096, pattern=r"^[^\x00-\x1f]*$")]


def _whole_number(value: Any) -> Any:
    """JSON Schema's `integer` includes 1.0: strict models take a float without a fraction as
    that integer (anything else goes on to the strict check, which refuses it). A boolean is
    refused here: it equals 0 or 1, so an enum of integers would take it."""
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is bool:
        raise ValueError("Input should be a valid integer")
    return value


# An integer field of a request body: JSON integers, and numbers like 1.0.
WholeNumber = BeforeValidator(_whole_number)


# (The bounds come before the validator: after it, pydantic writes them into the JSON schema
# as `ge`/`le`, which JSON Schema does not know.)
QueueId = Annotated[int, Field(ge=0, le=QUEUE_ID_MAX), WholeNumber]


QueueCount = Annotated[int, Field(ge=1, le=QUEUE_ID_MAX + 1), WholeNumber]


Offset = Annotated[int, Field(ge=0, le=2**53 - 1), WholeNumber]


STRICT = ConfigDict(extra="forbid", strict=True)
