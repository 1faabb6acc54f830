"""The SDK's own WebSocket (aep/_ws.py), driven by aep.Client's blocking
connection and by aep.AsyncClient's asyncio protocol, against a scripted
server (tests/wspeer.py) that writes and reads every frame itself:
masking of what the client sends (every frame, a fresh key, all three
length encodings), fragmented messages with pings between the fragments,
pongs, the host's close (answered, not re-attached), a drop (re-attached
with Last-Event-ID), broken frames (closed with 1002, 1007 or 1009), the
client's own close, and the keep-alive thread answering a ping while the
synchronous client is idle, and the idle check (a line sent after a
pause waits for a ping's pong; a connection whose ping goes unanswered is
re-attached before the line is written). The frame parser is also fed
every frame a byte at a time and cut at every point."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
import time
import unittest
import weakref
from typing import Any, Callable
from unittest import mock

from tests import hosts  # noqa: F401  (puts the SDK on sys.path)
from tests.wspeer import Conn, Peer

import aep
from aep import _syncio, _ws, transports
from aep.transports import WebSocketTransport

TIMEOUT = 10.0


class SyncSide:
    """The blocking transport, as aep.Client drives it: its owner, which
    reads for the idle check's pong and keeps the lines read meanwhile."""

    def __init__(self, url: str, **kw: Any) -> None:
        self.t = _syncio.WebSocket(url, **kw)
        self.t.owner = weakref.ref(self)
        self.lines: list[str] = []
        self.t.open(TIMEOUT)

    def _read_until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done() and time.monotonic() < deadline:
            line = self.t.recv(deadline - time.monotonic())
            if line is not None:
                self.lines.append(line)

    def _wake(self) -> None:
        pass  # one thread: it reads itself

    def send(self, line: str) -> None:
        self.t.send(line)

    def recv(self) -> str:
        if self.lines:
            return self.lines.pop(0)
        line = self.t.recv(TIMEOUT)
        if line is None:
            raise TimeoutError("nothing received")
        return line

    def close(self) -> None:
        self.t.close()

    @property
    def reattached(self) -> int:
        return self.t.reattached

    @property
    def session_id(self) -> Any:
        return self.t.session_id


class AsyncSide:
    """The asyncio transport, as aep.AsyncClient drives it, on a loop of
    its own driven from the test's thread."""

    def __init__(self, url: str, **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.t = WebSocketTransport(url, **kw)
        try:
            self.loop.run_until_complete(self.t.open())
        except BaseException:
            self.loop.close()
            raise

    def send(self, line: str) -> None:
        self.loop.run_until_complete(self.t.send(line))

    def recv(self) -> str:
        return self.loop.run_until_complete(asyncio.wait_for(self.t.recv(), TIMEOUT))

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.t.close())
            self.loop.close()

    @property
    def reattached(self) -> int:
        return self.t.reattached

    @property
    def session_id(self) -> Any:
        return self.t.session_id


