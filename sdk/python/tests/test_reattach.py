"""A WebSocket connection that drops is re-attached to its session (docs/
transports.md): with a real `aep serve` behind a TCP forwarder that cuts
every connection, as a network drop would, a call in flight still gets its
reply (replayed from the host's buffer after the re-attach, by the count of
messages received), the session stays the same, and the next call works.
A connection the host closes itself (the session ended) is not re-attached."""

from __future__ import annotations

import time
import unittest

from tests.fleet import Forwarder
from tests.hosts import TOKEN, http_host, skip_unless_transport

import aep


class WebSocketReattach(unittest.TestCase):
    def setUp(self) -> None:
        skip_unless_transport(self, "websocket")
        self.fwd = Forwarder(http_host().port)
        self.addCleanup(self.fwd.close)

    def client(self) -> aep.Client:
        c = aep.Client.websocket(self.fwd.ws_url, token=TOKEN, caps=["tools"])
        self.addCleanup(c.close)
        return c

    def test_drop_reattaches_and_replays(self) -> None:
        c = self.client()
        sid = c.session_id
        call = c.start("tool_call", "run_command", arguments={"argv": ["sh", "-c", "sleep 0.5; echo done"]})
        deadline = time.time() + 10
        while call.req_id is None and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the host has it and runs it
        self.assertGreaterEqual(self.fwd.sever(), 1)
        r = call.result(30)  # the reply came while no connection was there
        self.assertTrue(r.result.success, r)
        self.assertEqual(r.result.data["stdout"], "done\n")
        self.assertEqual(c.session_id, sid)
        self.assertGreaterEqual(c.transport.reattached, 1)
        # A drop between calls: the next call goes out on the new connection.
        self.fwd.sever()
        time.sleep(0.2)
        r = c.tool_call("run_command", arguments={"argv": ["echo", "again"]})
        self.assertEqual(r.result.data["stdout"], "again\n")
        self.assertEqual(c.session_id, sid)
        self.assertGreaterEqual(c.transport.reattached, 2)

    def test_host_closing_is_not_reattached(self) -> None:
        c = self.client()
        c.shutdown()  # the host ends the session and closes the connection
        with self.assertRaises((aep.SessionLost, aep.ConnectionClosed)):
            for _ in range(50):
                c.tool_call("run_command", arguments={"argv": ["true"]}, call_timeout=5)
                time.sleep(0.05)
        self.assertEqual(c.transport.reattached, 0)


if __name__ == "__main__":
    unittest.main()
