"""Trajectory exports (docs/trajectories.md): every page of a
``session/trajectory/export`` written as JSON Lines byte for byte as the
host's operator export (``aep export trajectories``) and the Go client
write them, so that one export is the same bytes whoever asked for it."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from typing import Any, Optional


def export_line(value: Any) -> str:
    """``value`` as one export line: JSON with object keys sorted, no
    spaces, no ASCII or HTML escaping, numbers as Go writes them (a float
    between 1e-6 and 1e-4 without an exponent, U+2028 and U+2029 escaped),
    and a newline."""
    out: list[str] = []
    _encode(value, out)
    out.append("\n")
    return "".join(out)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
            "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _string(s: str) -> str:
    parts = ['"']
    for ch in s:
        if ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif ch < " ":
            parts.append("\\u%04x" % ord(ch))
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)


def _number(f: float) -> str:
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(f"{f} is not a JSON number")
    if f == int(f) and abs(f) < 1e21:
        return str(int(f))
    r = repr(f)
    if "e" in r and 1e-6 <= abs(f) < 1e21:
        return format(Decimal(r), "f")
    # Go writes a one-digit negative exponent without its leading zero.
    return re.sub(r"e-0(\d)$", r"e-\1", r)


def _encode(v: Any, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_string(v))
    elif isinstance(v, int):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(_number(v))
    elif isinstance(v, dict):
        out.append("{")
        for i, k in enumerate(sorted(v)):
            if i:
                out.append(",")
            out.append(_string(k))
            out.append(":")
            _encode(v[k], out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _encode(x, out)
        out.append("]")
    else:
        raise TypeError(f"{type(v).__name__} is not JSON")


@dataclasses.dataclass
class TrajectoryExport:
    """A whole export: ``text`` its JSON Lines, ``lines`` the same lines
    decoded; ``prefix`` is ``"complete"`` or ``"missing"`` when an
    exported episode has a prefix (None otherwise), ``prefix_missing``
    the episodes whose prefix was not recorded."""

    text: str
    lines: list[dict[str, Any]]
    records: int
    prefix: Optional[str]
    prefix_missing: list[str]


class _Pages:
    """Collects the pages of one export into a TrajectoryExport; both
    clients use it, each asking for pages its own way."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.records = 0
        self.prefix: Optional[str] = None
        self.missing: list[str] = []

    def add(self, page: Any) -> Optional[str]:
        """Takes one reply page; returns the cursor of the next page, or
        None after the last."""
        for line in page.lines:
            self.lines.append(line)
            self.text.append(export_line(line))
        self.records += page.records
        if page.prefix is not None and self.prefix != "missing":
            self.prefix = page.prefix
        self.missing.extend(page.prefix_missing or [])
        return page.next

    def result(self, out: Optional[Any]) -> TrajectoryExport:
        exp = TrajectoryExport(text="".join(self.text), lines=self.lines, records=self.records,
                               prefix=self.prefix, prefix_missing=self.missing)
        if out is not None:
            out.write(exp.text)
        return exp