class Framing:
    side: Callable[..., Any]

    def peer(self, *scripts: Callable[[Conn], None], **kw: Any) -> Peer:
        p = Peer(*scripts, **kw)
        self.addCleanup(p.close)  # type: ignore[attr-defined]
        return p

    def open(self, p: Peer, **kw: Any) -> Any:
        s = self.side(p.url, **kw)
        self.addCleanup(s.close)  # type: ignore[attr-defined]
        return s

    def test_every_frame_is_masked_with_a_fresh_key(self) -> None:
        self: Any
        sizes = [0, 5, 125, 126, 65535, 65536, 200_000]
        got: list[Any] = []

        def script(c: Conn) -> None:
            for _ in sizes:
                got.append(c.read_frame())
            c.send_text("done")

        p = self.peer(script)
        s = self.open(p)
        texts = ["x" * n for n in sizes]
        for t in texts:
            s.send(t)
        self.assertEqual(s.recv(), "done")
        p.join()
        self.assertEqual([f.payload.decode() for f in got], texts)
        for f in got:
            self.assertTrue(f.masked and f.fin and f.opcode == 0x1, f)
            self.assertEqual(len(f.key), 4)
        keys = [f.key for f in got]
        self.assertEqual(len(set(keys)), len(keys), "a masking key was used twice")

    def test_fragments_with_pings_between_them(self) -> None:
        self: Any
        pongs: list[Any] = []

        def script(c: Conn) -> None:
            c.send_frame(0x1, "héllo, ".encode()[:3], fin=False)  # a fragment ending inside a UTF-8 character
            c.send_frame(0x9, b"ping-1")
            c.send_frame(0x0, "héllo, ".encode()[3:], fin=False)
            c.send_frame(0x9, b"")
            c.send_frame(0x0, b"world", fin=True)
            c.send_frame(0xA, b"unasked pong")  # ignored
            c.send_frame(0x2, b"binary as text")
            pongs.append(c.read_frame())
            pongs.append(c.read_frame())
            c.send_text("after")

        p = self.peer(script)
        s = self.open(p)
        self.assertEqual(s.recv(), "héllo, world")
        self.assertEqual(s.recv(), "binary as text")
        self.assertEqual(s.recv(), "after")
        p.join()
        self.assertEqual([(f.opcode, f.payload, f.masked) for f in pongs], [(0xA, b"ping-1", True), (0xA, b"", True)])

    def test_host_close_is_answered_and_not_reattached(self) -> None:
        self: Any
        echoed: list[Any] = []

        def script(c: Conn) -> None:
            c.send_text("last")
            c.send_close(1001, "going away")
            echoed.append(c.read_frame())

        p = self.peer(script, headers={"X-Session-Id": "s-1"})
        s = self.open(p)
        self.assertEqual(s.session_id, "s-1")
        self.assertEqual(s.recv(), "last")
        with self.assertRaises(aep.SessionLost) as cm:
            s.recv()
        self.assertIn("1001 going away", str(cm.exception))
        p.join()
        self.assertEqual((echoed[0].opcode, echoed[0].payload[:2]), (0x8, struct.pack("!H", 1001)))
        self.assertEqual(s.reattached, 0)
        with self.assertRaises(aep.SessionLost) as sent:
            s.send("no more")
        self.assertFalse(sent.exception.delivered)

    def test_close_4410_is_a_terminated_session(self) -> None:
        self: Any

        def script(c: Conn) -> None:
            c.send_close(4410, "terminated")
            c.read_frame()

        p = self.peer(script, headers={"X-Session-Id": "s-t"})
        s = self.open(p)
        with self.assertRaises(aep.SessionTerminated):
            s.recv()
        p.join()
        self.assertEqual(s.reattached, 0)

    def test_drop_reattaches_with_the_count_received(self) -> None:
        self: Any
        second: list[Conn] = []

        def first(c: Conn) -> None:
            self.assertEqual(c.request.get("x-session-id"), None)
            c.send_text("one")
            c.send_text("two")
            c.read_message()  # the client's line, then the network drops
            c.drop()

        def again(c: Conn) -> None:
            second.append(c)
            c.send_text("three")
            self.assertEqual(c.read_message(), "after the drop")

        p = self.peer(first, again, headers={"X-Session-Id": "s-2"})
        s = self.open(p)
        self.assertEqual((s.recv(), s.recv()), ("one", "two"))
        s.send("before the drop")
        self.assertEqual(s.recv(), "three")  # read across the re-attach
        s.send("after the drop")
        p.join()
        self.assertEqual((second[0].request.get("x-session-id"), second[0].request.get("last-event-id")), ("s-2", "2"))
        self.assertEqual(s.reattached, 1)

    def test_broken_frames_close_with_their_code(self) -> None:
        self: Any
        cases = [
            ("masked by the server", lambda c: c.send_frame(0x1, b"x", mask=True), 1002),
            ("reserved bits", lambda c: c.send_frame(0x1, b"x", rsv=0x40), 1002),
            ("unknown opcode", lambda c: c.send_frame(0x3, b"x"), 1002),
            ("long ping", lambda c: c.send_frame(0x9, b"x" * 126), 1002),
            ("fragmented ping", lambda c: c.send_frame(0x9, b"x", fin=False), 1002),
            ("continuation of nothing", lambda c: c.send_frame(0x0, b"x"), 1002),
            ("a message inside a message", lambda c: (c.send_frame(0x1, b"a", fin=False), c.send_frame(0x1, b"b")), 1002),
            ("text that is not UTF-8", lambda c: c.send_frame(0x1, b"\xff\xfe"), 1007),
            ("too big", lambda c: c.send_frame(0x1, b"x" * 2000), 1009),
            ("bad close code", lambda c: c.send_frame(0x8, struct.pack("!H", 1005)), 1002),
        ]
        for name, bad, code in cases:
            with self.subTest(name):
                closes: list[Any] = []

                def script(c: Conn, bad: Any = bad, closes: list = closes) -> None:
                    bad(c)
                    closes.append(c.read_frame())

                p = self.peer(script, headers={"X-Session-Id": "s-3"})
                s = self.open(p, max_size=1000)
                with self.assertRaises(aep.SessionLost) as cm:
                    s.recv()
                self.assertIn("broke the protocol", str(cm.exception))
                p.join()
                self.assertEqual((closes[0].opcode, struct.unpack("!H", closes[0].payload[:2])[0]), (0x8, code))
                self.assertEqual(s.reattached, 0)

    def test_client_close_sends_a_masked_close(self) -> None:
        self: Any
        got: list[Any] = []

        def script(c: Conn) -> None:
            got.append(c.read_frame())
            c.send_close(1000)

        p = self.peer(script)
        s = self.open(p)
        s.close()
        p.join()
        self.assertEqual((got[0].opcode, got[0].masked, got[0].payload), (0x8, True, struct.pack("!H", 1000)))

    def test_idle_check_pings_before_a_line_after_a_pause(self) -> None:
        """A line sent on a busy connection goes straight out; after a pause
        past idle_check a ping goes first and the line only once its own
        pong is back (a message that came meanwhile is kept, a pong with
        another payload does not count)."""
        self: Any
        quiet: list[bool] = []
        pings: list[Any] = []

        def silent(c: Conn, seconds: float) -> bool:
            c.sock.settimeout(seconds)
            try:
                c.read_frame()
                return False
            except socket.timeout:
                return True
            finally:
                c.sock.settimeout(None)

        def script(c: Conn) -> None:
            self.assertEqual(c.read_message(), "first")  # just connected: no ping
            c.send_text("ack")
            self.assertEqual(c.read_message(), "busy")  # a frame just came in: no ping
            f = c.read_frame()
            pings.append(f)
            quiet.append(silent(c, 0.3))
            c.send_text("in between")
            c.send_frame(0xA, b"not this one")
            quiet.append(silent(c, 0.2))
            c.send_frame(0xA, f.payload)
            self.assertEqual(c.read_message(), "after a pause")
            c.send_text("done")

        p = self.peer(script)
        s = self.open(p, idle_check=0.3)
        s.send("first")
        self.assertEqual(s.recv(), "ack")
        s.send("busy")
        time.sleep(0.6)
        s.send("after a pause")
        self.assertEqual((s.recv(), s.recv()), ("in between", "done"))
        p.join()
        self.assertEqual((pings[0].opcode, pings[0].masked, len(pings[0].payload)), (0x9, True, 8))
        self.assertEqual(quiet, [True, True], "the line was written before its pong came back")
        self.assertEqual(s.reattached, 0)

    def test_idle_check_unanswered_reattaches_before_writing(self) -> None:
        """A ping unanswered within the ping timeout: the connection is
        taken for dead and re-attached, and the line goes out on the new
        connection only, once."""
        self: Any
        after: list[Any] = []
        second: list[Conn] = []

        def first(c: Conn) -> None:
            self.assertEqual(c.read_message(), "hello")
            c.send_text("hi")
            self.assertEqual(c.read_frame().opcode, 0x9)  # and no answer
            try:
                while True:
                    after.append(c.read_frame())
            except (EOFError, OSError):
                pass

        def again(c: Conn) -> None:
            second.append(c)
            self.assertEqual(c.read_message(), "after a pause")
            c.send_text("done")

        with mock.patch.object(transports, "PING_TIMEOUT", 0.5), mock.patch.object(_syncio, "PING_TIMEOUT", 0.5):
            p = self.peer(first, again, headers={"X-Session-Id": "s-idle"})
            s = self.open(p, idle_check=0.2)
            s.send("hello")
            self.assertEqual(s.recv(), "hi")
            time.sleep(0.4)
            started = time.monotonic()
            s.send("after a pause")
            self.assertGreaterEqual(time.monotonic() - started, 0.5)
            self.assertEqual(s.recv(), "done")
        p.join()
        self.assertEqual(after, [], "the line went to the connection that did not answer")
        self.assertEqual((second[0].request.get("x-session-id"), second[0].request.get("last-event-id")),
                         ("s-idle", "1"))
        self.assertEqual(s.reattached, 1)

    def test_idle_check_off(self) -> None:
        """idle_check=None: a line after a pause goes straight out."""
        self: Any

        def script(c: Conn) -> None:
            self.assertEqual(c.read_message(), "hello")
            c.send_text("hi")
            self.assertEqual(c.read_message(), "after a pause")  # a ping would fail here
            c.send_text("done")

        p = self.peer(script)
        s = self.open(p, idle_check=None)
        s.send("hello")
        self.assertEqual(s.recv(), "hi")
        time.sleep(0.3)
        s.send("after a pause")
        self.assertEqual(s.recv(), "done")
        p.join()

    def test_refused_upgrade(self) -> None:
        self: Any
        import socket
        import threading
        ls = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(ls.close)

        def answer() -> None:
            c, _ = ls.accept()
            c.recv(4096)
            c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            c.close()
        threading.Thread(target=answer, daemon=True).start()
        with self.assertRaises(_ws.HandshakeRefused) as cm:
            self.side(f"ws://127.0.0.1:{ls.getsockname()[1]}/ws")
        self.assertEqual(cm.exception.status, 404)


