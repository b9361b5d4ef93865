"""What every admin command shares: the broker's address and token, one HTTP call, output.

The address comes from `--url` or TWINLOG_URL (default http://127.0.0.1:8080), the token from
`--token` or TWINLOG_TOKEN. A failure is one line on stderr, from the broker's problem+json
when it answered, and an exit code that says what failed:

- 0: done;
- 1: the broker refused (any 4xx or 5xx other than 404);
- 2: the command line is wrong (argparse);
- 3: the broker could not be reached (connection refused, timeout);
- 4: not found (404: an unknown topic, group or message);
- 5: `ha status` only: the broker answered, and replication is not healthy (app/cli/ha.py);
- 141: the reader of the output went away (a closed pipe: `... | head`), as a command killed
  by SIGPIPE reports in a shell (app/cli/main.py).

The address and token may be given before the command's name (`twinlog --url U topic list`) or
after it (`twinlog topic list --url U`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx  # loaded by the commands that call a broker, not by `twinlog serve`

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_UNHEALTHY = 5
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE
DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 30.0


class CliError(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_address_arguments(parser: argparse.ArgumentParser) -> None:
    """`--url` and `--token`, on the `twinlog` command itself and on each admin command: given
    before or after the command's name, they mean the same (after it wins when both are).
    Neither has a parser default, so that one given before is not overwritten by the
    command's default; `address` applies the environment and the default afterwards."""
    parser.add_argument("--url", default=argparse.SUPPRESS,
                        help=f"the broker's HTTP address (env TWINLOG_URL; default {DEFAULT_URL})")
    parser.add_argument("--token", default=argparse.SUPPRESS,
                        help="a bearer token, when the broker has tokens (env TWINLOG_TOKEN)")


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    add_address_arguments(parser)
    parser.add_argument("--json", action="store_true", dest="as_json",
                        help="print the broker's JSON answer instead of a table")


def address(arguments: argparse.Namespace) -> tuple[str, str | None]:
    """The broker's URL and token: from the command line (before or after the command's
    name), else TWINLOG_URL and TWINLOG_TOKEN, else the default URL and no token."""
    url = getattr(arguments, "url", None) or os.environ.get("TWINLOG_URL") or DEFAULT_URL
    token = getattr(arguments, "token", None) or os.environ.get("TWINLOG_TOKEN") or None
    return url, token


def require_url(arguments: argparse.Namespace, reason: str) -> None:
    """A command that must name its broker on the command line (a role change): never the
    default or TWINLOG_URL. Exit 2 with `reason` otherwise."""
    if getattr(arguments, "url", None) is None:
        raise CliError(EXIT_USAGE, reason)


class BrokerClient:
    def __init__(self, url: str, token: str | None, timeout_s: float = TIMEOUT_S) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.url = url

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def call(self, method: str, path: str, *, ok: Sequence[int] = (200,), **kwargs: Any) -> Any:
        """The JSON answer of one call; a CliError when it fails (see the module's codes)."""
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            reason = str(error) or type(error).__name__
            raise CliError(EXIT_UNREACHABLE, f"{self.url}: {reason}") from error
        if response.status_code not in ok:
            code = EXIT_NOT_FOUND if response.status_code == 404 else EXIT_REFUSED
            raise CliError(code, describe_problem(response))
        return response.json() if response.content else None


def describe_problem(response: httpx.Response) -> str:
    """One line from a problem+json answer (status, error code, detail), or the raw text."""
    try:
        problem = response.json()
    except ValueError:
        return f"{response.status_code}: {response.text[:200]}"
    if not isinstance(problem, dict):
        return f"{response.status_code}: {str(problem)[:200]}"
    parts = [str(response.status_code)]
    for field in ("error_code", "put_status"):
        # A refused put names its status twice (error_code and put_status): say it once.
        if problem.get(field) and str(problem[field]) not in parts:
            parts.append(str(problem[field]))
    detail = problem.get("detail") or problem.get("title") or ""
    return " ".join(parts) + (f": {detail}" if detail else "")


def run(handler: Callable[[argparse.Namespace, BrokerClient], int]
        ) -> Callable[[argparse.Namespace], int]:
    """Wrap an admin command: a client for its connection arguments, errors as one line."""

    def command(arguments: argparse.Namespace) -> int:
        try:
            with BrokerClient(*address(arguments)) as client:
                return handler(arguments, client)
        except CliError as error:
            print(f"twinlog: {error}", file=sys.stderr)
            return error.exit_code

    return command


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def print_result(arguments: argparse.Namespace, answer: Any, line: str) -> int:
    """What a change answered: its JSON with --json, else one line saying what was done."""
    if arguments.as_json:
        print_json(answer)
    else:
        print(line)
    return 0


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in cells)])
              for i, header in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows)
               for i in range(len(headers))]
    print(_line(list(headers), widths, numeric))
    for row in cells:
        print(_line(row, widths, numeric))


def _line(cells: list[str], widths: list[int], numeric: list[bool]) -> str:
    return "  ".join(cell.rjust(width) if number else cell.ljust(width)
                     for cell, width, number in zip(cells, widths, numeric, strict=True)).rstrip()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)
