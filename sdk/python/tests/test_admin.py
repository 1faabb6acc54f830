"""Sessions the operator opens and terminates through the host's admin API
(docs/operating.md, Admin API), as the SDK meets them: an operator-opened
session is attached by its id with the token the host issued for it alone
(no tenant secret) and says so in session/info; a terminated session's next
request fails with reason terminated, and a client made with move=True
ends instead of moving it, with either client over HTTP+SSE, the single
exchange and WebSocket (the Go twin is client/terminate_test.go)."""

from __future__ import annotations

import asyncio
import json
import socket
import unittest
import urllib.request

from tests.hosts import TOKEN, HTTPHost

import aep

OP_TOKEN = "py-sdk-operator-token-0c9d"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Admin(unittest.TestCase):
    host: HTTPHost
    ops: str

    @classmethod
    def setUpClass(cls) -> None:
        port = _free_port()
        cls.ops = f"http://127.0.0.1:{port}"
        cls.host = HTTPHost(config=f"operator:\n  listen: 127.0.0.1:{port}\n  token: {OP_TOKEN}\n")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.host.stop()

    def admin(self, method: str, path: str, body: object = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.ops + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + OP_TOKEN, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def transports(self) -> list[str]:
        return ["http", "exchange", "websocket"]

    def connect(self, name: str, **kw: object) -> aep.Client:
        if name == "websocket":
            return aep.Client.websocket(self.host.ws_url, **kw)  # type: ignore[arg-type]
        return (aep.Client.http if name == "http" else aep.Client.exchange)(self.host.url, **kw)  # type: ignore[arg-type]

    def test_operator_opened_session(self) -> None:
        for name in self.transports():
            with self.subTest(transport=name):
                o = self.admin("POST", "/admin/sessions", {"tenant": "default", "capabilities": ["tools"]})
                self.assertNotEqual(o["token"], TOKEN)
                with self.connect(name, session_id=o["session_id"], token=o["token"], caps=["tools", "memory", "session"]) as c:
                    info = c.session_info()
                    self.assertIs(info.operator_opened, True)
                    self.assertEqual(info.handle, o["handle"])
                    on = {e.name: e.enabled for e in info.accepted_caps}
                    self.assertEqual(on, {"tools": True, "memory": False, "session": True})
                with self.connect(name, token=TOKEN, caps=["tools", "session"]) as own:
                    self.assertIsNone(own.session_info().operator_opened)

    def test_terminated_session_is_not_moved(self) -> None:
        for name in self.transports():
            with self.subTest(transport=name):
                with self.connect(name, token=TOKEN, caps=["tools", "session"], move=True) as c:
                    handle = c.session_info().handle
                    self.admin("POST", f"/admin/sessions/{handle}/snapshot")  # what a move would restore
                    self.admin("POST", f"/admin/sessions/{handle}/terminate")
                    with self.assertRaises((aep.ProtocolError, aep.SessionTerminated)) as first:
                        c.ping()
                    if isinstance(first.exception, aep.ProtocolError):
                        self.assertEqual(first.exception.code, "runtime_error")
                        self.assertEqual((first.exception.detail or {}).get("reason"), "terminated")
                        self.assertFalse(first.exception.retryable)
                    with self.assertRaises(aep.SessionTerminated):
                        c.ping()
                    self.assertEqual(c.moves, [])

    def test_terminated_session_is_not_moved_async(self) -> None:
        async def one(name: str) -> None:
            url = self.host.ws_url if name == "websocket" else self.host.url
            opener = {"http": aep.AsyncClient.http, "exchange": aep.AsyncClient.exchange,
                      "websocket": aep.AsyncClient.websocket}[name]
            c = await opener(url, token=TOKEN, caps=["tools", "session"], move=True)
            try:
                handle = (await c.session_info()).handle
                await asyncio.to_thread(self.admin, "POST", f"/admin/sessions/{handle}/snapshot")
                await asyncio.to_thread(self.admin, "POST", f"/admin/sessions/{handle}/terminate")
                with self.assertRaises((aep.ProtocolError, aep.SessionTerminated)) as first:
                    await asyncio.wait_for(c.ping(), 10)
                if isinstance(first.exception, aep.ProtocolError):
                    self.assertEqual((first.exception.code, (first.exception.detail or {}).get("reason")),
                                     ("runtime_error", "terminated"))
                with self.assertRaises(aep.SessionTerminated):
                    await asyncio.wait_for(c.ping(), 10)
                self.assertEqual(c.moves, [])
            finally:
                await c.aclose()

        for name in self.transports():
            with self.subTest(transport=name):
                asyncio.run(one(name))


if __name__ == "__main__":
    unittest.main()
