"""Messages to and from the wire, shared by aep.Client and aep.AsyncClient.

A request made by a generated method (_methods.py) is written straight to
JSON from its arguments: its type, id, proto and ts are the SDK's own and
its fields are the method's keyword arguments, so it is well formed by
construction and no model is built or validated for it. The host validates
every message it reads against the contract (schemas/) and answers
``schema_violation`` naming the field, as it would for a model built by
hand. Arguments that are models (``aep.models.MemoryEntry(...)``) are
written in their wire form (wire names, the fields that were set); numpy
arrays and scalars as their ``tolist()``. NaN and infinities are refused
here: they are not JSON.

What a host sends is decoded by its ``type`` into its model
(``HOST_MESSAGE``, validated by pydantic-core from the JSON text).
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

from . import _models as m


def _default(o: Any) -> Any:
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json", by_alias=True, exclude_unset=True)
    tolist = getattr(o, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return tolist()
    if isinstance(o, (set, frozenset)):
        return list(o)
    raise TypeError(f"{type(o).__name__} is not JSON: pass plain values, lists, dicts or aep.models")


_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default)


def _wire(v: Any) -> Any:
    """A request's field with its models in their wire form."""
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(v, (list, tuple)) and any(isinstance(e, BaseModel) for e in v):
        return [_wire(e) for e in v]
    return v


def encode(value: Any) -> str:
    """Any JSON value (with models and numpy values in it) as compact JSON,
    written by pydantic-core (several times quicker than the json module
    here). NaN and infinities are refused, as the json module refuses them:
    they are not JSON."""
    try:
        out = to_json(value, fallback=_default, inf_nan_mode="constants")
    except PydanticSerializationError as e:
        raise TypeError(str(e)) from None
    if b"NaN" in out or b"Infinity" in out:
        # Perhaps only inside a string: the json module tells, and raises
        # ValueError for a number that is not one.
        return _encoder.encode(value)
    return out.decode()

_TYPES: dict[type, str] = {}


def wire_type(model: type[m.Model]) -> str:
    """The ``type`` of a message model."""
    t = _TYPES.get(model)
    if t is None:
        t = _TYPES[model] = model.model_fields["type"].default
    return t


def encode_message(model: type[m.Model], msg_id: str, required: dict[str, Any],
                   optional: dict[str, Any]) -> str:
    """The line of a message of model's type: the envelope (type, id, proto,
    ts), then required, then the optional fields that are not None."""
    body: dict[str, Any] = {"type": wire_type(model), "id": msg_id, "proto": "1.0", "ts": time.time()}
    for k, v in required.items():
        body[k] = v if v is None or type(v) in _PLAIN else _wire(v)
    for k, v in optional.items():
        if v is not None:
            body[k] = v if type(v) in _PLAIN else _wire(v)
    return encode(body)


_PLAIN = frozenset((str, int, float, bool, dict))  # never a model at the top


decode = m.HOST_MESSAGE.validate_json
"""One line a host sent as its model; raises pydantic.ValidationError."""


def reply_of(line: str) -> tuple[Optional[str], Optional[str]]:
    """The ``type`` and ``req_id`` of a line that no model decodes, for
    failing its request with the reason: (None, None) when it is not a JSON
    object."""
    try:
        raw = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(raw, dict):
        return None, None
    rid, t = raw.get("req_id"), raw.get("type")
    return (t if isinstance(t, str) else ""), (rid if isinstance(rid, str) else None)


class Raw:
    """The reply of a request that wants it as the parsed JSON object (a
    dict) rather than as a model: ``Raw(m.EnvStepBatchRespMessage)``. The
    client reads such a reply with json.loads alone, found by its envelope
    (peek), and checks its type and req_id; a line peek cannot read is
    decoded as usual and dumped back to its wire form."""

    __slots__ = ("model", "type")

    def __init__(self, model: type[m.Model]) -> None:
        self.model = model
        self.type = wire_type(model)


_HEAD = '{"type":"'
_REQ = ',"req_id":"'


def peek(line: str) -> tuple[Optional[str], Optional[str]]:
    """The type and req_id of a line whose envelope comes first, as aep
    writes it (wire.Encode: type, id, proto, ts, req_id, then the body);
    (None, None) for any other. Only a hint: what it finds is checked
    against the parsed line."""
    if not line.startswith(_HEAD):
        return None, None
    end = line.find('"', 9)
    if end < 0:
        return None, None
    i = line.find(_REQ, end, end + 256)
    if i < 0:
        return line[9:end], None
    j = line.find('"', i + 11)
    return line[9:end], (line[i + 11:j] if j > 0 else None)


def raw_reply(line: str, want: Raw, rid: str) -> Optional[dict[str, Any]]:
    """line as a dict when it is the reply want expects to request rid;
    None when it is not (then it takes the usual way)."""
    try:
        d = json.loads(line)
    except ValueError:
        return None
    if isinstance(d, dict) and d.get("type") == want.type and d.get("req_id") == rid:
        return d
    return None
