"""The generated models and methods, without a host: every request type an
agent sends has a typed method, encoding gives the wire's field names, and
decoding picks the model by `type`."""

from __future__ import annotations

import json
import unittest

from tests import hosts  # noqa: F401  (puts the SDK on sys.path)

import aep
from aep import _methods, models as m
from aep.client import AsyncClient


class TestGenerated(unittest.TestCase):
    def test_every_request_has_a_method(self) -> None:
        by_type = {model.model_fields["type"].default: name for name, (model, _) in _methods.REQUESTS.items()}
        for t in m.AGENT_TYPES:
            # The spec's bare env/data spellings alias their /req types.
            want = t if t.endswith("/req") or t in ("ping", "cancel", "shutdown") else t + "/req"
            with self.subTest(type=t):
                self.assertIn(want, by_type)
                name = by_type[want]
                self.assertTrue(callable(getattr(aep.Client, name)))
                self.assertTrue(callable(getattr(aep.AsyncClient, name)))

    def test_encode_uses_wire_names(self) -> None:
        c = AsyncClient(transport=None)  # type: ignore[arg-type]
        msg = c._build(m.ToolCallReqMessage, {"tool_name": "echo"}, {"arguments": {"x": 1}, "streaming": None})
        wire = json.loads(c._encode(msg))
        self.assertEqual(set(wire), {"type", "proto", "id", "ts", "tool_name", "arguments"})
        self.assertEqual((wire["type"], wire["proto"]), ("tool/call/req", "1.0"))
        # A Python-keyword field keeps its wire name.
        fields = {f.alias or n for n, f in m.ChainEdge.model_fields.items()}
        self.assertIn("from", fields)

    def test_traceparent_on_every_request(self) -> None:
        # Every generated method takes the envelope's optional traceparent
        # (schemas/envelope.json) and puts it on the wire; unset, it is left off.
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        c = AsyncClient(transport=None)  # type: ignore[arg-type]
        sent: list[dict] = []

        async def capture(model, required, optional, reply, call_timeout, on_event):  # type: ignore[no-untyped-def]
            sent.append(json.loads(c._encode(c._build(model, required, optional))))

        c._request = capture  # type: ignore[method-assign]
        import asyncio
        asyncio.run(c.tool_call(tool_name="echo", arguments={}, traceparent=tp))
        asyncio.run(c.ping(traceparent=tp))
        asyncio.run(c.ping())
        self.assertEqual([w.get("traceparent") for w in sent], [tp, tp, None])
        self.assertEqual(sent[0]["type"], "tool/call/req")

    def test_decode_by_type(self) -> None:
        cases = [
            ('{"type":"pong","id":"a","proto":"1.0","ts":1,"req_id":"r","uptime_seconds":2}', m.PongMessage),
            ('{"type":"error","id":"a","proto":"1.0","ts":1,"req_id":"r","code":"timeout","message":"m",'
             '"retryable":true,"detail":[1]}', m.ErrorMessage),
            ('{"type":"tool/event","id":"a","proto":"1.0","ts":1,"req_id":"r","kind":"log","data":{},"seq":0}',
             m.ToolEventMessage),
        ]
        for line, want in cases:
            with self.subTest(want=want.__name__):
                self.assertIsInstance(m.HOST_MESSAGE.validate_json(line), want)
        # A newer host's extra field is kept, not refused.
        p = m.HOST_MESSAGE.validate_json(
            '{"type":"pong","id":"a","proto":"1.0","ts":1,"req_id":"r","uptime_seconds":2,"new_field":1}')
        self.assertEqual(p.model_extra, {"new_field": 1})

    def test_protocol_error_fields(self) -> None:
        e = m.HOST_MESSAGE.validate_json('{"type":"error","id":"a","proto":"1.0","ts":1,"req_id":"r",'
                                         '"code":"runtime_error","message":"boom","retryable":true,'
                                         '"detail":"any value","capability_name":"tools"}')
        err = aep.ProtocolError.from_message(e)
        self.assertEqual((err.code, err.retryable, err.detail, err.capability_name, err.req_id),
                         ("runtime_error", True, "any value", "tools", "r"))


if __name__ == "__main__":
    unittest.main()
