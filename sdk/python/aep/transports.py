"""The transports of the SDK (docs/transports.md), behind one small
asyncio interface: open, send one line, receive one line, close. All are
standard library only. aep.AsyncClient runs them on the caller's event
loop; aep.Client runs their blocking counterparts (_syncio.py) on the
calling thread.

- StdioTransport spawns ``aep serve --stdio`` (or any command serving NDJSON
  on stdin/stdout).
- HTTPTransport speaks HTTP+SSE (``POST /session``, ``POST /send``,
  ``GET /stream``; http.client in worker threads).
- ExchangeTransport speaks the single exchange (``POST /send`` answered with
  the reply), nothing held open between requests.
- WebSocketTransport speaks ``GET /ws``, one message per text frame, framed
  by the SDK itself (_ws.py) on an asyncio protocol that hands each message
  to the client as it arrives.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Optional, Sequence

from . import _ws
from ._http1 import BodyError, Chunked, EventStream
from .errors import ConnectionClosed, SessionLost, SessionTerminated

# The WebSocket close code of a session the operator terminated.
_CLOSE_TERMINATED = 4410

# The default idle check of the WebSocket transports (seconds): a line sent
# on a connection that received nothing for this long waits for a ping's
# pong first (docs/DECISIONS.md, The Python SDK pings an idle WebSocket).
IDLE_CHECK = 1.0
# How long an idle check waits for its pong before taking the connection for
# dead.
PING_TIMEOUT = 10.0


def _idle_check(value: Optional[float]) -> Optional[float]:
    """An idle_check argument checked: None turns the check off, a number
    must not be negative."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise ValueError(f"idle_check: {value!r} is not None or a number of seconds >= 0")
    return float(value)


def _terminated_body(status: int, body: bytes) -> bool:
    """Whether an HTTP answer says the session was terminated by the
    operator: 404 with error "terminated" (openapi.yaml)."""
    if status != 404:
        return False
    try:
        return json.loads(body).get("error") == "terminated"
    except (ValueError, AttributeError):
        return False

# The host's message limit is 1 MiB (docs/DECISIONS.md, Dispatch); replies
# carrying tool output may be as large, so readers allow well beyond it.
_LINE_LIMIT = 64 << 20
_READ = 1 << 16


