"""The transports of the synchronous client (aep.Client): blocking I/O done
by the thread that makes the call, with no event loop and no thread of
their own, so a call costs what its system calls cost
(docs/DECISIONS.md, The synchronous client waits on its own socket).

- WebSocket: ``GET /ws`` over a socket, framed by _ws.py; a connection
  that drops is re-attached to its session as the asyncio transport does.
- Exchange: the single exchange, ``POST /send`` answered with the reply
  (or, when events are wanted, with an event stream ending in it), one
  keep-alive HTTP/1.1 connection per calling thread (_Posts).
- SSE: HTTP+SSE, ``POST /send`` as the exchange's and ``GET /stream`` read
  from its socket (chunked, event-stream: _http1.py).
- Stdio: ``aep serve --stdio`` as a child process, lines on its pipes.

Each has ``recv(timeout)``: the next line the host sent, None when timeout
passes first (0: only what has already arrived), ConnectionClosed (or
SessionLost) when no line can come any more. One thread at a time calls
recv (the client sees to it); send and close may come from any thread.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import queue
import select
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from typing import Any, Callable, Mapping, Optional, Sequence

from . import _ws
from ._http1 import BodyError, Chunked, EventStream
from .errors import ConnectionClosed, SessionLost, SessionTerminated
from .transports import _CLOSE_TERMINATED, IDLE_CHECK, PING_TIMEOUT, _idle_check, _terminated_body

# The host's message limit is 1 MiB (docs/DECISIONS.md, Dispatch); replies
# carrying tool output may be as large, so readers allow well beyond it.
LINE_LIMIT = 64 << 20
_READ = 1 << 16
# A send first checks that the connection is still there when nothing was
# read on it for this long (seconds): a connection that dropped between
# calls is re-attached before the line goes out, not after it is lost.
_STALE = 0.01


class SyncTransport:
    """One session's blocking connection to a host; see the module's doc."""

    session_id: Optional[str] = None
    #: Whether new_session works: a client made with ``move=True`` needs it.
    movable = False

    def open(self, timeout: Optional[float] = None) -> None:
        raise NotImplementedError

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        """Sends one line. timeout and events matter to the single
        exchange only, whose send carries the request's whole exchange:
        timeout bounds it (TimeoutError; the dropped POST cancels the
        request on the host), events asks for the request's events."""
        raise NotImplementedError

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def attach(self, session_id: str) -> "SyncTransport":
        raise NotImplementedError(f"{type(self).__name__} cannot attach to another session of its host")

    def new_session(self) -> "SyncTransport":
        raise NotImplementedError(f"{type(self).__name__} cannot open another session")


# --- sockets


