"""model_dump() of the generated models is the wire form, and round-trips
through a real host unchanged.

- Every model of aep.models, built from a complete value made from the
  contract (gen/contract/aep.schema.json: every property, required or not),
  dumps with model_dump() and model_dump_json() to exactly that value: the
  wire's names (``from``, ``copy``, ``schema``, never ``from_``) and nothing
  it did not have; and the dump builds the same model again.
- Through the host: a session whose client encodes every request with plain
  ``model_dump()`` (not the client's own encoder) drives a real ``aep
  serve`` through every capability. The host must accept every request
  (no parse_error or schema_violation), and every line the host sent,
  decoded into its model, must dump to that line unchanged.
"""

from __future__ import annotations

import inspect
import json
import os
import time
import unittest
from typing import Any, Callable, Optional
from unittest import mock

from tests import hosts
from tests.hosts import TOKEN

import aep
from aep import _codec, _syncio, models as m

BUNDLE = os.path.join(hosts.ROOT, "gen", "contract", "aep.schema.json")


def _models() -> dict[str, type[m.Model]]:
    return {n: c for n, c in vars(m).items()
            if inspect.isclass(c) and issubclass(c, m.Model) and c is not m.Model}


class Sampler:
    """A complete value of a schema of the bundle: every property present,
    each of the first type the schema allows."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def of(self, s: Any, depth: int = 0) -> Any:
        if depth > 12:
            raise RecursionError("schema nests too deep")
        if not isinstance(s, dict) or not s:
            return {"any": [1, "x"]}  # an unconstrained value
        if "$ref" in s:
            return self.of(self.defs[s["$ref"].rsplit("/", 1)[-1]], depth + 1)
        if "const" in s:
            return s["const"]
        if "enum" in s:
            return s["enum"][-1]
        for k in ("oneOf", "anyOf"):
            if k in s:
                return self.of(s[k][0], depth + 1)
        if "allOf" in s:
            out: dict[str, Any] = {}
            for part in s["allOf"]:
                v = self.of(part, depth + 1)
                if isinstance(v, dict):
                    out.update(v)
            rest = {k: v for k, v in s.items() if k != "allOf"}
            if "properties" in rest:
                out.update(self.of(rest, depth + 1))
            return out
        t = s.get("type")
        if isinstance(t, list):
            t = next(x for x in t if x != "null")
        if t == "object" or "properties" in s:
            props = s.get("properties", {})
            if not props:
                return {"k": "v"}
            return {p: self.of(ps, depth + 1) for p, ps in props.items()}
        if t == "array":
            return [self.of(s.get("items", {}), depth + 1)]
        if t == "string":
            return "x" * max(1, s.get("minLength", 1))
        if t == "integer":
            return int(s.get("minimum", 0)) + 1
        if t == "number":
            return float(s.get("minimum", 0)) + 0.5
        if t == "boolean":
            return True
        return {"any": [1, "x"]}


class TestEveryModelDumpsItsWireForm(unittest.TestCase):
    def test_every_model(self) -> None:
        with open(BUNDLE, encoding="utf-8") as f:
            defs = json.load(f)["$defs"]
        sampler = Sampler(defs)
        models = _models()
        self.assertGreater(len(models), 150)
        renamed = set()
        for name, cls in sorted(models.items()):
            with self.subTest(model=name):
                self.assertIn(name, defs, "a model with no $defs entry")
                sample = sampler.of(defs[name])
                obj = cls.model_validate(sample)
                self.assertEqual(obj.model_dump(), sample)
                self.assertEqual(json.loads(obj.model_dump_json()), sample)
                self.assertEqual(cls.model_validate(obj.model_dump()), obj)
                renamed |= {(name, f.alias) for f in cls.model_fields.values() if f.alias}
        # The fields whose Python names differ from the wire's were among them.
        self.assertTrue({("ChainEdge", "from"), ("SessionForkRespMessage", "copy"),
                         ("ToolkitDefinition", "schema")} <= renamed, renamed)

    def test_python_names_build_wire_dumps(self) -> None:
        e = m.ChainEdge(from_="a", to="b")
        self.assertEqual(e.model_dump(), {"from": "a", "to": "b"})
        self.assertEqual(m.ChainEdge(**e.model_dump()), e)
        # A message built in code dumps its type and proto, unset as they are.
        p = m.PingMessage(id="p1", ts=1)
        self.assertEqual(p.model_dump(), {"type": "ping", "id": "p1", "proto": "1.0", "ts": 1})
        # pydantic's usual dump is still there when asked for.
        self.assertIn("from_", e.model_dump(by_alias=False))
        self.assertIn("when", e.model_dump(exclude_unset=False))


def _plain_dump(msg: m.Model) -> str:
    """How a user would send a model: json.dumps of model_dump()."""
    return json.dumps(msg.model_dump())


def _plain_encode(model: type[m.Model], msg_id: str, required: dict[str, Any], optional: dict[str, Any]) -> str:
    """The client's encoder replaced by a user's: the message's model built
    from the method's arguments, then _plain_dump."""
    body = {**required, **{k: v for k, v in optional.items() if v is not None}}
    return _plain_dump(model(id=msg_id, ts=time.time(), **body))


