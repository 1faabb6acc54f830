"""Gymnasium-style environments over the env capability (docs/env.md).

``AEPEnv`` has Gymnasium's ``Env`` API: ``reset(seed=, options=)`` →
``(obs, info)``, ``step(action)`` → ``(obs, reward, terminated, truncated,
info)``, ``render()``, ``close()``. ``AEPVectorEnv`` steps ``num_envs``
episodes per request with ``env/step_batch`` and Gymnasium's autoreset
modes (``next_step``, ``same_step``, ``disabled``).

When gymnasium is installed, AEPEnv is a ``gymnasium.Env`` and the spaces
(from ``env/spaces``, JSON Schema) become gymnasium spaces where a schema
maps onto one (bounded integers → Discrete, bounded numbers → Box, fixed-
length numeric arrays → Box, objects → Dict); otherwise, and for schemas no
gymnasium space expresses, a space is a SchemaSpace (the schema itself).
Batched values are lists, or numpy arrays when numpy is installed.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .client import Client

try:  # optional: the SDK's only required dependency is pydantic
    import gymnasium as _gym
except ImportError:  # pragma: no cover - depends on the machine
    _gym = None

try:
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the machine
    _np = None

AUTORESET_MODES = ("next_step", "same_step", "disabled")


class SchemaSpace:
    """A space described by its JSON Schema, when no gymnasium space can
    hold it (or gymnasium is not installed). ``contains`` checks the JSON
    type, enum and bounds; the host checks the rest when stepping."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema if isinstance(schema, dict) else {}

    def contains(self, x: Any) -> bool:
        return _matches(self.schema, x)

    __contains__ = contains

    def __repr__(self) -> str:
        return f"SchemaSpace({self.schema!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SchemaSpace) and other.schema == self.schema


_JSON_TYPES = {
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "null": lambda x: x is None,
}


def _matches(s: dict, x: Any) -> bool:
    x = _plain(x)
    if "enum" in s and x not in s["enum"]:
        return False
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_JSON_TYPES.get(tt, lambda _: True)(x) for tt in types):
            return False
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if "minimum" in s and x < s["minimum"] or "maximum" in s and x > s["maximum"]:
            return False
    if isinstance(x, dict):
        props = s.get("properties", {})
        if any(k not in x for k in s.get("required", [])):
            return False
        return all(_matches(props[k], v) for k, v in x.items() if k in props)
    if isinstance(x, list) and isinstance(s.get("items"), dict):
        return all(_matches(s["items"], v) for v in x)
    return True


def to_space(schema: Any) -> Any:
    """A gymnasium space for a JSON Schema where one fits, else SchemaSpace."""
    if _gym is None or not isinstance(schema, dict):
        return SchemaSpace(schema)
    spaces = _gym.spaces
    t = schema.get("type")
    enum = schema.get("enum")
    if enum and all(isinstance(v, int) and not isinstance(v, bool) for v in enum) \
            and sorted(enum) == list(range(min(enum), max(enum) + 1)):
        return spaces.Discrete(len(enum), start=min(enum))
    if t == "integer" and "minimum" in schema and "maximum" in schema:
        return spaces.Discrete(int(schema["maximum"]) - int(schema["minimum"]) + 1, start=int(schema["minimum"]))
    if t == "boolean":
        return spaces.Discrete(2)
    if t == "number" and "minimum" in schema and "maximum" in schema:
        return spaces.Box(low=float(schema["minimum"]), high=float(schema["maximum"]), shape=(), dtype=_np.float64)
    if t == "array" and schema.get("minItems") is not None and schema.get("minItems") == schema.get("maxItems"):
        item = schema.get("items", {})
        if item.get("type") in ("number", "integer"):
            return spaces.Box(low=float(item.get("minimum", -_np.inf)), high=float(item.get("maximum", _np.inf)),
                              shape=(int(schema["minItems"]),),
                              dtype=_np.int64 if item.get("type") == "integer" else _np.float64)
    if t == "object" and isinstance(schema.get("properties"), dict):
        subs = {k: to_space(v) for k, v in schema["properties"].items()}
        if all(isinstance(v, spaces.Space) for v in subs.values()):
            return spaces.Dict(subs)
    return SchemaSpace(schema)