def _split(url: str, schemes: tuple[str, str]) -> tuple[bool, str, int, str, str]:
    """(tls, host, port, Host header, path with query) of url."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in schemes:
        raise ValueError(f"{url!r}: the scheme must be {schemes[0]} or {schemes[1]}")
    tls = u.scheme == schemes[1]
    host = u.hostname or ""
    if not host:
        raise ValueError(f"{url!r}: no host")
    port = u.port or (443 if tls else 80)
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    return tls, host, port, u.netloc.rpartition("@")[2], path


def _dial(tls: bool, host: str, port: int, timeout: Optional[float]) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(None)
        return sock
    except BaseException:
        sock.close()
        raise


def _read_head(sock: socket.socket, deadline: Optional[float]) -> tuple[bytes, bytes]:
    """An HTTP response head (without its blank line) and the bytes read
    after it."""
    buf = bytearray()
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            return bytes(buf[:i]), bytes(buf[i + 4:])
        if len(buf) > 65536:
            raise ConnectionClosed("an HTTP response head over 64 KiB")
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            data = sock.recv(_READ)
        except socket.timeout:
            raise ConnectionClosed("no HTTP answer in time") from None
        finally:
            if deadline is not None:
                sock.settimeout(None)
        if not data:
            raise ConnectionClosed("the server closed the connection before answering")
        buf += data


class _Socket:
    """A connected socket read with optional deadlines: blocking reads when
    there is none (one system call), poll before reading when there is."""

    __slots__ = ("sock", "poller", "tls")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)

    def read(self, deadline: Optional[float]) -> Optional[bytes]:
        """Bytes from the socket; b"" at its end; None when deadline passes
        first."""
        if deadline is not None and not (self.tls and self.sock.pending()):
            ms = (deadline - time.monotonic()) * 1000
            if not self.poller.poll(ms if ms > 0 else 0):
                return None
        return self.sock.recv(_READ)

    def gone(self) -> bool:
        """Whether the peer closed or reset the connection (checked without
        blocking; TLS connections are not checked). A peek that does not
        wait, not the poller: another thread may be polling it to read."""
        if self.tls:
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# --- WebSocket


class _WSConn(_Socket):
    __slots__ = ("reader", "send_lock", "dead", "ping", "ponged")

    def __init__(self, sock: socket.socket, rest: bytes, max_size: int) -> None:
        super().__init__(sock)
        self.reader = _ws.Reader(max_size)
        self.reader.feed(rest)
        self.send_lock = threading.Lock()
        self.dead = False
        # The idle check's ping under way (its payload), and whether its
        # pong came back.
        self.ping: Optional[bytes] = None
        self.ponged = False

    def write(self, data: bytes) -> None:
        with self.send_lock:
            self.sock.sendall(data)


class WebSocket(SyncTransport):
    """``GET /ws``: one session per connection, one message per text frame
    (docs/transports.md). ``session_id`` attaches to an existing session; it
    goes in the ``X-Session-Id`` header, never in the URL. A connection
    that drops without the host closing it (no close frame) is re-attached
    to the same session with ``Last-Event-ID`` set to the count of messages
    received, so the host replays what was missed; tries go on for
    ``reattach_timeout`` seconds. Then, or when the host no longer has the
    session (404), or when the host closed the connection itself, the end
    is SessionLost. ``reattached`` counts the re-attaches.

    ``idle_check`` as aep.WebSocketTransport's: a line sent on a connection
    that received nothing for that long (default 1 s; None: never) waits
    for a ping's pong first, so a connection found dead is known not to
    have taken the line. The pong is read as everything else is, by the
    thread whose turn it is to read (recv's caller): ``owner``, a weak
    reference to the aep.Client that reads this transport, provides
    ``_read_until(done, deadline)``, which takes that turn or waits for
    it, and ``_wake()``, told when the pong came. Without an owner there
    is no reader to see a pong, and no check."""

    movable = True

    def __init__(self, url: str, *, session_id: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
                 open_timeout: float = 30.0, reattach_timeout: float = 10.0, max_size: int = LINE_LIMIT,
                 idle_check: Optional[float] = IDLE_CHECK) -> None:
        self.url = url
        self._tls, self._host, self._port, self._hosthdr, self._path = _split(url, ("ws", "wss"))
        self.session_id = session_id
        self.headers = dict(headers or {})
        self.open_timeout = open_timeout
        self.reattach_timeout = reattach_timeout
        self.max_size = max_size
        self.idle_check = _idle_check(idle_check)
        self.reattached = 0
        self._conn: Optional[_WSConn] = None
        self.owner: Optional[Callable[[], Any]] = None  # a weakref.ref to the aep.Client reading this
        self._ping_lock = threading.Lock()
        self._pings = 0
        self._received = 0  # messages received in this session, for Last-Event-ID
        self._last_rx = 0.0
        self._closing = False
        self._ended: Optional[ConnectionClosed] = None  # SessionLost, or SessionTerminated
        self._reattach_lock = threading.Lock()

    def attach(self, session_id: str) -> "WebSocket":
        return WebSocket(self.url, session_id=session_id, headers=self.headers, open_timeout=self.open_timeout,
                         reattach_timeout=self.reattach_timeout, max_size=self.max_size, idle_check=self.idle_check)

    def new_session(self) -> "WebSocket":
        return WebSocket(self.url, headers=self.headers, open_timeout=self.open_timeout,
                         reattach_timeout=self.reattach_timeout, max_size=self.max_size, idle_check=self.idle_check)

    def open(self, timeout: Optional[float] = None) -> None:
        self._conn = self._connect(None, self.open_timeout if timeout is None else timeout)

    def _connect(self, last_seen: Optional[int], timeout: float) -> _WSConn:
        deadline = time.monotonic() + timeout
        headers = dict(self.headers)
        if self.session_id:
            headers["X-Session-Id"] = self.session_id
        if last_seen is not None:
            headers["Last-Event-ID"] = str(last_seen)
        key = _ws.new_key()
        sock = _dial(self._tls, self._host, self._port, timeout)
        try:
            sock.sendall(_ws.handshake_request(self._hosthdr, self._path, key, headers))
            head, rest = _read_head(sock, deadline)
            status, resp = _ws.parse_response_head(head)
            _ws.check_handshake(status, resp, key)
        except BaseException:
            sock.close()
            raise
        self.session_id = resp.get("x-session-id") or self.session_id
        self._last_rx = time.monotonic()
        return _WSConn(sock, rest, self.max_size)

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        frame = _ws.encode_text(line)
        for _ in range(3):
            if isinstance(self._ended, SessionTerminated):
                raise SessionTerminated(str(self._ended))
            if self._ended is not None:
                raise SessionLost(str(self._ended), delivered=False) from self._ended
            conn = self._conn
            if conn is None or self._closing:
                raise ConnectionClosed("WebSocket transport is closed")
            idle = time.monotonic() - self._last_rx
            if conn.dead or (idle > _STALE and conn.gone()) or \
                    (self.idle_check is not None and idle >= self.idle_check and not self._check(conn)):
                # Dropped since it was last read, or found dead by the idle
                # check: the line goes on the connection that replaces it.
                conn.dead = True
                try:
                    self._reattach(conn, ConnectionClosed("the connection dropped"))
                except SessionLost as lost:
                    raise SessionLost(str(lost), delivered=False) from lost.__cause__
                continue
            try:
                conn.write(frame)
                return
            except OSError as e:
                # Perhaps written in part: not sent again; whether the
                # session lives on is for the reader to learn.
                conn.dead = True
                raise SessionLost(f"WebSocket send: {e}", delivered=True) from e
        raise SessionLost("WebSocket dropped again right after it was re-attached", delivered=False)

    def _check(self, conn: _WSConn) -> bool:
        """The idle check: pings conn and says whether the pong came back
        within PING_TIMEOUT. False means the line was not written; the
        connection is then dead, or replaced, or the session's end known."""
        owner = self.owner() if self.owner is not None else None
        if owner is None:
            return True  # no reader to see a pong
        deadline = time.monotonic() + PING_TIMEOUT
        with self._ping_lock:
            if conn.ping is None or conn.ponged:  # else: wait for the pong of the ping under way
                self._pings += 1
                conn.ping, conn.ponged = self._pings.to_bytes(8, "big"), False
                try:
                    conn.write(_ws.encode_frame(_ws.OP_PING, conn.ping))
                except OSError:
                    return False

        def done() -> bool:
            return conn.ponged or conn.dead or self._conn is not conn or self._ended is not None or self._closing
        owner._read_until(done, deadline)
        if not conn.ponged:
            return False
        self._last_rx = time.monotonic()
        return True

    def _frame(self, conn: _WSConn, op: int, payload: Any) -> Optional[str]:
        """What a frame read from conn other than a text message does: a
        binary message is returned (and counted), a control frame answered
        or noted."""
        if op == _ws.OP_BINARY:
            self._received += 1
            return payload.decode(errors="replace")  # type: ignore[no-any-return]
        if op == _ws.OP_PING:
            try:
                conn.write(_ws.encode_frame(_ws.OP_PONG, payload))
            except OSError:
                conn.dead = True
        elif op == _ws.OP_PONG:
            if payload == conn.ping:
                conn.ponged = True
                owner = self.owner() if self.owner is not None else None
                if owner is not None:
                    owner._wake()
        elif op == _ws.OP_CLOSE:
            try:
                code, reason = _ws.parse_close(payload)
            except _ws.WSProtocolError as e:
                self._end(conn, SessionLost(f"WebSocket: the host broke the protocol: {e}"), e.code, str(e))
                return None
            echo = _ws.CLOSE_NORMAL if code == _ws.CLOSE_NO_STATUS else code
            if code == _CLOSE_TERMINATED:
                self._end(conn, SessionTerminated(
                    f"WebSocket closed: the operator terminated session {self.session_id}"), echo, "")
            else:
                self._end(conn, SessionLost(
                    f"WebSocket closed by the host ({code}{' ' + reason if reason else ''})"), echo, "")
        return None

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ended is not None:
                raise self._ended
            conn = self._conn
            if conn is None or self._closing:
                raise ConnectionClosed("WebSocket transport is closed")
            try:
                item = conn.reader.next()
            except _ws.WSProtocolError as e:
                self._end(conn, SessionLost(f"WebSocket: the host broke the protocol: {e}"), e.code, str(e))
                continue
            if item is not None:
                op, payload = item
                if op == _ws.OP_TEXT:
                    self._received += 1
                    return payload  # type: ignore[return-value]
                line = self._frame(conn, op, payload)
                if line is not None:
                    return line
                continue
            err: Optional[BaseException] = None
            try:
                data = conn.read(deadline)
            except OSError as e:
                data, err = b"", e
            if data is None:
                return None
            if data:
                conn.reader.feed(data)
                self._last_rx = time.monotonic()
                continue
            if self._closing:
                raise ConnectionClosed("WebSocket transport is closed")
            # The end without a close frame: a drop.
            conn.dead = True
            self._reattach(conn, err or ConnectionClosed("the connection dropped"))

    def _end(self, conn: _WSConn, err: ConnectionClosed, code: int, reason: str) -> None:
        """The session's connection ends for good: the host closed it, or
        broke the protocol (answered with its close code)."""
        try:
            conn.write(_ws.encode_close(code, reason))
        except OSError:
            pass
        conn.close()
        conn.dead = True
        if self._ended is None:
            self._ended = err

    def _reattach(self, old: _WSConn, cause: BaseException) -> None:
        """Replaces old, which dropped, with a connection re-attached to the
        session; once for every caller that saw it drop. Raises SessionLost
        when it cannot."""
        with self._reattach_lock:
            if self._conn is not old:
                return  # re-attached by another caller already
            if self._ended is not None:
                raise self._ended
            old.close()
            if self._closing or not self.session_id:
                raise ConnectionClosed("WebSocket transport is closed") if self._closing else \
                    SessionLost(f"WebSocket closed: {cause}")
            deadline = time.monotonic() + self.reattach_timeout
            delay = 0.05
            last: BaseException = cause
            while not self._closing:
                try:
                    self._conn = self._connect(self._received, max(0.1, deadline - time.monotonic()))
                    self.reattached += 1
                    return
                except _ws.HandshakeRefused as e:
                    if e.status in (404, 410):
                        self._ended = SessionLost(f"WebSocket dropped and the host no longer has the session "
                                                  f"(HTTP {e.status})")
                        raise self._ended from e
                    last = e
                except (OSError, ConnectionClosed) as e:
                    last = e
                if time.monotonic() + delay > deadline:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            if self._closing:
                raise ConnectionClosed("WebSocket transport is closed")
            self._ended = SessionLost(f"WebSocket dropped and could not be re-attached in {self.reattach_timeout:g}s: "
                                      f"{last}")
            raise self._ended from last

    def close(self) -> None:
        self._closing = True
        conn = self._conn
        if conn is not None and not conn.dead:
            try:
                conn.write(_ws.encode_close(_ws.CLOSE_NORMAL))
            except OSError:
                pass
            conn.dead = True
        if conn is not None:
            conn.close()


# --- HTTP: the single exchange and HTTP+SSE


class _HTTPConn(_Socket):
    """One keep-alive HTTP/1.1 connection of _Posts, with what was read past
    the last answer."""

    __slots__ = ("buf",)

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.buf = b""


class Answer:
    """An HTTP answer: its status, its headers (names in lower case) and
    its body (empty when it went to on_body)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class _Posts:
    """POSTs to one host over keep-alive HTTP/1.1, one connection per
    calling thread, written and read here: just what POST /session and POST
    /send need (a body by Content-Length, chunked or to the end of the
    connection). http.client would cost a round trip tens of microseconds
    more, most of them parsing headers (docs/PERFORMANCE.md)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        tls, self.host, self.port, self.hosthdr, _ = _split(base_url, ("http", "https"))
        self.tls = tls
        u = urllib.parse.urlsplit(base_url)
        self.prefix = u.path.rstrip("/")
        self.base = f"{u.scheme}://{u.netloc}{self.prefix}"
        self.headers = dict(headers)
        for k, v in self.headers.items():
            _check_header(k, v)
        self.timeout = timeout
        self._local = threading.local()
        self._conns: "set[_HTTPConn]" = set()
        self._lock = threading.Lock()
        self._closed = False

    def post(self, path: str, body: bytes, headers: Mapping[str, str], timeout: Optional[float],
             on_body: Optional[Callable[[bytes], None]] = None) -> Answer:
        """POSTs body; the answer, its body handed to on_body as it comes
        when given. timeout bounds the wait for the whole answer (None: no
        bound; connecting is bounded by the transport's timeout) and raises
        TimeoutError, dropping the connection (which cancels a request of
        the single exchange on the host). A keep-alive connection the
        server had closed gets one fresh try."""
        for k, v in headers.items():
            _check_header(k, v)
        req = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.hosthdr}\r\nContent-Length: {len(body)}\r\n" +
               "".join(f"{k}: {v}\r\n" for k, v in self.headers.items()) +
               "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode("latin-1") + body
        deadline = None if timeout is None else time.monotonic() + timeout
        for attempt in (0, 1):
            conn: Optional[_HTTPConn] = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                if self._closed:
                    raise ConnectionClosed("the transport is closed")
                conn = _HTTPConn(_dial(self.tls, self.host, self.port, self.timeout))
                with self._lock:
                    self._conns.add(conn)
                self._local.conn = conn
            try:
                try:
                    conn.sock.sendall(req)
                except OSError:
                    if reused and attempt == 0:
                        raise _Stale() from None
                    raise
                ans = self._answer(conn, deadline, on_body, first=reused and attempt == 0)
            except _Stale:
                self._drop(conn)
                continue  # the server closed it while it was idle: a fresh one
            except BaseException:
                self._drop(conn)
                raise
            if ans.headers.get("connection", "").lower() == "close":
                self._drop(conn)
            return ans
        raise AssertionError("unreachable")

    def _read(self, conn: _HTTPConn, deadline: Optional[float]) -> bytes:
        data = conn.read(deadline)
        if data is None:
            raise TimeoutError("no answer in time")
        return data

    def _answer(self, conn: _HTTPConn, deadline: Optional[float], on_body: Optional[Callable[[bytes], None]],
                first: bool) -> Answer:
        buf = conn.buf
        conn.buf = b""
        while True:
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            if len(buf) > 65536:
                raise ConnectionClosed("an HTTP answer head over 64 KiB")
            data = self._read(conn, deadline)
            if not data:
                if first and not buf:
                    raise _Stale()
                raise ConnectionClosed("the server closed the connection before answering")
            buf += data
        try:
            status, headers = _ws.parse_response_head(buf[:i])
        except _ws.HandshakeRefused as e:
            raise ConnectionClosed(str(e)) from None
        rest = buf[i + 4:]
        parts: list[bytes] = []
        size = [0]

        def keep(b: bytes) -> None:
            # A body kept whole is bounded; one handed on (an event stream)
            # is bounded a line at a time by its parser.
            size[0] += len(b)
            if size[0] > LINE_LIMIT:
                raise ConnectionClosed(f"an answer over {LINE_LIMIT} bytes")
            parts.append(b)
        put = on_body or keep
        if "chunked" in headers.get("transfer-encoding", "").lower():
            dec = Chunked()
            data = rest
            while True:
                try:
                    got = dec.feed(data)
                except BodyError as e:
                    raise ConnectionClosed(f"a broken chunked answer: {e}") from e
                if got:
                    put(got)
                if dec.done:
                    conn.buf = bytes(dec._buf)  # what came after the last chunk
                    break
                data = self._read(conn, deadline)
                if not data:
                    raise ConnectionClosed("the answer ended inside its chunked body")
        elif "content-length" in headers:
            try:
                n = int(headers["content-length"])
            except ValueError:
                raise ConnectionClosed(f"a bad Content-Length {headers['content-length']!r}") from None
            if n < 0 or n > LINE_LIMIT:
                raise ConnectionClosed(f"an answer of {n} bytes")
            while len(rest) < n:
                data = self._read(conn, deadline)
                if not data:
                    raise ConnectionClosed("the answer ended inside its body")
                rest += data
            if n:
                put(rest[:n])
            conn.buf = rest[n:]
        else:
            if rest:
                put(rest)
            while True:
                data = self._read(conn, deadline)
                if not data:
                    break
                put(data)
            headers["connection"] = "close"
        return Answer(status, headers, b"".join(parts))

    def _drop(self, conn: _HTTPConn) -> None:
        conn.close()
        with self._lock:
            self._conns.discard(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None

    def close(self) -> None:
        self._closed = True
        with self._lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            c.close()


class _Stale(Exception):
    """Internal: a reused keep-alive connection was closed by the server."""


def _check_header(k: str, v: str) -> None:
    if any(c in str(k) + str(v) for c in "\r\n\0") or ":" in str(k):
        raise ValueError(f"header {k!r}: a name or value with a line break, NUL or colon")


def _post_status(path: str, status: int, body: bytes, session_id: Optional[str]) -> None:
    """Raises what a refused POST /send means (docs/transports.md)."""
    if _terminated_body(status, body):
        raise SessionTerminated(f"POST {path}: the operator terminated session {session_id}")
    if status in (404, 503):
        # No such session here, or a host that takes no more: the line was
        # refused, not run.
        raise SessionLost(f"POST {path}: status {status}: {body[:200]!r}", delivered=False)
    if status == 502:
        # A proxy lost the session's host, perhaps after passing the line on.
        raise SessionLost(f"POST {path}: status {status}: {body[:200]!r}")
    raise ConnectionClosed(f"POST {path}: status {status}: {body[:200]!r}")


class Exchange(SyncTransport):
    """The single exchange (docs/transports.md): ``POST /session`` creates
    the session, and each message is one ``POST /send`` whose response
    carries the reply (``Accept: application/json``), or the request's
    events and then its reply (``Accept: text/event-stream``, when the call
    wants events). Nothing stays open between calls, so nothing is lost
    between them either; events of requests that did not ask for them are
    not sent (a tool's events are still in its result). A send that times
    out drops its POST, which cancels the request on the host."""

    movable = True

    def __init__(self, base_url: str, *, session_id: Optional[str] = None, timeout: float = 30.0,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self._posts = _Posts(base_url, headers or {}, timeout)
        self.base_url = self._posts.base
        self.session_id = session_id
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._lines: collections.deque[str] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False

    def attach(self, session_id: str) -> "Exchange":
        return Exchange(self.base_url, session_id=session_id, timeout=self.timeout, headers=self.headers)

    def new_session(self) -> "Exchange":
        return Exchange(self.base_url, timeout=self.timeout, headers=self.headers)

    def open(self, timeout: Optional[float] = None) -> None:
        if self.session_id is None:
            self.session_id = _create_session(self._posts)

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        if self._closed:
            raise ConnectionClosed("exchange transport is closed")
        headers = {"Content-Type": "text/plain; charset=utf-8", "X-Session-Id": self.session_id or "",
                   "Accept": "text/event-stream" if events else "application/json"}
        stream = EventStream(LINE_LIMIT) if events else None
        got: list[str] = []

        def on_body(data: bytes) -> None:
            for d, _ in stream.feed(data):  # type: ignore[union-attr]
                got.append(d)
                self._put(d)  # events as they come, before the reply
        try:
            ans = self._posts.post("/send", line.encode(), headers, timeout, on_body if stream is not None else None)
        except ConnectionRefusedError as e:
            raise SessionLost(f"POST /send: {e}", delivered=False) from e
        except TimeoutError:
            raise
        except BodyError as e:
            raise ConnectionClosed(f"POST /send: {e}") from e
        except OSError as e:
            raise ConnectionClosed(f"POST /send: {e}") from e
        if ans.status == 202:
            return  # a notification
        if ans.status != 200:
            _post_status("/send", ans.status, ans.body, self.session_id)
        if stream is None:
            text = ans.body.strip()
            if text:
                self._put(text.decode())
                return
        elif got:
            return
        # The host gave up on the request (it is closing, and cancelled
        # what was running) without a reply.
        raise ConnectionClosed("POST /send: the host answered without a reply")

    def _put(self, line: str) -> None:
        with self._cv:
            self._lines.append(line)
            self._cv.notify_all()

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        with self._cv:
            if not self._lines and not self._closed and timeout != 0:
                self._cv.wait_for(lambda: self._lines or self._closed, timeout)
            if self._lines:
                return self._lines.popleft()
            if self._closed:
                raise ConnectionClosed("exchange transport is closed")
            return None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._posts.close()


def _create_session(posts: _Posts) -> str:
    try:
        ans = posts.post("/session", b"", {}, posts.timeout)
    except ConnectionRefusedError as e:
        raise SessionLost(f"POST /session: {e}", delivered=False) from e
    except OSError as e:
        raise ConnectionClosed(f"POST /session: {e}") from e
    if ans.status not in (200, 201):
        raise ConnectionClosed(f"POST /session: status {ans.status}: {ans.body[:200]!r}")
    try:
        sid = json.loads(ans.body)["session_id"]
    except (ValueError, KeyError, TypeError) as e:
        raise ConnectionClosed(f"POST /session: no session id in the answer: {e}") from e
    if not isinstance(sid, str) or not sid:
        raise ConnectionClosed("POST /session: no session id in the answer")
    return sid


class SSE(SyncTransport):
    """HTTP+SSE: ``POST /session`` creates the session, ``GET /stream``
    carries every message the host sends (one event each), ``POST /send``
    each message the agent sends (answered 202). The session id travels
    only in the ``X-Session-Id`` header. A stream that drops is reopened
    with ``Last-Event-ID``, so the host replays what was missed; a send the
    host refuses with 404, 502 or 503, or that cannot connect, raises
    SessionLost."""

    movable = True

    def __init__(self, base_url: str, *, session_id: Optional[str] = None, timeout: float = 30.0,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self._posts = _Posts(base_url, headers or {}, timeout)
        self.base_url = self._posts.base
        self._tls, self._host, self._port, self._hosthdr, _ = _split(self.base_url, ("http", "https"))
        self.session_id = session_id
        self.timeout = timeout
        self.headers = dict(headers or {})
        self._stream: Optional[_Socket] = None
        self._body: Any = None  # Chunked, or None for a body read to its end
        self._events = EventStream(LINE_LIMIT)
        self._ready: collections.deque[str] = collections.deque()
        self._last_id: Optional[str] = None
        self._closing = False
        self._failures = 0

    def attach(self, session_id: str) -> "SSE":
        return SSE(self.base_url, session_id=session_id, timeout=self.timeout, headers=self.headers)

    def new_session(self) -> "SSE":
        return SSE(self.base_url, timeout=self.timeout, headers=self.headers)

    def open(self, timeout: Optional[float] = None) -> None:
        if self.session_id is None:
            self.session_id = _create_session(self._posts)
        # The stream is open before anything is sent, so no reply can come
        # before there is a reader for it.
        self._open_stream(self.timeout if timeout is None else timeout)

    def _open_stream(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        headers = {**self.headers, "Accept": "text/event-stream", "X-Session-Id": self.session_id or ""}
        if self._last_id is not None:
            headers["Last-Event-ID"] = self._last_id
        for k, v in headers.items():
            if any(c in str(k) + str(v) for c in "\r\n\0"):
                raise ValueError(f"header {k!r}: a line break or NUL")
        req = f"GET {self._posts.prefix}/stream HTTP/1.1\r\nHost: {self._hosthdr}\r\n" + \
            "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock = _dial(self._tls, self._host, self._port, timeout)
        try:
            sock.sendall(req.encode("latin-1"))
            head, rest = _read_head(sock, deadline)
            status, resp = _ws.parse_response_head(head)
        except _ws.HandshakeRefused as e:
            sock.close()
            raise ConnectionClosed(f"GET /stream: {e}") from e
        except BaseException:
            sock.close()
            raise
        if status != 200:
            body = rest
            try:  # the answer's reason, to tell a terminated session (404 "terminated")
                sock.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
                n = int(resp.get("content-length", "0") or 0)
                while len(body) < min(n, 4096):
                    d = sock.recv(4096)
                    if not d:
                        break
                    body += d
            except (OSError, ValueError):
                pass
            sock.close()
            if _terminated_body(status, body):
                raise SessionTerminated(f"GET /stream: the operator terminated session {self.session_id}")
            raise ConnectionClosed(f"GET /stream: status {status}: {body[:200]!r}")
        self._stream = _Socket(sock)
        self._body = Chunked() if "chunked" in resp.get("transfer-encoding", "").lower() else None
        self._events = EventStream(LINE_LIMIT)
        if rest:
            self._feed(rest)

    def _feed(self, data: bytes) -> None:
        if self._body is not None:
            data = self._body.feed(data)
        for d, eid in self._events.feed(data):
            self._ready.append(d)
            if eid is not None:
                self._last_id = eid

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        if self._closing:
            raise ConnectionClosed("HTTP transport is closed")
        headers = {"Content-Type": "text/plain; charset=utf-8", "X-Session-Id": self.session_id or ""}
        try:
            ans = self._posts.post("/send", line.encode(), headers, self.timeout)
        except ConnectionRefusedError as e:
            # Nothing listens where the session was: its host is gone.
            raise SessionLost(f"POST /send: {e}", delivered=False) from e
        except OSError as e:  # TimeoutError among them
            raise ConnectionClosed(f"POST /send: {e}") from e
        if ans.status != 202:
            _post_status("/send", ans.status, ans.body, self.session_id)

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closing:
                raise ConnectionClosed("HTTP transport is closed")
            stream = self._stream
            if stream is None:
                raise ConnectionClosed("HTTP transport is closed")
            try:
                data = stream.read(deadline)
                if data is None:
                    return None
                if data:
                    self._feed(data)
                    self._failures = 0
                    if self._body is None or not self._body.done:
                        continue
            except (OSError, BodyError):
                pass
            # The stream ended: reopen it where it left off.
            stream.close()
            self._stream = None
            self._reopen()

    def _reopen(self) -> None:
        while not self._closing:
            self._failures += 1
            if self._failures > 3:
                raise SessionLost("SSE stream lost: it could not be reopened")
            time.sleep(0.1 * self._failures)
            try:
                self._open_stream(self.timeout)
                return
            except SessionTerminated:
                raise
            except (OSError, ConnectionClosed) as e:
                if self._failures >= 3:
                    raise SessionLost(f"SSE stream lost: {e}") from e
        raise ConnectionClosed("HTTP transport is closed")

    def close(self) -> None:
        self._closing = True
        if self._stream is not None:
            self._stream.close()
        self._posts.close()


# --- stdio


class Stdio(SyncTransport):
    """Runs argv (default ``aep serve --stdio``) and talks NDJSON on its
    stdin and stdout. The host's stderr (its logs) goes where ``stderr``
    says: discarded by default, a file object, or None to inherit ours.
    Closing ends the host's stdin, which ends its one session and the
    process; one that does not end within 10 s is killed. ``proc`` is the
    host's subprocess.Popen."""

    def __init__(self, argv: Optional[Sequence[str]] = None, *, env: Optional[Mapping[str, str]] = None,
                 cwd: Optional[str] = None, stderr: Any = subprocess.DEVNULL) -> None:
        self.argv = list(argv) if argv else ["aep", "serve", "--stdio"]
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.stderr = stderr
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf known to hold no newline
        self._poller = select.poll()
        self._wlock = threading.Lock()
        self._closing = False

    def open(self, timeout: Optional[float] = None) -> None:
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=self.env, cwd=self.cwd, bufsize=0)
        assert self.proc.stdout is not None
        self._poller.register(self.proc.stdout.fileno(), select.POLLIN)

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdin.closed or self._closing:
            raise ConnectionClosed("stdio transport is closed")
        data = memoryview(line.encode() + b"\n")
        with self._wlock:
            try:
                fd = proc.stdin.fileno()
                while data:
                    data = data[os.write(fd, data):]
            except (BrokenPipeError, ConnectionResetError, ValueError, OSError) as e:
                raise ConnectionClosed(f"host stdin closed: {e}") from e

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        proc = self.proc
        if proc is None or proc.stdout is None:
            raise ConnectionClosed("stdio transport is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while True:
            i = self._buf.find(b"\n", self._scan)
            if i >= 0:
                line = bytes(self._buf[:i]).strip()
                del self._buf[:i + 1]
                self._scan = 0
                if line:
                    return line.decode()
                continue
            self._scan = len(self._buf)
            if self._scan > LINE_LIMIT:
                raise ConnectionClosed(f"the host sent a line over {LINE_LIMIT} bytes")
            if deadline is not None:
                ms = (deadline - time.monotonic()) * 1000
                if not self._poller.poll(ms if ms > 0 else 0):
                    return None
            try:
                data = os.read(fd, _READ)
            except OSError:
                data = b""
            if data:
                self._buf += data
                continue
            try:  # the status, when the host is already exiting
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            hint = "; its logs were discarded: pass stderr= to see them" if self.stderr == subprocess.DEVNULL else ""
            raise ConnectionClosed(f"host exited (status {proc.returncode}){hint}")

    def close(self) -> None:
        self._closing = True
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# --- a transport of the caller's making


class FromAsync(SyncTransport):
    """An asyncio Transport (aep.Transport) of the caller's making, run on
    an event loop of its own in a background thread: each send and receive
    hops to that thread and back. The SDK's own transports never need it."""

    def __init__(self, transport: Any) -> None:
        self.t = transport
        self.movable = bool(getattr(transport, "movable", False))
        self._lines: "queue.Queue[Any]" = queue.Queue()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aep-transport", daemon=True)
        self._thread.start()
        self._reader: Any = None

    @property  # type: ignore[override]
    def session_id(self) -> Optional[str]:  # noqa: D401
        return self.t.session_id

    def _run(self, coro: Any, timeout: Optional[float] = None) -> Any:
        if self._loop.is_closed():
            coro.close()
            raise ConnectionClosed("transport closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def open(self, timeout: Optional[float] = None) -> None:
        self._run(self.t.open(), timeout)

        async def read() -> None:
            while True:
                try:
                    self._lines.put(await self.t.recv())
                except asyncio.CancelledError:
                    raise
                except BaseException as e:  # noqa: BLE001 - the end, for the client
                    self._lines.put(e)
                    return
        self._reader = asyncio.run_coroutine_threadsafe(read(), self._loop)

    def send(self, line: str, *, timeout: Optional[float] = None, events: bool = False) -> None:
        self._run(self.t.send(line))

    def recv(self, timeout: Optional[float]) -> Optional[str]:
        try:
            item = self._lines.get(timeout=timeout) if timeout != 0 else self._lines.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            self._lines.put(item)
            raise item
        return item

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.t.close(), 15)
        finally:
            if self._reader is not None:
                self._reader.cancel()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            self._lines.put(ConnectionClosed("transport closed"))

    def attach(self, session_id: str) -> "FromAsync":
        return FromAsync(self.t.attach(session_id))

    def new_session(self) -> "FromAsync":
        return FromAsync(self.t.new_session())