class TestRoundTripThroughTheHost(unittest.TestCase):
    def test_session(self) -> None:
        host = hosts.http_host()
        transport = _syncio.SSE(host.url)  # HTTP+SSE, as aep.Client runs it
        received: list[str] = []
        recv = transport.recv

        def recording_recv(timeout: Optional[float]) -> Optional[str]:
            line = recv(timeout)
            if line is not None:
                received.append(line)
            return line

        transport.recv = recording_recv  # type: ignore[method-assign]
        errors: list[aep.ProtocolError] = []

        def call(f: Callable[..., Any], *a: Any, **kw: Any) -> Any:
            try:
                return f(*a, **kw)
            except aep.ProtocolError as e:
                errors.append(e)
                return None

        with mock.patch.object(_codec, "encode_message", _plain_encode):
            with aep.Client.connect(transport, token=TOKEN, caps=["tools", "memory", "env", "chains", "learn", "proc",
                                                                  "skills", "subagents", "toolkits", "mcp"]) as c:
                c.ping()
                c.tool_list()
                call(c.tool_call, "run_command", arguments={"argv": ["sh", "-c", "echo a; echo b"]}, streaming=True)
                call(c.tool_call, "write_file", arguments={"path": "notes.txt", "content": "hello"})
                mem = c.memory_init(namespace="roundtrip").memory_id
                c.memory_store(memory_id=mem, entries=[m.MemoryEntry(key="k", tier="semantic", content="whale song",
                                                                     tags=["sea"])])
                c.memory_recall(mem, query="whale")
                c.memory_retrieve(memory_id=mem, keys=["k", "missing"])
                c.memory_stats(mem)
                c.memory_forget(mem, keys=["k"])
                c.env_list()
                c.env_spaces(env_name="guess")
                ep = c.env_reset("guess", seed=3)
                c.env_step(episode_id=ep.episode_id, action=50)
                c.env_observe(ep.episode_id)
                c.env_render(ep.episode_id)
                c.env_step_batch(episode_ids=[ep.episode_id], actions=[25], autoreset_mode="same_step")
                c.env_close(ep.episode_id)
                call(c.env_data_get)
                ls = m.ChainRequest(type="tool/call/req", body={"tool_name": "list_dir", "arguments": {}})
                chain = m.ChainDefinition(
                    nodes=[m.ChainNode(id="a", kind="action", request=ls),
                           m.ChainNode(id="b", kind="action", request=ls)],
                    edges=[m.ChainEdge(from_="a", to="b")], output="b")
                run = c.chain_run(chain=chain, input={})
                self.assertEqual(run.ran, ["a", "b"])  # the edge was read: b ran after a
                c.chain_define(name="pings", chain=chain)
                c.learn_feedback([m.Feedback(type="POSITIVE", component=m.Component(kind="tool", name="run_command"))])
                c.learn_stats()
                c.learn_rank(kind="tool")
                p = c.proc_spawn(["sh", "-c", "echo out"]).process
                c.proc_wait(p.proc_id, timeout=10)
                c.proc_read(p.proc_id)
                c.proc_status(p.proc_id)
                c.proc_list()
                c.skill_discover()
                c.subagent_list()
                c.toolkit_list()
                c.mcp_server_list()
                c.session_info()
                snap = c.session_snapshot()
                c.session_snapshot_list()
                c.session_restore(snapshot_id=snap.snapshot_id)
                c.session_trajectory_export()
                fork = c.session_fork(1)
                # The host read every request as sent.
                bad = [e for e in errors if e.code in ("parse_error", "schema_violation")]
                self.assertEqual(bad, [], "the host did not read a model_dump()")
                # An error reply, to see one round-trip too.
                with self.assertRaises(aep.ProtocolError):
                    c.env_step(episode_id="no-such-episode", action=1)
        self.assertIn("not_forked", fork.model_dump())
        # Every line the host sent dumps back unchanged.
        seen: set[str] = set()
        for line in received:
            wire = json.loads(line)
            msg = m.HOST_MESSAGE.validate_json(line)
            seen.add(type(msg).__name__)
            self.assertEqual(msg.model_dump(), wire, f"{wire['type']} changed")
            self.assertEqual(json.loads(msg.model_dump_json()), wire)
        for want in ("ToolkitListRespMessage", "SessionForkRespMessage", "ChainRunRespMessage", "ToolEventMessage",
                     "ErrorMessage", "EnvStepBatchRespMessage", "MemoryRecallRespMessage"):
            self.assertIn(want, seen)


if __name__ == "__main__":
    unittest.main()