class FramingSync(Framing, unittest.TestCase):
    side = SyncSide


class FramingAsync(Framing, unittest.TestCase):
    side = AsyncSide


class IdleCheckSync(unittest.TestCase):
    def test_pong_read_by_the_thread_that_reads(self) -> None:
        """aep.Client shared by two threads: while one waits for its reply
        (reading for everyone), a request made by the other after a pause
        waits for the pong, which the reading thread sees, and is written
        once it came."""
        order: list[str] = []

        def pong_to(req: dict[str, Any], n: int) -> str:
            return json.dumps({"type": "pong", "id": f"h-{n}", "proto": "1.0", "ts": time.time(),
                               "req_id": req["id"], "uptime_seconds": 1})

        def script(c: Conn) -> None:
            c.send_text(handshake_answer(c.read_message(), "s-threads"))
            first = json.loads(c.read_message())
            order.append(first["type"])
            f = c.read_frame()
            order.append({0x9: "ws ping"}.get(f.opcode, repr(f)))
            if f.opcode != 0x9:
                return  # the request came without a ping first
            time.sleep(0.2)
            c.send_frame(0xA, f.payload)
            second = json.loads(c.read_message())
            order.append(second["type"])
            c.send_text(pong_to(second, 2))
            c.send_text(pong_to(first, 3))

        p = Peer(script, headers={"X-Session-Id": "s-threads"})
        self.addCleanup(p.close)
        c = aep.Client.websocket(p.url, token="t", idle_check=0.2)
        self.addCleanup(c.close, shutdown=False)
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.append(c.ping(call_timeout=TIMEOUT).type), daemon=True)
        reader.start()
        time.sleep(0.4)  # the other thread reads, waiting for its reply; the connection is idle
        self.assertTrue(c._reading and c._reader == reader.ident, "the other thread is not reading")
        started = time.monotonic()
        try:
            self.assertEqual(c.ping(call_timeout=TIMEOUT).type, "pong")
        finally:
            self.assertEqual(order[:2], ["ping", "ws ping"], "the request went out without a ping first")
        self.assertLess(time.monotonic() - started, 5)
        reader.join(TIMEOUT)
        p.join()
        self.assertEqual(got, ["pong"])
        self.assertEqual(order, ["ping", "ws ping", "ping"])

    def test_idle_check_argument(self) -> None:
        for t in (WebSocketTransport, _syncio.WebSocket):
            self.assertEqual(t("ws://127.0.0.1:1/ws").idle_check, 1.0)
            self.assertIsNone(t("ws://127.0.0.1:1/ws", idle_check=None).idle_check)
            self.assertEqual(t("ws://127.0.0.1:1/ws", idle_check=0).idle_check, 0.0)
            for bad in (-1, -0.5, float("nan"), "1", True):
                with self.assertRaises(ValueError, msg=repr(bad)):
                    t("ws://127.0.0.1:1/ws", idle_check=bad)
        # The synchronous client takes the asyncio transport's setting.
        from aep._sync import as_sync
        self.assertEqual(as_sync(WebSocketTransport("ws://127.0.0.1:1/ws", idle_check=0.25)).idle_check, 0.25)


