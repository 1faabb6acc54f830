"""A transport of the caller's own making (an aep.Transport subclass the SDK
does not know) still works with the synchronous client: it runs on an
event loop of its own in a background thread (aep/_syncio.py, FromAsync),
against a real host."""

from __future__ import annotations

import unittest

from tests.hosts import TOKEN, http_host

import aep


class Recording(aep.Transport):
    """Wraps the SDK's asyncio WebSocket transport, counting lines."""

    movable = True

    def __init__(self, url: str) -> None:
        self.inner = aep.WebSocketTransport(url)
        self.sent = 0
        self.received = 0

    @property  # type: ignore[override]
    def session_id(self):  # noqa: ANN201
        return self.inner.session_id

    async def open(self) -> None:
        await self.inner.open()

    async def send(self, line: str) -> None:
        self.sent += 1
        await self.inner.send(line)

    async def recv(self) -> str:
        line = await self.inner.recv()
        self.received += 1
        return line

    async def close(self) -> None:
        await self.inner.close()


class CustomTransport(unittest.TestCase):
    def test_sync_client_over_a_custom_transport(self) -> None:
        t = Recording(http_host().ws_url)
        events: list[aep.EventMessage] = []
        with aep.Client.connect(t, token=TOKEN, caps=["tools"]) as c:
            self.assertTrue(c.session_id)
            self.assertEqual(c.ping().type, "pong")
            r = c.tool_call("run_command", arguments={"argv": ["sh", "-c", "echo a; echo b"]}, streaming=True,
                            on_event=events.append)
            self.assertTrue(r.result.success)
            with self.assertRaises(aep.RequestTimeout):
                c.tool_call("run_command", arguments={"argv": ["sleep", "5"]}, call_timeout=0.3)
            self.assertEqual(c.ping().type, "pong")
        self.assertGreaterEqual(len(events), 2)
        self.assertGreaterEqual(t.sent, 5)  # handshake, ping, two calls, cancel, ping, shutdown
        self.assertGreaterEqual(t.received, 5)


if __name__ == "__main__":
    unittest.main()
