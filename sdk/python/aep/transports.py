"""The three transports of the SDK (docs/transports.md), behind one small
asyncio interface: open, send one line, receive one line, close.

- StdioTransport spawns ``aep serve --stdio`` (or any command serving NDJSON
  on stdin/stdout): standard library only.
- HTTPTransport speaks HTTP+SSE (``POST /session``, ``POST /send``,
  ``GET /stream``): standard library only (http.client in worker threads).
- WebSocketTransport speaks ``GET /ws``, one message per text frame, through
  the optional ``websockets`` package (``pip install aep[websocket]``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Optional, Sequence

from .errors import ConnectionClosed, SessionLost, SessionTerminated

# The WebSocket close code of a session the operator terminated.
_CLOSE_TERMINATED = 4410


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


class WebSocketTransport(Transport):
    """``GET /ws``: one session per connection, one message per text frame
    (docs/transports.md). Needs the ``websockets`` package; both its asyncio
    APIs work (``websockets.asyncio.client`` from version 13, the legacy
    ``websockets.client`` before, as in Debian's python3-websockets 10.4).
    ``session_id`` attaches to an existing session; it goes in the
    ``X-Session-Id`` header, never in the URL.

    A connection that drops without the host closing it (no close frame) is
    re-attached to the same session, with ``Last-Event-ID`` set to the count
    of messages received, so the host replays what was missed from its
    buffer; the host keeps a dropped session for its grace period. Tries go
    on for ``reattach_timeout`` seconds; then, or when the host no longer
    has the session, or when the host closed the connection itself, the end
    of the connection is SessionLost. A line whose send failed before it was
    written is sent again on the new connection."""

    movable = True

    def __init__(self, url: str, *, session_id: Optional[str] = None,
                 headers: Optional[Mapping[str, str]] = None, open_timeout: float = 30.0,
                 reattach_timeout: float = 10.0) -> None:
        self.url = url
        self.session_id = session_id
        self.headers = dict(headers or {})
        self.open_timeout = open_timeout
        self.reattach_timeout = reattach_timeout
        self.reattached = 0  # how many times a dropped connection was re-attached
        self._ws: Any = None
        self._received = 0  # messages received, for Last-Event-ID
        self._closing = False
        self._reattaching: Optional["asyncio.Task[None]"] = None

    def attach(self, session_id: str) -> "WebSocketTransport":
        return WebSocketTransport(self.url, session_id=session_id, headers=self.headers,
                                  open_timeout=self.open_timeout, reattach_timeout=self.reattach_timeout)

    def new_session(self) -> "WebSocketTransport":
        return WebSocketTransport(self.url, headers=self.headers, open_timeout=self.open_timeout,
                                  reattach_timeout=self.reattach_timeout)

    async def open(self) -> None:
        try:
            import websockets  # noqa: F401
        except ImportError as e:
            raise ImportError("the WebSocket transport needs the websockets package: pip install 'aep[websocket]'") from e
        await self._connect(None)

    async def _connect(self, last_seen: Optional[int]) -> None:
        headers = dict(self.headers)
        if self.session_id:
            headers["X-Session-Id"] = self.session_id
        if last_seen is not None:
            headers["Last-Event-ID"] = str(last_seen)
        try:
            from websockets.asyncio.client import connect  # websockets >= 13
            ws = await connect(self.url, additional_headers=headers, max_size=None, compression=None,
                               open_timeout=self.open_timeout)
            resp_headers = ws.response.headers
        except ImportError:
            from websockets.client import connect as legacy_connect  # websockets < 13
            ws = await legacy_connect(self.url, extra_headers=headers, max_size=None, compression=None,
                                      open_timeout=self.open_timeout)
            resp_headers = ws.response_headers
        self._ws = ws
        self.session_id = resp_headers.get("X-Session-Id") or self.session_id

    @staticmethod
    def _dropped(e: BaseException) -> bool:
        """Whether the connection ended without a close frame from the host
        (a network drop), as opposed to the host closing it on purpose."""
        if hasattr(e, "rcvd"):  # websockets >= 10: the close frame received, if any
            return getattr(e, "rcvd") is None
        return getattr(e, "code", None) == 1006

    @staticmethod
    def _gone(e: BaseException) -> bool:
        """Whether a failed upgrade says the host has no such session."""
        status = getattr(e, "status_code", None)  # legacy InvalidStatusCode
        if status is None:
            status = getattr(getattr(e, "response", None), "status_code", None)  # InvalidStatus
        return status in (404, 410)

    async def _reattach_loop(self, cause: BaseException) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.reattach_timeout
        delay = 0.05
        last: BaseException = cause
        while not self._closing:
            try:
                await self._connect(self._received)
                self.reattached += 1
                return
            except Exception as e:  # noqa: BLE001 - any failure to connect is retried
                if self._gone(e):
                    raise SessionLost(f"WebSocket dropped and the host no longer has session {self.session_id}: {e}") from e
                last = e
            if loop.time() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise SessionLost(f"WebSocket dropped and could not be re-attached: {last}") from last

    async def _reattach(self, old: Any, cause: BaseException) -> None:
        """Re-attaches after old dropped, once for every caller that saw it."""
        if self._ws is not old:
            return  # another caller re-attached already
        if self._closing or not self.session_id:
            raise SessionLost(f"WebSocket closed: {cause}") from cause
        if self._reattaching is None or self._reattaching.done():
            self._reattaching = asyncio.ensure_future(self._reattach_loop(cause))
        await asyncio.shield(self._reattaching)

    async def send(self, line: str) -> None:
        import websockets.exceptions as wse
        for _ in range(2):
            ws = self._ws
            if ws is None:
                raise ConnectionClosed("WebSocket transport is closed")
            # Both APIs name the state OPEN; a frame sent in any other state is
            # refused before it is written.
            was_open = getattr(getattr(ws, "state", None), "name", "OPEN") == "OPEN"
            try:
                await ws.send(line)
                return
            except wse.ConnectionClosed as e:
                if was_open or not self._dropped(e):
                    raise SessionLost(f"WebSocket closed: {e}", delivered=was_open) from e
                try:
                    await self._reattach(ws, e)
                except SessionLost as lost:
                    # The line was refused before it was written: not run.
                    raise SessionLost(str(lost), delivered=False) from lost.__cause__
        raise SessionLost("WebSocket dropped again right after it was re-attached", delivered=False)

    async def recv(self) -> str:
        import websockets.exceptions as wse
        while True:
            ws = self._ws
            try:
                frame = await ws.recv()
            except wse.ConnectionClosed as e:
                if getattr(getattr(e, "rcvd", None), "code", getattr(e, "code", None)) == _CLOSE_TERMINATED:
                    raise SessionTerminated(f"WebSocket closed: the operator terminated session {self.session_id}") from e
                if not self._dropped(e):
                    raise SessionLost(f"WebSocket closed: {e}") from e
                await self._reattach(ws, e)
                continue
            self._received += 1
            return frame.decode() if isinstance(frame, bytes) else frame

    async def close(self) -> None:
        self._closing = True
        t = self._reattaching
        if t is not None and not t.done():
            t.cancel()
        if self._ws is not None:
            await self._ws.close()


def default_argv() -> list[str]:
    """``$AEP_BIN serve --stdio`` (``aep`` on PATH when AEP_BIN is unset)."""
    return [os.environ.get("AEP_BIN", "aep"), "serve", "--stdio"]
