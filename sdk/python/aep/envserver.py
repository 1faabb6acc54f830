"""Serve a Gymnasium-style environment to an aep host (docs/env.md, Python).

The env capability runs an external environment as its own process and
talks to it over stdin and stdout, one JSON object per line, in the protocol
of schemas/envproto/envproto.json. This module is that protocol's Python
side: it serves any object with Gymnasium's API — ``reset(seed=, options=)``
→ ``(obs, info)``, ``step(action)`` → ``(obs, reward, terminated,
truncated, info)``, ``render()``, ``close()``, ``action_space``,
``observation_space`` (and ``get_state()``/``set_state(value)`` for
session snapshots, when it has them) — converting the spaces to JSON Schema and numpy
values to JSON when numpy is present. Neither gymnasium nor numpy is needed.

It uses the standard library only, so it also runs where the SDK's own
dependencies are not installed (the sandbox shows only the system's
Python), as a script::

    python3 /path/to/sdk/python/aep/envserver.py my_envs.py:CartPole
    python3 -m aep.envserver my_package.envs:make_env --kwargs '{"size": 8}'

The argument names a module (a dotted name, or a path to a ``.py`` file)
and, after the colon, a class or function in it that returns the
environment. From Python: ``serve(env)``.

While serving, ``sys.stdout`` is redirected to ``sys.stderr``: a ``print``
in the environment goes to the host's log instead of breaking the protocol.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import sys
import traceback
from typing import Any, Callable, Optional, TextIO

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the machine
    _np = None

PROTOCOL = "1"

__all__ = ["Box", "Discrete", "PROTOCOL", "EnvServer", "load", "main", "serve", "space_to_schema", "to_json"]


class Discrete:
    """A minimal stand-in for ``gymnasium.spaces.Discrete`` for environments
    written without gymnasium: integers ``start … start+n-1``."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start = int(n), int(start)

    def contains(self, x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and self.start <= x < self.start + self.n

    __contains__ = contains


class Box:
    """A minimal stand-in for ``gymnasium.spaces.Box``: numbers within
    ``low``/``high`` (scalars) of ``shape`` (a tuple; ``()`` is one number)."""

    def __init__(self, low: float, high: float, shape: tuple = ()) -> None:
        self.low, self.high, self.shape = low, high, tuple(shape)

    def contains(self, x: Any) -> bool:
        def ok(v: Any, shape: tuple) -> bool:
            if not shape:
                return isinstance(v, (int, float)) and not isinstance(v, bool) and self.low <= v <= self.high
            return isinstance(v, (list, tuple)) and len(v) == shape[0] and all(ok(e, shape[1:]) for e in v)
        return ok(x, self.shape)

    __contains__ = contains


def _finite(v: Any) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _uniform(bound: Any) -> Optional[float]:
    """One finite number for a bound given as a scalar or an array whose
    elements are all equal; None otherwise."""
    if hasattr(bound, "tolist"):
        bound = bound.tolist()
    flat: list = []

    def walk(b: Any) -> None:
        if isinstance(b, (list, tuple)):
            for e in b:
                walk(e)
        else:
            flat.append(b)
    walk(bound)
    if not flat or any(e != flat[0] for e in flat):
        return None
    return _finite(flat[0])


def space_to_schema(space: Any) -> dict:
    """The JSON Schema of a space: Discrete, Box, MultiDiscrete,
    MultiBinary, Text, Dict and Tuple (gymnasium's, or any object of those
    class names with their attributes), or a dict that already is a schema.
    Anything else is ``{}`` (any JSON value)."""
    if space is None:
        return {}
    if isinstance(space, dict):
        return space
    kind = type(space).__name__
    if kind == "Discrete":
        start = int(getattr(space, "start", 0))
        return {"type": "integer", "minimum": start, "maximum": start + int(space.n) - 1}
    if kind == "Box":
        shape = tuple(getattr(space, "shape", ()) or ())
        dtype = str(getattr(space, "dtype", "float"))
        item: dict = {"type": "integer" if "int" in dtype else "number"}
        lo, hi = _uniform(space.low), _uniform(space.high)
        if lo is not None:
            item["minimum"] = lo
        if hi is not None:
            item["maximum"] = hi
        for n in reversed(shape):
            item = {"type": "array", "items": item, "minItems": int(n), "maxItems": int(n)}
        return item
    if kind == "MultiDiscrete":
        nvec = space.nvec.tolist() if hasattr(space.nvec, "tolist") else list(space.nvec)
        start = getattr(space, "start", None)
        starts = start.tolist() if hasattr(start, "tolist") else (list(start) if start is not None else [0] * len(nvec))
        if nvec and isinstance(nvec[0], list):  # a matrix of dimensions: element bounds vary
            return {"type": "array"}
        return {"type": "array", "minItems": len(nvec), "maxItems": len(nvec),
                "prefixItems": [{"type": "integer", "minimum": int(s), "maximum": int(s) + int(n) - 1} for n, s in zip(nvec, starts)]}
    if kind == "MultiBinary":
        n = space.n if isinstance(space.n, int) else int(space.n[0]) if len(space.n) == 1 else None
        item = {"type": "integer", "minimum": 0, "maximum": 1}
        return {"type": "array", "items": item, **({"minItems": n, "maxItems": n} if n is not None else {})}
    if kind == "Text":
        s: dict = {"type": "string"}
        if getattr(space, "min_length", None) is not None:
            s["minLength"] = int(space.min_length)
        if getattr(space, "max_length", None) is not None:
            s["maxLength"] = int(space.max_length)
        return s
    if kind == "Dict":
        spaces = dict(space.spaces) if hasattr(space, "spaces") else dict(space)
        return {"type": "object", "properties": {str(k): space_to_schema(v) for k, v in spaces.items()},
                "required": [str(k) for k in spaces], "additionalProperties": False}
    if kind == "Tuple":
        subs = list(space.spaces) if hasattr(space, "spaces") else list(space)
        return {"type": "array", "prefixItems": [space_to_schema(v) for v in subs], "minItems": len(subs), "maxItems": len(subs)}
    return {}


def to_json(x: Any) -> Any:
    """A JSON value for x: numpy arrays and scalars become lists and
    numbers, tuples lists, mapping keys strings; NaN and infinities (which
    JSON has not) become null."""
    if _np is not None:
        if isinstance(x, _np.ndarray):
            return to_json(x.tolist())
        if isinstance(x, _np.generic):
            return to_json(x.item())
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if hasattr(x, "tolist"):
        return to_json(x.tolist())
    if hasattr(x, "item"):
        return to_json(x.item())
    return str(x)


def from_json(space: Any, v: Any) -> Any:
    """The action the environment expects for a JSON value: numpy arrays for
    Box, MultiDiscrete and MultiBinary when numpy is present, tuples for
    Tuple, recursively for Dict."""
    kind = type(space).__name__
    if kind in ("Box", "MultiDiscrete", "MultiBinary") and _np is not None and hasattr(space, "dtype") and space.dtype is not None:
        try:
            return _np.asarray(v, dtype=space.dtype)
        except (TypeError, ValueError):
            return v
    if kind == "Discrete" and isinstance(v, float) and v.is_integer():
        return int(v)
    if kind == "Tuple" and isinstance(v, list):
        subs = list(space.spaces) if hasattr(space, "spaces") else list(space)
        return tuple(from_json(s, e) for s, e in zip(subs, v)) if len(subs) == len(v) else tuple(v)
    if kind == "Dict" and isinstance(v, dict):
        spaces = dict(space.spaces) if hasattr(space, "spaces") else dict(space)
        return {k: from_json(spaces[k], e) if k in spaces else e for k, e in v.items()}
    return v


def _contains(space: Any, action: Any) -> bool:
    check = getattr(space, "contains", None)
    if check is None or isinstance(space, dict):
        return True  # a bare schema: the environment checks
    try:
        return bool(check(action))
    except Exception:  # a space that cannot even compare the value
        return False


class EnvServer:
    """Answers the protocol's requests for one environment; ``serve`` runs
    it over a process's stdin and stdout."""

    def __init__(self, env: Any, name: str = "", description: str = "") -> None:
        self.env = env
        self.name = name or type(env).__name__
        self.description = description or (type(env).__doc__ or "").strip().split("\n")[0]

    def snapshots(self) -> bool:
        """Whether the environment saves its state: it has ``get_state()``,
        returning a JSON value that includes its random state, and
        ``set_state(value)``; then its episodes survive session snapshots."""
        return callable(getattr(self.env, "get_state", None)) and callable(getattr(self.env, "set_state", None))

    def handle(self, req: dict) -> dict:
        """The reply (without ``req_id``) to one request."""
        t = req.get("type")
        try:
            if t == "envproto/spec/req":
                return {"type": "envproto/spec/resp", "protocol": PROTOCOL, "name": self.name,
                        "description": self.description,
                        "action_space": space_to_schema(getattr(self.env, "action_space", None)),
                        "observation_space": space_to_schema(getattr(self.env, "observation_space", None)),
                        "render_modes": list((getattr(self.env, "metadata", None) or {}).get("render_modes", [])),
                        "snapshots": self.snapshots()}
            if t == "envproto/reset/req":
                kw: dict = {}
                if req.get("seed") is not None:
                    kw["seed"] = int(req["seed"])
                if req.get("options") is not None:
                    kw["options"] = req["options"]
                out = self.env.reset(**kw)
                obs, info = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
                return {"type": "envproto/reset/resp", "observation": to_json(obs), "info": to_json(info or {})}
            if t == "envproto/step/req":
                space = getattr(self.env, "action_space", None)
                action = from_json(space, req.get("action"))
                if not _contains(space, action):
                    return {"type": "envproto/error", "bad_action": True,
                            "message": f"action {json.dumps(req.get('action'))[:64]} is not in the action space"}
                out = self.env.step(action)
                if len(out) == 4:  # the older gym API: done, no truncation
                    obs, reward, done, info = out
                    terminated, truncated = done, False
                else:
                    obs, reward, terminated, truncated, info = out
                return {"type": "envproto/step/resp", "observation": to_json(obs), "reward": float(to_json(reward) or 0.0),
                        "terminated": bool(terminated), "truncated": bool(truncated), "info": to_json(info or {})}
            if t == "envproto/render/req":
                r = self.env.render() if hasattr(self.env, "render") else None
                if r is None:
                    text = ""
                elif isinstance(r, str):
                    text = r
                elif hasattr(r, "shape"):
                    text = f"<frame of shape {tuple(r.shape)}>"
                else:
                    text = str(r)
                return {"type": "envproto/render/resp", "text": text}
            if t == "envproto/close/req":
                if hasattr(self.env, "close"):
                    self.env.close()
                return {"type": "envproto/close/resp"}
            if t in ("envproto/state/req", "envproto/restore/req") and not self.snapshots():
                return {"type": "envproto/error", "message": "this environment does not save its state"}
            if t == "envproto/state/req":
                return {"type": "envproto/state/resp", "state": json.dumps(to_json(self.env.get_state()), allow_nan=False)}
            if t == "envproto/restore/req":
                self.env.set_state(json.loads(req["state"]))
                return {"type": "envproto/restore/resp"}
            return {"type": "envproto/error", "message": f"unknown request type {str(t)[:64]!r}"}
        except Exception as e:  # the environment's own failure: reported, the episode goes on
            traceback.print_exc(file=sys.stderr)
            return {"type": "envproto/error", "message": f"{type(e).__name__}: {e}"[:1000]}

    def serve(self, stdin: Optional[TextIO] = None, stdout: Optional[TextIO] = None) -> int:
        """Answers requests until ``envproto/close/req`` or the end of
        input; returns the exit status."""
        real_out = stdout or sys.stdout
        inp = stdin or sys.stdin
        saved, sys.stdout = sys.stdout, sys.stderr
        try:
            for line in inp:
                line = line.strip()
                if not line:
                    continue
                try:
                    req = json.loads(line)
                except ValueError as e:
                    print(f"envserver: not JSON: {e}", file=sys.stderr)
                    return 2
                reply = self.handle(req)
                reply["req_id"] = req.get("id", "")
                real_out.write(json.dumps(reply, separators=(",", ":"), allow_nan=False) + "\n")
                real_out.flush()
                if req.get("type") == "envproto/close/req":
                    return 0
            return 0
        finally:
            sys.stdout = saved


def serve(env: Any, name: str = "", description: str = "") -> int:
    """Serves env over this process's stdin and stdout (see the module's
    documentation); returns the exit status."""
    return EnvServer(env, name, description).serve()


def load(target: str) -> Callable[..., Any]:
    """The class or function named by ``module:attr``, where module is a
    dotted module name or a path to a ``.py`` file."""
    mod_name, sep, attr = target.rpartition(":")
    if not sep or not mod_name or not attr:
        raise ValueError(f"want module:attr, got {target!r}")
    if mod_name.endswith(".py") or os.sep in mod_name:
        path = os.path.abspath(mod_name)
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    return getattr(module, attr)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="aep.envserver", description="Serve a Gymnasium-style environment to an aep host over stdin/stdout.")
    ap.add_argument("target", help="module:attr, a class or function returning the environment; module may be a path to a .py file")
    ap.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments for it")
    ap.add_argument("--name", default="", help="the environment's name in its spec")
    args = ap.parse_args(argv)
    env = load(args.target)(**json.loads(args.kwargs))
    return serve(env, name=args.name)


if __name__ == "__main__":
    # Run as a script, this file's directory (the aep package) is first on
    # sys.path; its modules must not shadow the environment's imports.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)
    sys.exit(main())