def _plain(x: Any) -> Any:
    """numpy values as plain Python, so they go on the wire as JSON."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _batch(values: list, dtype: Any = None) -> Any:
    if _np is None:
        return values
    return _np.asarray(values, dtype=dtype) if dtype is not None else values


_Base: Any = _gym.Env if _gym is not None else object


class AEPEnv(_Base):  # type: ignore[misc, valid-type]
    """One episode of a host environment as a Gymnasium environment.

    The episode is created by the first reset and reused by later ones
    (``env/reset`` with its ``episode_id``); ``close()`` closes it on the
    host. ``options`` given here are sent with every reset that passes none.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, client: Client, env_name: str, *, options: Optional[dict] = None,
                 render_mode: Optional[str] = None) -> None:
        self.client = client
        self.env_name = env_name
        self.default_options = options
        self.render_mode = render_mode
        self.episode_id: Optional[str] = None
        spaces = client.env_spaces(env_name=env_name)
        self.action_schema = spaces.action_space
        self.observation_schema = spaces.observation_space
        self.action_space = to_space(spaces.action_space)
        self.observation_space = to_space(spaces.observation_space)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple[Any, dict]:
        if _gym is not None:
            super().reset(seed=seed)
        r = self.client.env_reset(env_name=self.env_name, episode_id=self.episode_id, seed=seed,
                                  options=options if options is not None else self.default_options)
        self.episode_id = r.episode_id
        return r.observation, r.info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.episode_id is None:
            raise RuntimeError("AEPEnv.step before reset")
        r = self.client.env_step(episode_id=self.episode_id, action=_plain(action))
        return r.observation, r.reward, r.terminated, r.truncated, r.info

    def render(self) -> Optional[str]:
        if self.episode_id is None:
            return None
        return self.client.env_render(episode_id=self.episode_id).text

    def close(self) -> None:
        if self.episode_id is not None:
            eid, self.episode_id = self.episode_id, None
            self.client.env_close(episode_id=eid)


class AEPVectorEnv:
    """``num_envs`` episodes of one host environment stepped together by
    ``env/step_batch``, with Gymnasium's vector API: ``reset`` →
    ``(obs, infos)``, ``step(actions)`` → ``(obs, rewards, terminations,
    truncations, infos)``. ``infos`` follows Gymnasium's convention: for each
    key, a list with one value per sub-environment and ``"_key"``, a mask of
    the ones that have it. In ``same_step`` mode the finished episodes'
    last observation and info are ``infos["final_obs"]`` and
    ``infos["final_info"]`` (Gymnasium 1.x names). In ``disabled`` mode,
    reset finished sub-environments with
    ``reset(options={"reset_mask": [...]})``."""

    def __init__(self, client: Client, env_name: str, num_envs: int, *, autoreset_mode: str = "next_step",
                 options: Optional[dict] = None) -> None:
        if autoreset_mode not in AUTORESET_MODES:
            raise ValueError(f"autoreset_mode {autoreset_mode!r}: one of {AUTORESET_MODES}")
        if num_envs < 1:
            raise ValueError("num_envs must be at least 1")
        self.client = client
        self.env_name = env_name
        self.num_envs = num_envs
        self.autoreset_mode = autoreset_mode
        self.default_options = options
        self.episode_ids: list[Optional[str]] = [None] * num_envs
        spaces = client.env_spaces(env_name=env_name)
        self.single_action_space = to_space(spaces.action_space)
        self.single_observation_space = to_space(spaces.observation_space)
        self.metadata = {"autoreset_mode": autoreset_mode}

    def reset(self, *, seed: Optional[int | Sequence[Optional[int]]] = None,
              options: Optional[dict] = None) -> tuple[Any, dict]:
        """Resets every sub-environment (or those of ``options["reset_mask"]``);
        an int seed gives sub-environment i the seed ``seed + i``."""
        opts = dict(options) if options is not None else None
        mask = opts.pop("reset_mask", None) if opts else None
        if opts is not None and not opts:
            opts = None
        if opts is None:
            opts = self.default_options
        if seed is None or isinstance(seed, int):
            seeds = [None if seed is None else seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        obs: list[Any] = [None] * self.num_envs
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        for i in range(self.num_envs):
            if mask is not None and not mask[i]:
                continue
            r = self.client.env_reset(env_name=self.env_name, episode_id=self.episode_ids[i], seed=seeds[i],
                                      options=opts)
            self.episode_ids[i] = r.episode_id
            obs[i], infos[i] = r.observation, r.info
        return obs, _gather(infos)

    def step(self, actions: Sequence[Any]) -> tuple[Any, Any, Any, Any, dict]:
        if any(e is None for e in self.episode_ids):
            raise RuntimeError("AEPVectorEnv.step before reset")
        # The reply as arrays (Client.env_step_arrays): no model per episode.
        b = self.client.env_step_arrays(self.episode_ids,  # type: ignore[arg-type]
                                        actions if hasattr(actions, "tolist") else list(actions),
                                        autoreset_mode=self.autoreset_mode)
        infos = b.infos
        for i in range(len(infos)):
            if b.reset[i]:
                infos[i]["reset"] = True
            if self.autoreset_mode == "same_step" and (b.final_observations[i] is not None or
                                                       b.final_infos[i] is not None):
                infos[i]["final_obs"] = b.final_observations[i]
                infos[i]["final_info"] = b.final_infos[i] or {}
        return b.observations, b.rewards, b.terminated, b.truncated, _gather(infos)

    def close(self) -> None:
        for i, eid in enumerate(self.episode_ids):
            if eid is not None:
                self.episode_ids[i] = None
                self.client.env_close(episode_id=eid)


def _gather(infos: list[dict]) -> dict:
    keys: list[str] = []
    for info in infos:
        for k in info:
            if k not in keys:
                keys.append(k)
    out: dict[str, Any] = {}
    for k in keys:
        out[k] = [info.get(k) for info in infos]
        out["_" + k] = _batch([k in info for info in infos], "bool")
    return out
