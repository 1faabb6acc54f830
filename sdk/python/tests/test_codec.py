"""Requests written without models (aep/_codec.py) and the streamed HTTP
bodies the synchronous client reads itself (aep/_http1.py), without a
host."""

from __future__ import annotations

import json
import math
import random
import unittest

from tests import hosts  # noqa: F401  (puts the SDK on sys.path)

from aep import _codec, _http1, models as m


class Array:
    """Stands in for a numpy array or scalar: only tolist() is used."""

    def __init__(self, v: object) -> None:
        self.v = v

    def tolist(self) -> object:
        return self.v


class Encode(unittest.TestCase):
    def test_envelope_and_fields(self) -> None:
        line = _codec.encode_message(m.EnvStepReqMessage, "p-7", {"action": 3, "episode_id": "ep"},
                                     {"traceparent": None})
        wire = json.loads(line)
        self.assertEqual(set(wire), {"type", "id", "proto", "ts", "action", "episode_id"})
        self.assertEqual((wire["type"], wire["id"], wire["proto"]), ("env/step/req", "p-7", "1.0"))
        self.assertIsInstance(wire["ts"], float)
        self.assertNotIn(" ", line)  # compact

    def test_models_in_arguments_are_written_in_wire_form(self) -> None:
        chain = m.ChainDefinition(nodes=[m.ChainNode(id="a", kind="gather")],
                                  edges=[m.ChainEdge(from_="a", to="b")])
        entry = m.MemoryEntry(key="k", content="c", tier="working")
        wire = json.loads(_codec.encode_message(m.ChainDefineReqMessage, "i", {"chain": chain, "name": "n"}, {}))
        self.assertEqual(wire["chain"]["edges"], [{"from": "a", "to": "b"}])
        wire = json.loads(_codec.encode_message(m.MemoryStoreReqMessage, "i", {"memory_id": "x", "entries": [entry]}, {}))
        self.assertEqual(wire["entries"], [{"key": "k", "content": "c", "tier": "working"}])

    def test_arrays_and_refusals(self) -> None:
        wire = json.loads(_codec.encode_message(m.EnvStepBatchReqMessage, "i",
                                                {"actions": Array([1, 2]), "episode_ids": ["a", "b"]}, {}))
        self.assertEqual(wire["actions"], [1, 2])
        with self.assertRaises(ValueError):
            _codec.encode_message(m.EnvStepReqMessage, "i", {"action": math.nan, "episode_id": "e"}, {})
        with self.assertRaises(TypeError):
            _codec.encode_message(m.EnvStepReqMessage, "i", {"action": object(), "episode_id": "e"}, {})

    def test_same_wire_as_the_models(self) -> None:
        # What the models would have written for the same arguments.
        args = {"tool_name": "run_command", "arguments": {"argv": ["echo", "é"]}, "streaming": True}
        ours = json.loads(_codec.encode_message(m.ToolCallReqMessage, "i", args, {"timeout": None}))
        model = m.ToolCallReqMessage(type="tool/call/req", proto="1.0", id="i", ts=ours["ts"], **args)
        self.assertEqual(ours, json.loads(model.model_dump_json(by_alias=True, exclude_unset=True)))


class Chunked(unittest.TestCase):
    def test_every_split(self) -> None:
        body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\n"
        want = b"Wikipedia in\r\n\r\nchunks."
        for cut in range(len(body) + 1):
            d = _http1.Chunked()
            got = d.feed(body[:cut]) + d.feed(body[cut:])
            self.assertEqual(got, want, cut)
            self.assertTrue(d.done)
        d = _http1.Chunked()
        self.assertEqual(b"".join(d.feed(body[i:i + 1]) for i in range(len(body))), want)

    def test_broken(self) -> None:
        for bad in (b"zz\r\n", b"4\r\nWikiXX", b"-1\r\n", b"1" * 5000):
            with self.subTest(bad=bad[:10]), self.assertRaises(_http1.BodyError):
                _http1.Chunked().feed(bad)


class EventStream(unittest.TestCase):
    def test_events(self) -> None:
        text = (b": heartbeat\r\n\r\nid: 1\r\ndata: {\"a\":1}\r\n\r\n"
                b"data: line1\ndata:line2\nevent: x\n\n"
                b"id: 2\n\n"  # no data: not an event
                b"data: last\n\n")
        want = [('{"a":1}', "1"), ("line1\nline2", None), ("last", None)]
        rng = random.Random(3)
        for _ in range(30):
            s = _http1.EventStream(1 << 20)
            cuts = sorted(rng.sample(range(1, len(text)), 6))
            got = []
            for a, b in zip([0] + cuts, cuts + [len(text)]):
                got += s.feed(text[a:b])
            self.assertEqual(got, want)

    def test_line_limit(self) -> None:
        with self.assertRaises(_http1.BodyError):
            _http1.EventStream(100).feed(b"data: " + b"x" * 200)


if __name__ == "__main__":
    unittest.main()
