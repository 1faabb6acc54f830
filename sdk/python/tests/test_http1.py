"""The synchronous client's own HTTP/1.1 POSTs (aep/_syncio.py, _Posts)
against a scripted server on loopback: answers by Content-Length, chunked
and to the end of the connection; a keep-alive connection the server closed
while idle, tried again on a fresh one; an answer too slow for its timeout
(TimeoutError, the connection dropped); a body over the limit; a header
that would smuggle another."""

from __future__ import annotations

import socket
import threading
import time
import unittest
from typing import Callable

from tests import hosts  # noqa: F401  (puts the SDK on sys.path)

from aep import _syncio
from aep.errors import ConnectionClosed


class Server:
    """Answers each request on each connection with the next of answers (a
    function of the connection and the request's bytes)."""

    def __init__(self, *answers: Callable[[socket.socket, bytes], None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.conns = 0
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.ls.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._conn, args=(c,), daemon=True).start()

    def _conn(self, c: socket.socket) -> None:
        buf = b""
        with c:
            while self.answers:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                while len(buf) < n:
                    buf += c.recv(65536)
                body, buf = buf[:n], buf[n:]
                self.requests.append(head + b"\r\n\r\n" + body)
                try:
                    self.answers.pop(0)(c, body)
                except OSError:
                    return

    def close(self) -> None:
        self.ls.close()


def length(body: bytes, extra: str = "") -> Callable[[socket.socket, bytes], None]:
    return lambda c, _: c.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body)


def hang_up(c: socket.socket, _: bytes) -> None:
    c.shutdown(socket.SHUT_RDWR)
    raise OSError("hung up")


class Posts(unittest.TestCase):
    def server(self, *answers: Callable[[socket.socket, bytes], None]) -> Server:
        s = Server(*answers)
        self.addCleanup(s.close)
        return s

    def posts(self, s: Server) -> _syncio._Posts:
        p = _syncio._Posts(s.url + "/base", {"X-Token": "t"}, 5.0)
        self.addCleanup(p.close)
        return p

    def test_bodies(self) -> None:
        chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nTrailer: 1\r\n\r\n")
        s = self.server(length(b"one"), lambda c, _: c.sendall(chunked), length(b""), length(b"again"),
                        lambda c, _: (c.sendall(b"HTTP/1.1 200 OK\r\n\r\nto the end"), c.shutdown(socket.SHUT_WR)))
        p = self.posts(s)
        self.assertEqual(p.post("/send", b"1", {"A": "b"}, None).body, b"one")
        self.assertEqual(p.post("/send", b"2", {}, None).body, b"abcdefg")
        ans = p.post("/send", b"3", {}, 2.0)
        self.assertEqual((ans.status, ans.body), (200, b""))
        self.assertEqual(p.post("/send", b"", {}, None).body, b"again")
        self.assertEqual(p.post("/send", b"5", {}, None).body, b"to the end")
        self.assertEqual(s.conns, 1)  # keep-alive: one connection for all but the last answer's
        first = s.requests[0]
        self.assertTrue(first.startswith(b"POST /base/send HTTP/1.1\r\n"), first)
        self.assertIn(b"X-Token: t\r\n", first)
        self.assertIn(b"A: b\r\n", first)

    def test_stale_keep_alive_is_tried_again(self) -> None:
        s = self.server(length(b"first"), hang_up, length(b"second"))
        p = self.posts(s)
        self.assertEqual(p.post("/send", b"1", {}, None).body, b"first")
        time.sleep(0.1)
        # The server hangs up on the next request's connection: a fresh one.
        self.assertEqual(p.post("/send", b"2", {}, None).body, b"second")
        self.assertEqual(s.conns, 2)

    def test_timeout_drops_the_connection(self) -> None:
        s = self.server(lambda c, _: time.sleep(1.0), length(b"later"))
        p = self.posts(s)
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError):
            p.post("/send", b"slow", {}, 0.2)
        self.assertLess(time.monotonic() - t0, 0.9)
        self.assertEqual(p.post("/send", b"next", {}, 5).body, b"later")
        self.assertEqual(s.conns, 2)

    def test_limits_and_refusals(self) -> None:
        big = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (_syncio.LINE_LIMIT + 1)
        s = self.server(lambda c, _: c.sendall(big))
        p = self.posts(s)
        with self.assertRaises(ConnectionClosed):
            p.post("/send", b"x", {}, 5)
        with self.assertRaises(ValueError):
            p.post("/send", b"x", {"X-Evil": "a\r\nInjected: 1"}, 5)
        with self.assertRaises(ValueError):
            _syncio._Posts("ftp://127.0.0.1/", {}, 1)


if __name__ == "__main__":
    unittest.main()
