"""What generated clients need from the spec (docs/clients.md), applied by build_openapi.

- One shared `BodyEncoding` schema: pydantic and FastAPI write the utf8/base64 choice inline
  wherever it occurs (three produce fields and consume, get and lookup parameters), and a
  generator makes one enum per place. It is a `oneOf` of two `const`s rather than an `enum`:
  openapi-python-client types a const union as `Literal["utf8", "base64"]`, so a plain string
  works (its enum classes serialize with `.value`, which a `str` lacks).
- No `default` in a schema that only requests use: openapi-typescript (defaultNonNullable, its
  default) reads a property's `default` as "the server always fills this in" and makes it
  required, true of an answer and false of a request (the broker fills in what a request
  leaves out). The default stays in the description.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

BODY_ENCODING_REF = "#/components/schemas/BodyEncoding"
BODY_ENCODINGS = ("utf8", "base64")
_REF_PREFIX = "#/components/schemas/"


def shape_for_clients(document: dict[str, Any]) -> None:
    schemas: dict[str, Any] = document["components"]["schemas"]
    for holder in _schema_holders(document):
        _share_body_encoding(holder)
    schemas["BodyEncoding"] = {
        "title": "BodyEncoding", "type": "string", "enum": list(BODY_ENCODINGS),
        "description": "How a message body travels in JSON: utf8, the text itself; base64, "
                       "base64-encoded bytes (RFC 4648, padded)."}
    for name in sorted(_request_only(document)):
        _defaults_to_descriptions(schemas[name])


def _schema_holders(node: Any) -> Iterator[dict[str, Any]]:
    """Every object of the document (schemas hold schemas, so all of them are walked)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schema_holders(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_holders(value)


def _share_body_encoding(holder: dict[str, Any]) -> None:
    for key, schema in holder.items():
        if isinstance(schema, dict) and set(schema.get("enum", ())) == set(BODY_ENCODINGS):
            kept = {name: value for name, value in schema.items()
                    if name in ("description", "default")}
            holder[key] = {"$ref": BODY_ENCODING_REF, **kept}


def _refs(node: Any) -> set[str]:
    return {holder["$ref"].removeprefix(_REF_PREFIX) for holder in _schema_holders(node)
            if isinstance(holder.get("$ref"), str)}


def _closure(names: set[str], schemas: dict[str, Any]) -> set[str]:
    reached: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in reached and name in schemas:
            reached.add(name)
            todo.extend(_refs(schemas[name]))
    return reached


def _request_only(document: dict[str, Any]) -> set[str]:
    """Schemas reached from a request body and from no answer."""
    schemas = document["components"]["schemas"]
    operations = [operation for item in document["paths"].values()
                  for operation in item.values()]
    in_requests = _closure(set().union(*(_refs(operation.get("requestBody", {}))
                                         for operation in operations)), schemas)
    in_answers = _closure(set().union(*(_refs(operation.get("responses", {}))
                                        for operation in operations)), schemas)
    return in_requests - in_answers


def _defaults_to_descriptions(schema: dict[str, Any]) -> None:
    for field in schema.get("properties", {}).values():
        if "default" not in field:
            continue
        value = field.pop("default")
        default = value if isinstance(value, str) else json.dumps(value)
        said = field.get("description", "").rstrip()
        field["description"] = f"{said} Default: `{default}`.".lstrip()