def handshake_answer(line: str, sid: str) -> str:
    req = json.loads(line)
    assert req["type"] == "handshake/req", req
    return json.dumps({"type": "handshake/resp", "id": "h-1", "proto": "1.0", "ts": time.time(), "req_id": req["id"],
                       "ok": True, "session_id": sid, "accepted_caps": [], "max_parallel": 4})


class KeepAlive(unittest.TestCase):
    def test_idle_sync_client_answers_pings_and_gets_events(self) -> None:
        """Between calls no thread of the caller's reads the connection: the
        keep-alive thread answers the host's ping, hands a session event to
        on_event, and notices the host's close (the client then fails
        without a call having waited for it)."""
        pong: list[Any] = []
        events: list[Any] = []

        def script(c: Conn) -> None:
            c.send_text(handshake_answer(c.read_message(), "s-keep"))
            time.sleep(0.2)  # the client is idle now
            c.send_frame(0x9, b"are you there")
            pong.append(c.read_frame())
            c.send_text(json.dumps({"type": "session/event", "id": "h-2", "proto": "1.0", "ts": time.time(),
                                    "req_id": "r-none", "kind": "status", "data": {"message": "hello"}, "seq": 0}))
            c.send_close(1001, "bye")
            c.read_frame()

        p = Peer(script, headers={"X-Session-Id": "s-keep"})
        self.addCleanup(p.close)
        c = aep.Client.websocket(p.url, token="t", on_event=events.append)
        self.addCleanup(c.close, shutdown=False)
        self.assertEqual(c.session_id, "s-keep")
        started = time.monotonic()
        p.join(10)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual((pong[0].opcode, pong[0].payload, pong[0].masked), (0xA, b"are you there", True))
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual([e.data for e in events], [{"message": "hello"}])
        with self.assertRaises(aep.ConnectionClosed):
            c.ping()