class Transport:
    """One session's connection to a host. Lines are JSON text without the
    trailing newline."""

    session_id: Optional[str] = None
    #: Whether new_session works: a client made with ``move=True`` needs it.
    movable = False

    async def open(self) -> None:
        raise NotImplementedError

    async def send(self, line: str) -> None:
        raise NotImplementedError

    async def recv(self) -> str:
        """The next line the host sent; raises ConnectionClosed at the end."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def attach(self, session_id: str) -> "Transport":
        """A new transport of the same kind and host, attached to another
        session by its id (a fork, a subagent's child). A stdio host serves
        one session per process, so it has none."""
        raise NotImplementedError(f"{type(self).__name__} cannot attach to another session of its host")

    def new_session(self) -> "Transport":
        """A new transport of the same kind, URL and headers that opens a new
        session (through a proxy, on whichever host it picks): what a client
        made with ``move=True`` moves to when this one's session is lost."""
        raise NotImplementedError(f"{type(self).__name__} cannot open another session")


class StdioTransport(Transport):
    """Runs argv (default ``aep serve --stdio``) and talks NDJSON on its
    stdin and stdout. The host's stderr (its logs) goes where ``stderr``
    says: discarded by default, a file object, or None to inherit ours.
    Closing ends the host's stdin, which ends its one session and the
    process."""

    def __init__(self, argv: Optional[Sequence[str]] = None, *, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, stderr: Any = subprocess.DEVNULL) -> None:
        self.argv = list(argv) if argv else ["aep", "serve", "--stdio"]
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stderr = stderr
        self.proc: Optional[asyncio.subprocess.Process] = None
        self._wlock = asyncio.Lock()

    async def open(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env=self.env, cwd=self.cwd, limit=_LINE_LIMIT)

    async def send(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.is_closing():
            raise ConnectionClosed("stdio transport is closed")
        async with self._wlock:
            try:
                self.proc.stdin.write(line.encode() + b"\n")
                await self.proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as e:
                raise ConnectionClosed(f"host stdin closed: {e}") from e

    async def recv(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                try:  # the status, when the host is already exiting
                    await asyncio.wait_for(self.proc.wait(), 2)
                except asyncio.TimeoutError:
                    pass
                hint = "; its logs were discarded: pass stderr= to see them" if self.stderr == subprocess.DEVNULL else ""
                raise ConnectionClosed(f"host exited (status {self.proc.returncode}){hint}")
            line = line.strip()
            if line:
                return line.decode()

    async def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


class HTTPTransport(Transport):
    """HTTP+SSE: ``POST /session`` creates the session, ``GET /stream``
    carries every message the host sends (one SSE event each), ``POST /send``
    carries each message the agent sends (answered 202). The session id
    travels only in the ``X-Session-Id`` header, never in a URL (it is a
    bearer secret, docs/transports.md). A stream that drops is reopened with
    ``Last-Event-ID``, so the host replays what was missed from its buffer.
    ``session_id`` attaches to an existing session (a subagent's child).
    A send the host refuses with 404, 502 or 503, or that cannot connect,
    raises SessionLost."""

    movable = True

    def __init__(self, base_url: str, *, session_id: Optional[str] = None, timeout: float = 30.0,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"HTTPTransport: {base_url!r} is not an http(s) URL")
        self._scheme, self._netloc, self._prefix = u.scheme, u.netloc, u.path.rstrip("/")
        self.session_id = session_id
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="aep-http-send")
        self._local = threading.local()
        self._send_conns: list[http.client.HTTPConnection] = []
        self._stream_conn: Optional[http.client.HTTPConnection] = None
        self._closing = threading.Event()
        self._last_id: Optional[str] = None
        self._reader: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://{self._netloc}{self._prefix}"

    def attach(self, session_id: str) -> "HTTPTransport":
        base = f"{self._scheme}://{self._netloc}{self._prefix}"
        return HTTPTransport(base, session_id=session_id, timeout=self.timeout, headers=self.headers)

    def new_session(self) -> "HTTPTransport":
        base = f"{self._scheme}://{self._netloc}{self._prefix}"
        return HTTPTransport(base, timeout=self.timeout, headers=self.headers)

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._netloc, timeout=timeout)

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        # One keep-alive connection per sending thread.
        conn = getattr(self._local, "conn", None)
        for attempt in (0, 1):
            if conn is None:
                conn = self._conn(self.timeout)
                self._local.conn = conn
                self._send_conns.append(conn)
            try:
                conn.request("POST", self._prefix + path, body=body, headers={**self.headers, **headers})
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                # A keep-alive connection the server closed: one fresh try.
                conn.close()
                conn = None
                self._local.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.session_id is None:
            status, body = await self._loop.run_in_executor(self._pool, self._post, "/session", b"", {})
            if status != 200 and status != 201:
                raise ConnectionClosed(f"POST /session: status {status}: {body[:200]!r}")
            self.session_id = json.loads(body)["session_id"]
        # The stream is open before anything is sent, so no reply can be
        # sent before there is a reader for it.
        ready: "asyncio.Future[None]" = self._loop.create_future()
        self._reader = threading.Thread(target=self._read_stream, args=(ready,), name="aep-sse", daemon=True)
        self._reader.start()
        await ready

    def _open_stream(self) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._conn(None)
        headers = {**self.headers, "Accept": "text/event-stream", "X-Session-Id": self.session_id or ""}
        if self._last_id is not None:
            headers["Last-Event-ID"] = self._last_id
        conn.request("GET", self._prefix + "/stream", headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            body = resp.read()[:200]
            conn.close()
            if _terminated_body(resp.status, body):
                raise SessionTerminated(f"GET /stream: the operator terminated session {self.session_id}")
            raise ConnectionClosed(f"GET /stream: status {resp.status}: {body!r}")
        return conn, resp

    def _deliver(self, item: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:
            pass  # the loop is closed: nobody is reading any more

    def _read_stream(self, ready: "asyncio.Future[None]") -> None:
        assert self._loop is not None
        first = True
        failures = 0
        while not self._closing.is_set():
            try:
                conn, resp = self._open_stream()
            except Exception as e:  # noqa: BLE001 - reported to the reader
                if isinstance(e, SessionTerminated) and not first:
                    self._deliver(e)
                    return
                if first:
                    self._loop.call_soon_threadsafe(_set_exc, ready, e)
                    return
                failures += 1
                if failures > 3 or self._closing.wait(0.1 * failures):
                    self._deliver(SessionLost(f"SSE stream lost: {e}"))
                    return
                continue
            self._stream_conn = conn
            if first:
                first = False
                self._loop.call_soon_threadsafe(_set_result, ready)
            try:
                self._parse(resp)
                failures = 0
            except Exception:  # noqa: BLE001 - a dropped stream is reopened
                pass
            finally:
                conn.close()
        self._deliver(ConnectionClosed("HTTP transport closed"))

    def _parse(self, resp: http.client.HTTPResponse) -> None:
        data: list[str] = []
        event_id: Optional[str] = None
        while True:
            raw = resp.readline(_LINE_LIMIT)
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if data:
                    self._deliver("\n".join(data))
                    if event_id is not None:
                        self._last_id = event_id
                data, event_id = [], None
                continue
            if line.startswith(":"):
                continue  # heartbeat comment
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "id":
                event_id = value

    async def send(self, line: str) -> None:
        if self._closing.is_set():
            raise ConnectionClosed("HTTP transport is closed")
        assert self._loop is not None
        headers = {"Content-Type": "text/plain; charset=utf-8", "X-Session-Id": self.session_id or ""}
        try:
            status, body = await self._loop.run_in_executor(self._pool, self._post, "/send", line.encode(), headers)
        except ConnectionRefusedError as e:
            # Nothing listens where the session was: its host is gone.
            raise SessionLost(f"POST /send: {e}", delivered=False) from e
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionClosed(f"POST /send: {e}") from e
        if _terminated_body(status, body):
            raise SessionTerminated(f"POST /send: the operator terminated session {self.session_id}")
        if status in (404, 503):
            # No such session here, or a host that takes no more: the line
            # was refused, not run.
            raise SessionLost(f"POST /send: status {status}: {body[:200]!r}", delivered=False)
        if status == 502:
            # A proxy lost the session's host, perhaps after passing the line on.
            raise SessionLost(f"POST /send: status {status}: {body[:200]!r}")
        if status != 202:
            raise ConnectionClosed(f"POST /send: status {status}: {body[:200]!r}")

    async def recv(self) -> str:
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)  # every later recv ends the same way
            raise item
        return item

    async def close(self) -> None:
        self._closing.set()
        conn = self._stream_conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._reader is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._reader.join, 5)
        self._pool.shutdown(wait=True)
        for c in self._send_conns:
            c.close()


def _set_result(f: "asyncio.Future[None]") -> None:
    if not f.done():
        f.set_result(None)


def _set_exc(f: "asyncio.Future[None]", e: BaseException) -> None:
    if not f.done():
        f.set_exception(e)


class _WSProtocol(asyncio.Protocol):
    """One WebSocket connection of a WebSocketTransport, framed by _ws.py:
    the upgrade's answer, then each frame as it arrives, a message handed to
    the transport at once (from data_received, with no task between)."""

    def __init__(self, owner: "WebSocketTransport", key: str, max_size: int) -> None:
        self.owner = owner
        self.key = key
        self.reader = _ws.Reader(max_size)
        self.transport: Optional[asyncio.Transport] = None
        self._head: Optional[bytearray] = bytearray()  # until the upgrade's answer is in
        loop = asyncio.get_running_loop()
        self.opened: "asyncio.Future[dict[str, str]]" = loop.create_future()
        self.lost: "asyncio.Future[None]" = loop.create_future()
        self.ended = False  # closed on purpose (by either side) or broken: not a drop
        self._paused = False
        self._drained: Optional["asyncio.Future[None]"] = None
        # The idle check under way on this connection: its ping's payload
        # and what it resolves to (True once the pong came back).
        self.ping: Optional[bytes] = None
        self.checked: Optional["asyncio.Future[bool]"] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        if self._head is not None:
            self._head += data
            i = self._head.find(b"\r\n\r\n")
            if i < 0:
                if len(self._head) > 65536:
                    self._fail_open(ConnectionClosed("an HTTP answer head over 64 KiB"))
                return
            head, rest = bytes(self._head[:i]), bytes(self._head[i + 4:])
            self._head = None
            try:
                status, headers = _ws.parse_response_head(head)
                _ws.check_handshake(status, headers, self.key)
            except _ws.HandshakeRefused as e:
                self._fail_open(e)
                return
            if self.opened.done():  # given up on (timed out)
                self._fail_open(ConnectionClosed("the upgrade came too late"))
                return
            # In use from now on, before any frame is read: the host's
            # first frames (a re-attach's replay) may come in this packet.
            self.owner._adopt(self, headers)
            self.opened.set_result(headers)
            data = rest
            if not data:
                return
        owner = self.owner
        owner._heard = time.monotonic()  # the idle check's clock: all a busy connection pays
        self.reader.feed(data)
        while True:
            try:
                item = self.reader.next()
            except _ws.WSProtocolError as e:
                self.end(e.code, str(e), SessionLost(f"WebSocket: the host broke the protocol: {e}"))
                return
            if item is None:
                return
            op, payload = item
            if op == _ws.OP_TEXT:
                owner._message(self, payload)  # type: ignore[arg-type]
            elif op == _ws.OP_BINARY:
                owner._message(self, payload.decode(errors="replace"))  # type: ignore[union-attr]
            elif op == _ws.OP_PING:
                self.write(_ws.encode_frame(_ws.OP_PONG, payload))  # type: ignore[arg-type]
            elif op == _ws.OP_PONG:
                if payload == self.ping and self.checked is not None and not self.checked.done():
                    self.checked.set_result(True)
            elif op == _ws.OP_CLOSE:
                try:
                    code, reason = _ws.parse_close(payload)  # type: ignore[arg-type]
                except _ws.WSProtocolError as e:
                    self.end(e.code, str(e), SessionLost(f"WebSocket: the host broke the protocol: {e}"))
                    return
                if code == _CLOSE_TERMINATED:
                    err: BaseException = SessionTerminated(
                        f"WebSocket closed: the operator terminated session {self.owner.session_id}")
                else:
                    err = SessionLost(f"WebSocket closed by the host ({code}{' ' + reason if reason else ''})")
                self.end(_ws.CLOSE_NORMAL if code == _ws.CLOSE_NO_STATUS else code, "", err)
                return

    def _fail_open(self, err: BaseException) -> None:
        self.ended = True
        if not self.opened.done():
            self.opened.set_exception(err)
        if self.transport is not None:
            self.transport.close()

    def write(self, frame: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(frame)

    def end(self, code: int, reason: str, err: BaseException) -> None:
        """Closes the connection on purpose (answering a close, or a broken
        frame, with code); the transport ends with err."""
        if self.ended:
            # Our own close, answered: the close handshake is done.
            if self.transport is not None:
                self.transport.close()
            return
        self.ended = True
        self.write(_ws.encode_close(code, reason))
        if self.transport is not None:
            self.transport.close()
        self.owner._ended(self, err)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.checked is not None and not self.checked.done():
            self.checked.set_result(False)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if not self.opened.done():
            self.opened.set_exception(ConnectionClosed(f"the connection ended before the upgrade: {exc}"))
            return
        if not self.ended:
            self.owner._dropped(self, exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        if self._paused and not self.lost.done():
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained


class WebSocketTransport(Transport):
    """``GET /ws``: one session per connection, one message per text frame
    (docs/transports.md), with the SDK's own framing (_ws.py) over asyncio:
    the standard library only. ``session_id`` attaches to an existing
    session; it goes in the ``X-Session-Id`` header, never in the URL.

    A connection that drops without the host closing it (no close frame) is
    re-attached to the same session, with ``Last-Event-ID`` set to the count
    of messages received, so the host replays what was missed from its
    buffer; the host keeps a dropped session for its grace period. Tries go
    on for ``reattach_timeout`` seconds; then, or when the host no longer
    has the session, or when the host closed the connection itself, the end
    of the connection is SessionLost. A line whose send failed before it was
    written is sent again on the new connection. ``reattached`` counts the
    re-attaches.

    A line sent on a connection that has received nothing for
    ``idle_check`` seconds (default 1; None turns the check off) is
    preceded by a ping and written once the pong came back. A connection
    whose host died while the client was idle (a proxy between them that
    has not noticed yet) is so found dead before the line is written,
    rather than swallowing it: it is re-attached, or, when that fails, the
    line fails as provably unsent (SessionLost with ``delivered`` False),
    which a client made with ``move=True`` sends in its new session. A ping
    unanswered in 10 s takes the connection for dead."""

    movable = True

    def __init__(self, url: str, *, session_id: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None, open_timeout: float = 30.0,
                 reattach_timeout: float = 10.0, max_size: int = _LINE_LIMIT,
                 idle_check: Optional[float] = IDLE_CHECK) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("ws", "wss") or not u.hostname:
            raise ValueError(f"WebSocketTransport: {url!r} is not a ws:// or wss:// URL")
        self.url = url
        self._tls = u.scheme == "wss"
        self._host = u.hostname
        self._port = u.port or (443 if self._tls else 80)
        self._hosthdr = u.netloc.rpartition("@")[2]
        self._path = (u.path or "/") + ("?" + u.query if u.query else "")
        self.session_id = session_id
        self.headers = dict(headers or {})
        self.open_timeout = open_timeout
        self.reattach_timeout = reattach_timeout
        self.max_size = max_size
        self.idle_check = _idle_check(idle_check)
        self.reattached = 0  # how many times a dropped connection was re-attached
        self._proto: Optional[_WSProtocol] = None
        # When a frame last came in (time.monotonic), or a connection was
        # made, or an idle check's pong came back.
        self._heard = 0.0
        self._pings = 0
        self._received = 0  # messages received, for Last-Event-ID
        self._closing = False
        self._reattaching: Optional["asyncio.Task[None]"] = None
        self._ended_with: Optional[BaseException] = None
        self._on_line: Optional[Callable[[str], None]] = None
        self._on_end: Optional[Callable[[BaseException], None]] = None
        self._queue: Optional["asyncio.Queue[Any]"] = None

    def attach(self, session_id: str) -> "WebSocketTransport":
        return WebSocketTransport(self.url, session_id=session_id, headers=self.headers,
                                  open_timeout=self.open_timeout, reattach_timeout=self.reattach_timeout,
                                  max_size=self.max_size, idle_check=self.idle_check)

    def new_session(self) -> "WebSocketTransport":
        return WebSocketTransport(self.url, headers=self.headers, open_timeout=self.open_timeout,
                                  reattach_timeout=self.reattach_timeout, max_size=self.max_size,
                                  idle_check=self.idle_check)

    async def open(self) -> None:
        self._queue = asyncio.Queue()
        await self._connect(None, self.open_timeout)

    async def _connect(self, last_seen: Optional[int], timeout: float) -> _WSProtocol:
        loop = asyncio.get_running_loop()
        headers = dict(self.headers)
        if self.session_id:
            headers["X-Session-Id"] = self.session_id
        if last_seen is not None:
            headers["Last-Event-ID"] = str(last_seen)
        key = _ws.new_key()
        request = _ws.handshake_request(self._hosthdr, self._path, key, headers)

        async def dial() -> _WSProtocol:
            _, proto = await loop.create_connection(
                lambda: _WSProtocol(self, key, self.max_size), self._host, self._port,
                ssl=ssl.create_default_context() if self._tls else None,
                server_hostname=self._host if self._tls else None)
            try:
                proto.write(request)
                await proto.opened
            except BaseException:
                proto.ended = True
                if proto.transport is not None:
                    proto.transport.close()
                raise
            return proto
        return await asyncio.wait_for(dial(), timeout)

    def _adopt(self, proto: _WSProtocol, headers: Mapping[str, str]) -> None:
        """proto's upgrade succeeded: it is the connection in use."""
        self.session_id = headers.get("x-session-id") or self.session_id
        self._heard = time.monotonic()
        old, self._proto = self._proto, proto
        if old is not None and old is not proto and old.transport is not None:
            old.ended = True
            old.transport.close()

    # --- what the connection hands over

    def listen(self, on_line: Callable[[str], None], on_end: Callable[[BaseException], None]) -> None:
        """Hands every line to on_line as it arrives, and the end (once) to
        on_end, instead of recv: the client's reader, with no task between
        the socket and it. Lines that came before are handed over first."""
        self._on_line, self._on_end = on_line, on_end
        q = self._queue
        while q is not None and not q.empty():
            item = q.get_nowait()
            if isinstance(item, BaseException):
                on_end(item)
                return
            on_line(item)

    def _message(self, proto: _WSProtocol, text: str) -> None:
        if proto is not self._proto:
            return  # a connection already replaced
        self._received += 1
        if self._on_line is not None:
            self._on_line(text)
        elif self._queue is not None:
            self._queue.put_nowait(text)

    def _ended(self, proto: _WSProtocol, err: BaseException) -> None:
        if proto is self._proto:
            self._end(err)

    def _end(self, err: BaseException) -> None:
        if self._ended_with is not None:
            return
        self._ended_with = err
        if self._on_end is not None:
            self._on_end(err)
        elif self._queue is not None:
            self._queue.put_nowait(err)

    def _dropped(self, proto: _WSProtocol, exc: Optional[BaseException]) -> None:
        if proto is not self._proto or self._ended_with is not None:
            return
        if self._closing:
            self._end(ConnectionClosed("WebSocket transport closed"))
            return
        cause: BaseException = exc or ConnectionClosed("the connection dropped")
        if not self.session_id:
            self._end(SessionLost(f"WebSocket closed: {cause}"))
            return
        if self._reattaching is None or self._reattaching.done():
            self._reattaching = asyncio.get_running_loop().create_task(self._reattach(cause))

    async def _reattach(self, cause: BaseException) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.reattach_timeout
        delay = 0.05
        last: BaseException = cause
        while not self._closing:
            try:
                await self._connect(self._received, max(0.1, deadline - loop.time()))
                self.reattached += 1
                return
            except _ws.HandshakeRefused as e:
                if e.status in (404, 410):
                    self._end(SessionLost(f"WebSocket dropped and the host no longer has the session "
                                          f"(HTTP {e.status})"))
                    return
                last = e
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure to connect is retried
                last = e
            if loop.time() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self._end(ConnectionClosed("WebSocket transport closed") if self._closing else
                  SessionLost(f"WebSocket dropped and could not be re-attached in {self.reattach_timeout:g}s: "
                              f"{last}"))

    # --- the Transport interface

    async def send(self, line: str) -> None:
        frame = _ws.encode_text(line)
        for _ in range(4):
            if self._ended_with is not None:
                raise SessionLost(f"WebSocket closed: {self._ended_with}", delivered=False)
            r = self._reattaching
            if r is not None and not r.done():
                await asyncio.shield(r)  # the line goes on the new connection
                continue
            proto = self._proto
            if proto is None or self._closing:
                raise ConnectionClosed("WebSocket transport is closed")
            t = proto.transport
            if t is None or t.is_closing():
                # Going: its end says whether a re-attach follows.
                await proto.lost
                await asyncio.sleep(0)
                continue
            idle = self.idle_check
            if idle is not None and time.monotonic() - self._heard >= idle and not await self._check(proto):
                # Found dead before the line was written: it goes on the
                # connection that replaces this one, or fails unsent.
                await proto.lost
                await asyncio.sleep(0)
                continue
            t = proto.transport
            if t is None or t.is_closing():
                continue
            t.write(frame)
            if proto._paused:
                await proto.drain()
            return
        raise SessionLost("WebSocket dropped again right after it was re-attached", delivered=False)

    async def _check(self, proto: _WSProtocol) -> bool:
        """The idle check: pings proto and says whether the pong came back
        within PING_TIMEOUT. One ping at a time per connection: lines sent
        meanwhile wait for the same pong. A connection that did not answer
        is aborted, which makes it a drop (re-attached, or the end)."""
        checked = proto.checked
        if checked is None or checked.done():
            self._pings += 1
            proto.ping = self._pings.to_bytes(8, "big")
            checked = proto.checked = asyncio.get_running_loop().create_future()
            proto.write(_ws.encode_frame(_ws.OP_PING, proto.ping))
        try:
            ok = await asyncio.wait_for(asyncio.shield(checked), PING_TIMEOUT)
        except asyncio.TimeoutError:
            ok = False
        if ok:
            self._heard = time.monotonic()
            return True
        if proto.transport is not None:
            proto.transport.abort()
        return False

    async def recv(self) -> str:
        assert self._queue is not None, "recv before open"
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)  # every later recv ends the same way
            raise item
        return item

    async def close(self) -> None:
        self._closing = True
        t = self._reattaching
        if t is not None and not t.done():
            t.cancel()
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        proto = self._proto
        if proto is not None and not proto.ended:
            proto.ended = True
            proto.write(_ws.encode_close(_ws.CLOSE_NORMAL))
            try:
                # The host answers with its close and ends the connection.
                await asyncio.wait_for(asyncio.shield(proto.lost), 5)
            except asyncio.TimeoutError:
                pass
            if proto.transport is not None:
                proto.transport.close()
        self._end(ConnectionClosed("WebSocket transport closed"))


class _HTTPPool:
    """Keep-alive HTTP/1.1 connections to one host for asyncio, with just
    what POST /session and POST /send need: a request with a body, an
    answer read by Content-Length, chunked coding or to its end. A
    connection is lent to one exchange at a time; concurrent exchanges open
    more."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.hosthdr = u.netloc.rpartition("@")[2]
        self.prefix = u.path.rstrip("/")
        self.base = f"{u.scheme}://{u.netloc}{self.prefix}"
        self.headers = dict(headers)
        self.timeout = timeout
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._all: "set[asyncio.StreamWriter]" = set()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        r, w = await asyncio.wait_for(asyncio.open_connection(
            self.host, self.port, ssl=ssl.create_default_context() if self.tls else None,
            server_hostname=self.host if self.tls else None, limit=_LINE_LIMIT), self.timeout)
        sock = w.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._all.add(w)
        return r, w

    def _request(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        hs = {**self.headers, **headers}
        for k, v in hs.items():
            if any(c in str(k) + str(v) for c in "\r\n\0"):
                raise ValueError(f"header {k!r}: a line break or NUL")
        return (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.hosthdr}\r\nContent-Length: {len(body)}\r\n" +
                "".join(f"{k}: {v}\r\n" for k, v in hs.items()) + "\r\n").encode("latin-1") + body

    async def post(self, path: str, body: bytes, headers: Mapping[str, str],
                   on_body: Optional[Callable[[bytes], None]] = None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a POST. With on_body, the body goes to
        it piece by piece as it arrives and the returned body is empty. A
        keep-alive connection the server closed meanwhile gets one fresh
        try; a connection whose exchange did not finish (an error, the task
        cancelled) is closed, not reused."""
        req = self._request(path, body, headers)
        for attempt in (0, 1):
            reused = bool(self._idle)
            r, w = self._idle.pop() if reused else await self._open()
            done = False
            try:
                w.write(req)
                try:
                    head = await r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    if reused and attempt == 0:
                        continue  # a keep-alive connection the server had closed
                    raise
                status, hdrs = _ws.parse_response_head(head[:-4])
                out = await self._body(r, hdrs, on_body)
                done = True
                if hdrs.get("connection", "").lower() != "close" and not r.at_eof():
                    self._idle.append((r, w))
                return status, hdrs, out
            finally:
                if not done:
                    self._all.discard(w)
                    w.close()
        raise AssertionError("unreachable")

    @staticmethod
    async def _body(r: asyncio.StreamReader, hdrs: Mapping[str, str],
                    on_body: Optional[Callable[[bytes], None]]) -> bytes:
        parts: list[bytes] = []
        size = [0]

        def keep(b: bytes) -> None:
            # A body kept whole is bounded; one handed on (an event stream)
            # is bounded a line at a time by its parser.
            size[0] += len(b)
            if size[0] > _LINE_LIMIT:
                raise ConnectionClosed(f"an answer over {_LINE_LIMIT} bytes")
            parts.append(b)
        put = on_body or keep
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            dec = Chunked()
            while not dec.done:
                data = await r.read(_READ)
                if not data:
                    raise ConnectionClosed("the answer ended inside its chunked body")
                got = dec.feed(data)
                if got:
                    put(got)
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            if n < 0 or n > _LINE_LIMIT:
                raise ConnectionClosed(f"an answer of {n} bytes")
            if n:
                put(await r.readexactly(n))
        else:
            while True:
                data = await r.read(_READ)
                if not data:
                    break
                put(data)
        return b"".join(parts)

    async def close(self) -> None:
        self._idle.clear()
        for w in list(self._all):
            w.close()
        self._all.clear()


class ExchangeTransport(Transport):
    """The single exchange (docs/transports.md): ``POST /session`` creates
    the session, and each message is one ``POST /send`` whose answer is the
    reply (``Accept: application/json``; with ``events=True``, ``Accept:
    text/event-stream``, the request's events and then its reply). Nothing
    stays open between calls: for clients that cannot keep a socket or a
    stream open (serverless functions, proxies that buffer). Events of the
    session outside a request are not sent anywhere; a tool's events are
    still in its result. ``session_id`` attaches to an existing session. A
    POST the host refuses with 404, 502 or 503, or that cannot connect,
    raises SessionLost."""

    movable = True

    def __init__(self, base_url: str, *, session_id: Optional[str] = None, timeout: float = 30.0,
                 headers: Optional[Mapping[str, str]] = None, events: bool = False) -> None:
        self._pool = _HTTPPool(base_url, headers or {}, timeout)
        self.base_url = self._pool.base
        self.session_id = session_id
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.events = events
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self._closed = False

    def attach(self, session_id: str) -> "ExchangeTransport":
        return ExchangeTransport(self.base_url, session_id=session_id, timeout=self.timeout, headers=self.headers,
                                 events=self.events)

    def new_session(self) -> "ExchangeTransport":
        return ExchangeTransport(self.base_url, timeout=self.timeout, headers=self.headers, events=self.events)

    async def open(self) -> None:
        self._queue = asyncio.Queue()
        if self.session_id is not None:
            return
        try:
            status, _, body = await self._pool.post("/session", b"", {})
        except ConnectionRefusedError as e:
            raise SessionLost(f"POST /session: {e}", delivered=False) from e
        except (OSError, asyncio.IncompleteReadError) as e:
            raise ConnectionClosed(f"POST /session: {e}") from e
        if status not in (200, 201):
            raise ConnectionClosed(f"POST /session: status {status}: {body[:200]!r}")
        try:
            self.session_id = json.loads(body)["session_id"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConnectionClosed(f"POST /session: no session id in the answer: {e}") from e

    async def send(self, line: str, *, events: Optional[bool] = None) -> None:
        """Posts line; its answer (the reply, or events and the reply) is
        what recv gives next. events (default: the transport's) asks for
        the request's events."""
        if self._closed:
            raise ConnectionClosed("exchange transport is closed")
        if events is None:
            events = self.events
        headers = {"Content-Type": "text/plain; charset=utf-8", "X-Session-Id": self.session_id or "",
                   "Accept": "text/event-stream" if events else "application/json"}
        stream = EventStream(_LINE_LIMIT) if events else None
        got: list[str] = []

        def on_body(data: bytes) -> None:
            for d, _ in stream.feed(data):  # type: ignore[union-attr]
                got.append(d)
                self._queue.put_nowait(d)  # events as they come, before the reply
        try:
            status, hdrs, body = await self._pool.post("/send", line.encode(), headers,
                                                       on_body if stream is not None else None)
        except ConnectionRefusedError as e:
            raise SessionLost(f"POST /send: {e}", delivered=False) from e
        except (OSError, asyncio.IncompleteReadError, BodyError) as e:
            raise ConnectionClosed(f"POST /send: {e}") from e
        if status == 202:
            return
        if _terminated_body(status, body):
            raise SessionTerminated(f"POST /send: the operator terminated session {self.session_id}")
        if status in (404, 503):
            raise SessionLost(f"POST /send: status {status}: {body[:200]!r}", delivered=False)
        if status == 502:
            raise SessionLost(f"POST /send: status {status}: {body[:200]!r}")
        if status != 200:
            raise ConnectionClosed(f"POST /send: status {status}: {body[:200]!r}")
        if stream is None:
            text = body.strip()
            if text:
                self._queue.put_nowait(text.decode())
                return
        elif got:
            return
        # The host gave up on the request (it is closing, and cancelled what
        # was running) without a reply.
        raise ConnectionClosed("POST /send: the host answered without a reply")

    async def recv(self) -> str:
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise item
        return item

    async def close(self) -> None:
        self._closed = True
        await self._pool.close()
        self._queue.put_nowait(ConnectionClosed("exchange transport closed"))


def default_argv() -> list[str]:
    """``$AEP_BIN serve --stdio`` (``aep`` on PATH when AEP_BIN is unset)."""
    return [os.environ.get("AEP_BIN", "aep"), "serve", "--stdio"]
