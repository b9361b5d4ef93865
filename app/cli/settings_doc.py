"""docs/settings.md, generated from the settings model: `twinlog settings-doc` writes it.

Every field of `Settings` becomes a row: its TOML key, `TWINLOG_*` variable, type and bounds,
default, unit (from the name's suffix) and description. Rows are grouped by the `# -- name --`
section comments of the class, so a setting added under a section lands in its group with no
change here. A field without a description stops the generator: an undescribed setting is one
an operator cannot use.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

DEFAULT_OUTPUT = Path("docs") / "settings.md"
REGENERATE_COMMAND = "twinlog settings-doc"
UNGROUPED = "General"

_SECTION = re.compile(r"^\s*# -- (?P<title>[^-].*?) -+\s*$")
_FIELD = re.compile(r"^\s+(?P<name>[a-z_][a-z0-9_]*)\s*:")
# Longest suffix first: `_s` would also match the end of `_ms`.
_UNITS = (("_hours", "hours"), ("_bytes", "bytes"), ("_ratio", "fraction (0 to 1]"),
          ("_ms", "milliseconds"), ("_s", "seconds"))
_BINARY_SIZES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_BOUNDS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))

_HEADER = """\
# Settings reference

Generated from the settings model (`app/settings/`) by `{command}`; a test
fails when this file and the model differ. Do not edit it by hand.

A broker takes its settings from, highest first:

1. flags of `twinlog serve` (the dedicated ones below, and `--set NAME=VALUE` for any other
   setting with a plain value);
2. environment variables `TWINLOG_<NAME>` (a table such as `auth_tokens` as JSON:
   `TWINLOG_AUTH_TOKENS='{{"s3cret": ["produce", "consume"]}}'`);
3. the TOML file given by `--config` or `TWINLOG_CONFIG_FILE` (keys are the setting names;
   `twinlog.toml` at the root of the repository is a commented example);
4. the defaults below.

Names carry their units. Bounds listed are the model's own; the store and replication check
combinations too (for example `in_sync_replicas` must be in [2, `ha_connections_max` + 1],
`ha_housekeeping_interval_ms` must exceed `ha_send_heartbeat_interval_ms`). A value that fails
any check stops `twinlog serve` with exit code 2 and a message naming the setting.
"""


class SettingsDocError(ValueError):
    """The model cannot be documented as it is (the message names the field)."""


def render(model: type[BaseSettings], serve_flags: dict[str, str] | None = None) -> str:
    """The whole reference as Markdown; `serve_flags` maps a flag name to its setting."""
    flag_of = {setting: flag for flag, setting in (serve_flags or {}).items()}
    prefix = str(model.model_config.get("env_prefix", ""))
    lines = [_HEADER.format(command=REGENERATE_COMMAND)]
    for title, names in _groups(model):
        lines += [f"## {title}", "",
                  "| setting | env var | type | default | unit | description |",
                  "|---|---|---|---|---|---|"]
        for name in names:
            lines.append(_row(name, model.model_fields[name], prefix, flag_of.get(name)))
        lines.append("")
    return "\n".join(lines)


def check(path: Path, model: type[BaseSettings], serve_flags: dict[str, str]) -> bool:
    """Whether the file at `path` is exactly what `render` makes of the model."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    return current == render(model, serve_flags)


def write(path: Path, model: type[BaseSettings], serve_flags: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(model, serve_flags), encoding="utf-8")


def _groups(model: type[BaseSettings]) -> list[tuple[str, list[str]]]:
    """Fields in declaration order under the section comment above them. A model built of parts
    (base classes holding fields) is read part by part, in the order pydantic collects them."""
    fields = model.model_fields
    groups: dict[str, list[str]] = {}
    title = UNGROUPED
    parts = [part for part in reversed(model.__mro__)
             if fields.keys() & vars(part).get("__annotations__", {}).keys()]
    for line in (line for part in parts for line in inspect.getsource(part).splitlines()):
        section = _SECTION.match(line)
        if section:
            title = section.group("title").strip()
            title = title[:1].upper() + title[1:]
            continue
        field = _FIELD.match(line)
        if field and field.group("name") in fields:
            groups.setdefault(title, []).append(field.group("name"))
    placed = {name for names in groups.values() for name in names}
    # A field declared in a way the line scan misses still gets documented.
    missed = [name for name in fields if name not in placed]
    if missed:
        groups.setdefault(UNGROUPED, []).extend(missed)
    return list(groups.items())


def _row(name: str, field: FieldInfo, env_prefix: str, flag: str | None) -> str:
    if not field.description:
        raise SettingsDocError(f"{name}: has no description; add description= to the field "
                               "in app/settings/")
    setting = f"`{name}`" + (f"<br>`--{flag.replace('_', '-')}`" if flag else "")
    env_var = f"`{(env_prefix + name).upper()}`"
    cells = [setting, env_var, _type(field), _default(name, field), _unit(name),
             field.description]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _unit(name: str) -> str:
    # A bound's suffix comes after the unit: `ha_slave_fall_behind_bytes_max` is in bytes.
    base = name.removesuffix("_max").removesuffix("_min")
    for suffix, unit in _UNITS:
        if base.endswith(suffix):
            return unit
    return ""


def _type(field: FieldInfo) -> str:
    text = _type_name(field.annotation)
    bounds = [f"{symbol} {getattr(item, attribute)}"
              for item in field.metadata for kind, attribute, symbol in _BOUNDS
              if isinstance(item, kind)]
    return ", ".join([text, *bounds])


def _type_name(annotation: Any) -> str:
    arguments = [argument for argument in typing.get_args(annotation)
                 if argument is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " or ".join(_type_name(argument) for argument in arguments) + ", optional"
    if typing.get_origin(annotation) is dict:
        return f"table: {_type_name(arguments[0])} -> {_type_name(arguments[1])}"
    if typing.get_origin(annotation) is list:
        return f"list of {_type_name(arguments[0])}"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return " | ".join(str(member.value) for member in annotation)
    names = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(name: str, field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str | Path):
        return f'`"{value}"`'
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    text = f"`{value}`"
    if isinstance(value, int) and _unit(name) == "bytes":
        for size, unit in _BINARY_SIZES:
            if value >= size and value % size == 0:
                return f"{text} ({value // size} {unit})"
    return text