class Reader(unittest.TestCase):
    """The parser alone: the same frames fed whole, a byte at a time and
    cut at random points give the same messages."""

    @staticmethod
    def frame(op: int, payload: bytes, fin: bool = True) -> bytes:
        n = len(payload)
        b0 = (0x80 if fin else 0) | op
        if n < 126:
            head = bytes((b0, n))
        elif n < 65536:
            head = bytes((b0, 126)) + struct.pack("!H", n)
        else:
            head = bytes((b0, 127)) + struct.pack("!Q", n)
        return head + payload

    def stream(self) -> tuple[bytes, list[tuple[int, Any]]]:
        f = self.frame
        data = (f(0x1, b"a") + f(0x1, "é".encode()[:1], fin=False) + f(0x9, b"p") + f(0x0, "é".encode()[1:]) +
                f(0x1, b"x" * 300) + f(0x2, b"\x00\x01") + f(0x1, b"y" * 70000) + f(0xA, b"") +
                f(0x8, struct.pack("!H", 1000) + b"ok"))
        want = [(0x1, "a"), (0x9, b"p"), (0x1, "é"), (0x1, "x" * 300), (0x2, b"\x00\x01"), (0x1, "y" * 70000),
                (0xA, b""), (0x8, struct.pack("!H", 1000) + b"ok")]
        return data, want

    @staticmethod
    def read_all(chunks: list[bytes]) -> list[tuple[int, Any]]:
        r = _ws.Reader(1 << 20)
        out = []
        for ch in chunks:
            r.feed(ch)
            while (item := r.next()) is not None:
                out.append(item)
        return out

    def test_splits(self) -> None:
        data, want = self.stream()
        self.assertEqual(self.read_all([data]), want)
        self.assertEqual(self.read_all([data[i:i + 1] for i in range(len(data))]), want)
        rng = random.Random(7)
        for _ in range(50):
            cuts = sorted(rng.sample(range(1, len(data)), 12))
            parts = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
            self.assertEqual(self.read_all(parts), want)

    def test_encode_and_mask_round_trip(self) -> None:
        for n in (0, 1, 3, 4, 5, 125, 126, 127, 65535, 65536):
            payload = random.Random(n).randbytes(n)
            fr = _ws.encode_frame(0x2, payload)
            # The client's own frames are masked: unmask and parse as a server would.
            b1 = fr[1]
            self.assertTrue(b1 & 0x80)
            at = 2 + {126: 2, 127: 8}.get(b1 & 0x7F, 0)
            key, body = fr[at:at + 4], fr[at + 4:]
            self.assertEqual(_ws.mask(body, key), payload)
            self.assertEqual(len(body), n)

    def test_close_codes(self) -> None:
        self.assertEqual(_ws.parse_close(b""), (1005, ""))
        self.assertEqual(_ws.parse_close(struct.pack("!H", 4000) + b"app"), (4000, "app"))
        for bad in (b"\x03", struct.pack("!H", 999), struct.pack("!H", 1006), struct.pack("!H", 2999),
                    struct.pack("!H", 1000) + b"\xff"):
            with self.subTest(bad=bad), self.assertRaises(_ws.WSProtocolError):
                _ws.parse_close(bad)

    def test_handshake_answer_is_checked(self) -> None:
        key = _ws.new_key()
        good = {"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-accept": _ws.accept_for(key)}
        _ws.check_handshake(101, good, key)
        for name, status, headers in [
            ("not 101", 200, good),
            ("wrong accept", 101, {**good, "sec-websocket-accept": _ws.accept_for(_ws.new_key())}),
            ("no upgrade", 101, {**good, "upgrade": "h2c"}),
            ("an extension", 101, {**good, "sec-websocket-extensions": "permessage-deflate"}),
        ]:
            with self.subTest(name), self.assertRaises(_ws.HandshakeRefused):
                _ws.check_handshake(status, headers, key)
        with self.assertRaises(ValueError):
            _ws.handshake_request("h:1", "/ws", key, {"X-Evil": "a\r\nInjected: 1"})


if __name__ == "__main__":
    unittest.main()
