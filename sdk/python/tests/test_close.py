"""Closing a client ends its session on the host, over HTTP+SSE and
WebSocket: at once, not when it idles out or its WebSocket's re-attach
grace passes, so abandoned sessions do not pile up for a drain to save."""

from __future__ import annotations

import json
import time
import unittest
import urllib.error
import urllib.request

from tests.hosts import PerTransport, http_host, sync_client


def send_status(session_id: str) -> int:
    """The status POST /send answers for a ping in session_id."""
    body = json.dumps({"type": "ping", "id": "p", "proto": "1.0", "ts": time.time()}).encode()
    req = urllib.request.Request(http_host().url + "/send", data=body, method="POST",
                                 headers={"X-Session-Id": session_id, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Close:
    transport: str

    def test_close_ends_the_session(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c = sync_client(self.transport, caps=["memory"])
        sid = c.session_id
        assert sid is not None
        c.close()
        deadline = time.time() + 5
        status = send_status(sid)
        while status != 404 and time.time() < deadline:
            time.sleep(0.02)
            status = send_status(sid)
        self.assertEqual(status, 404, "the session outlived its closed client")


for _name in ("http", "websocket"):
    _cls = "Close" + _name.capitalize()
    globals()[_cls] = type(_cls, (PerTransport, Close, unittest.TestCase), {"transport": _name, "__module__": __name__})
