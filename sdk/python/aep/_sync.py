"""The synchronous client, aep.Client: the calling thread sends its request
and reads the reply from the connection itself, so a call is two system
calls and the Python around them, with no event loop and no hop to another
thread (docs/DECISIONS.md, The synchronous client waits on its own socket).

Several threads may share a client: the thread that waits for a reply reads
for everyone (replies and events go to whoever they belong to) while the
others wait on a condition, and the next of them takes over when it is
done. Between calls, one small daemon thread for all of the process's
clients (``_keeper``) reads what has arrived every half second, so the host's
keep-alive pings are answered, events reach ``on_event``, and a lost
session is noticed, and moved from (``move=True``), without a call.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence

from pydantic import ValidationError

from . import _codec, _models as m
from ._common import (MAX_RESENDS, OPEN_BACKOFF, SNAPSHOT_POLL, BatchArrays, Forks, Move, MoveCallback, Refused, note_point,
                      reason, wait_hint)
from ._methods import EventCallback, SyncMethods
from ._syncio import SSE, Exchange, FromAsync, Stdio, SyncTransport, WebSocket
from .errors import (ConnectionClosed, HandshakeError, MoveFailed, NoSnapshot, PointGap, ProtocolError,
                     RequestInterrupted, RequestTimeout, SessionLost, SessionTerminated)
from .trajectories import TrajectoryExport, _Pages
from .transports import (IDLE_CHECK, ExchangeTransport, HTTPTransport, StdioTransport, Transport, WebSocketTransport,
                         default_argv)

_log = logging.getLogger("aep")


class _Expired(Exception):
    """Internal: a wait's deadline passed."""


class _Slot:
    """A request in flight: its reply or error once settled."""

    __slots__ = ("rid", "reply", "on_event", "gen", "done", "value", "error")

    def __init__(self, rid: str, reply: type, on_event: Optional[EventCallback], gen: int) -> None:
        self.rid = rid
        self.reply = reply
        self.on_event = on_event
        self.gen = gen  # which of the client's sessions it was sent on
        self.done = False
        self.value: Any = None
        self.error: Optional[BaseException] = None


def as_sync(transport: Any) -> SyncTransport:
    """The blocking counterpart of one of the SDK's transports, with the
    same settings; a transport of the caller's making runs as it is on a
    loop of its own (FromAsync)."""
    if isinstance(transport, SyncTransport):
        return transport
    if isinstance(transport, WebSocketTransport):
        return WebSocket(transport.url, session_id=transport.session_id, headers=transport.headers,
                         open_timeout=transport.open_timeout, reattach_timeout=transport.reattach_timeout,
                         idle_check=transport.idle_check)
    if isinstance(transport, ExchangeTransport):
        return Exchange(transport.base_url, session_id=transport.session_id, timeout=transport.timeout,
                        headers=transport.headers)
    if isinstance(transport, HTTPTransport):
        return SSE(transport.base_url, session_id=transport.session_id, timeout=transport.timeout,
                   headers=transport.headers)
    if isinstance(transport, StdioTransport):
        return Stdio(transport.argv, env=transport.env, cwd=transport.cwd, stderr=transport.stderr)
    if isinstance(transport, Transport):
        return FromAsync(transport)
    raise TypeError(f"not a transport: {type(transport).__name__}")


class Client(SyncMethods):
    """The synchronous client: the same methods as AsyncClient, blocking,
    each call waiting on the connection itself. Make one with
    ``Client.stdio(...)``, ``.http(url)``, ``.websocket(url)``,
    ``.exchange(url)`` or ``.connect(transport)``; each handshakes before
    returning. ``with`` shuts the session down on exit.

    Callbacks (``on_event``, a request's ``on_event``, ``on_move``) run on
    the thread that reads the message: a thread waiting in a call, or,
    between calls, the SDK's keep-alive thread. A client may be shared by
    threads; forks are clients of their own."""

    def __init__(self, transport: SyncTransport, *, on_event: Optional[EventCallback] = None) -> None:
        #: The blocking transport of the current session (a move replaces it).
        self.transport = self._own(transport)
        self.on_event = on_event
        #: Move to a new session when this one is lost (see connect).
        self.move = False
        #: Called with a Move after every move.
        self.on_move: Optional[MoveCallback] = None
        #: Seconds a move waits for the lost session's snapshot.
        self.snapshot_wait = 5.0
        #: A move whose lost session left no snapshot carries on fresh.
        self.fresh = False
        #: A move may restore a snapshot older than ``point`` once
        #: snapshot_wait passed (Move.gap says what was lost); without it
        #: such a move ends the client (PointGap).
        self.accept_gap = False
        #: The highest point the current session's replies carried
        #: (docs/DECISIONS.md, Points); a restore's reply sets it to the
        #: point the session resumed from.
        self.point = 0
        self.handshake_reply: Optional[m.HandshakeRespMessage] = None
        self._moves: list[Move] = []
        self._gen = 0
        self._lost: Optional[BaseException] = None  # why the session was lost, while a move runs
        self._closed: Optional[BaseException] = None
        self._closing = False
        self._shut = False  # this client sent `shutdown`: the session is ending
        self._cancel_sent: set[str] = set()
        self._pending: dict[str, _Slot] = {}
        self._ids = itertools.count(1)
        self._prefix = os.urandom(6).hex()
        self._connect_kw: dict[str, Any] = {}
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._reading = False  # a thread reads the transport for everyone
        self._reader: Optional[int] = None  # which thread
        self._tl = threading.local()
        self._raw = 0  # requests in flight that want their reply as a dict

    # --- opening and closing

    @classmethod
    def connect(cls, transport: Any, *, token: Optional[str] = None, agent_id: str = "aep-python",
                caps: Sequence[str] = (), timeout: Optional[float] = 30.0,
                on_event: Optional[EventCallback] = None, record_trajectory: Optional[bool] = None,
                move: bool = False, on_move: Optional[MoveCallback] = None, snapshot_wait: float = 5.0,
                fresh: bool = False, accept_gap: bool = False) -> "Client":
        """Opens transport and handshakes (spec §2.4); the arguments are
        AsyncClient.connect's. transport is one of the SDK's transports
        (aep.WebSocketTransport, HTTPTransport, ExchangeTransport,
        StdioTransport: its blocking counterpart is used) or one of your
        own aep.Transport (run on a loop of its own)."""
        if token is None:
            token = os.environ.get("AEP_AUTH_TOKEN", "")
        if move and not transport.movable:
            raise ValueError(f"move=True needs a transport that can open a new session (HTTP, WebSocket), "
                             f"not {type(transport).__name__}")
        t = as_sync(transport)
        c = cls(t, on_event=on_event)
        try:
            t.open(timeout)
            reply = c.handshake(agent_caps=list(caps), agent_id=agent_id, auth_token=token,
                                record_trajectory=record_trajectory, call_timeout=timeout)
            if not reply.ok:
                raise HandshakeError(reply)
        except BaseException:
            c.close(shutdown=False)
            raise
        c.handshake_reply = reply
        c._connect_kw = dict(token=token, agent_id=agent_id, caps=list(caps), timeout=timeout,
                             record_trajectory=record_trajectory, move=move, snapshot_wait=snapshot_wait,
                             fresh=fresh, accept_gap=accept_gap)
        c.move = move
        c.on_move = on_move
        c.snapshot_wait = snapshot_wait
        c.fresh = fresh
        c.accept_gap = accept_gap
        _keeper.add(c)
        return c

    @classmethod
    def stdio(cls, argv: Optional[Sequence[str]] = None, *, env: Optional[dict[str, str]] = None,
              cwd: Optional[str] = None, stderr: Any = subprocess.DEVNULL, **kw: Any) -> "Client":
        """Spawns ``aep serve --stdio`` (argv; default ``$AEP_BIN`` or ``aep``)
        and handshakes over its stdin/stdout.

        The token given here (``token=``) becomes the host's
        ``AEP_AUTH_TOKEN``, in its environment and never in its argv, so a
        host whose configuration names no token accepts it; it replaces the
        one our own environment may hold, but not one ``env`` sets. The
        host's logs are discarded unless ``stderr`` names where they go (a
        file object, or None for our stderr)."""
        token = kw.get("token")
        if token and (env is None or "AEP_AUTH_TOKEN" not in env):
            env = {**(os.environ if env is None else env), "AEP_AUTH_TOKEN": token}
        return cls.connect(Stdio(argv or default_argv(), env=env, cwd=cwd, stderr=stderr), **kw)

    @classmethod
    def http(cls, base_url: str, *, session_id: Optional[str] = None, **kw: Any) -> "Client":
        """HTTP+SSE to a host at base_url (``http://127.0.0.1:8765``)."""
        return cls.connect(SSE(base_url, session_id=session_id), **kw)

    @classmethod
    def websocket(cls, url: str, *, session_id: Optional[str] = None, idle_check: Optional[float] = IDLE_CHECK,
                  **kw: Any) -> "Client":
        """WebSocket to a host's ``/ws`` (``ws://127.0.0.1:8765/ws``): the
        fastest transport over a network (docs/PERFORMANCE.md). idle_check:
        see aep.WebSocketTransport."""
        return cls.connect(WebSocket(url, session_id=session_id, idle_check=idle_check), **kw)

    @classmethod
    def exchange(cls, base_url: str, *, session_id: Optional[str] = None, **kw: Any) -> "Client":
        """The single exchange to a host at base_url: each request one
        ``POST /send`` answered with its reply (docs/transports.md), nothing
        held open between calls."""
        return cls.connect(Exchange(base_url, session_id=session_id), **kw)

    @property
    def session_id(self) -> Optional[str]:
        """The current session's id; a move changes it."""
        return self.handshake_reply.session_id if self.handshake_reply else None

    @property
    def aio(self) -> "Client":
        """The client itself. (Before the synchronous client read its own
        socket it ran an AsyncClient, reachable here, on a background
        thread; ``aio.transport`` and ``aio.session_id`` still work.)"""
        return self

    @property
    def moves(self) -> list[Move]:
        """The moves made so far, oldest first."""
        return list(self._moves)

    def close(self, *, shutdown: bool = True, timeout: float = 10.0) -> None:
        """Sends ``shutdown`` (the host answers what is in flight, then ends
        the session), waits for the in-flight replies up to timeout, and
        closes the transport."""
        if self._closing:
            return
        self._closing = True
        _keeper.remove(self)
        if shutdown and self._closed is None and self._lost is None and not self._shut:
            try:
                self._notify(m.ShutdownMessage, {}, {})
            except ConnectionClosed:
                pass
        if shutdown and self._shut and self._closed is None:
            try:  # what is in flight gets its reply first
                self._await_all(time.monotonic() + timeout)
            except (ConnectionClosed, _Expired):
                pass
        with self._mu:
            if self._closed is None:
                self._closed = ConnectionClosed("client closed")
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001 - closing anyway
            _log.debug("closing the transport failed", exc_info=True)
        self._fail_all(self._closed)

    def export_trajectories(self, out: Optional[Any] = None, **req: Any) -> TrajectoryExport:
        """See AsyncClient.export_trajectories."""
        pages = _Pages()
        while True:
            after = pages.add(self.session_trajectory_export(**req))
            if after is None:
                return pages.result(out)
            req["after"] = after

    def fork(self, count: int, *, snapshot_id: Optional[str] = None, **connect_kw: Any) -> "Forks[Client]":
        """Forks this session ``count`` ways and connects a Client to each
        fork; see AsyncClient.fork. Each fork is a client of its own, so
        forks can be driven from separate threads."""
        reply = self.session_fork(count, snapshot_id=snapshot_id)
        kw = {**self._connect_kw, **connect_kw}
        out: Forks[Client] = Forks(reply)
        try:
            for f in reply.forks:
                out.append(Client.connect(self.transport.attach(f.session_id), on_event=self.on_event, **kw))
        except BaseException:
            for c in out:
                c.close()
            raise
        return out

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- requests

    def _new_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def _movable(self) -> bool:
        return (self.move and self._closed is None and not self._closing and not self._shut
                and self.handshake_reply is not None)

    def _notify(self, model: type[m.Model], required: dict[str, Any], optional: dict[str, Any]) -> None:
        if isinstance(self._closed, SessionTerminated):
            raise SessionTerminated(str(self._closed))
        if self._closed is not None:
            raise ConnectionClosed(str(self._closed))
        if self._lost is not None:
            raise SessionLost(f"session {self.session_id} was lost: {self._lost}")
        if model is m.CancelMessage:
            self._cancel_sent.add(required["req_id"])
        self.transport.send(_codec.encode_message(model, self._new_id(), required, optional))
        if model is m.ShutdownMessage:
            # The session ends: what is in flight gets its reply, and a new
            # request would only be refused (or, with move, moved).
            self._shut = True

    def _request(self, model: type[m.Model], required: dict[str, Any], optional: dict[str, Any],
                 reply: type[m.Model], call_timeout: Optional[float],
                 on_event: Optional[EventCallback]) -> Any:
        if getattr(self._tl, "start", False):
            self._tl.start = False
            return self._start(model, required, optional, reply, call_timeout, on_event)
        for attempt in itertools.count():
            self._ready()
            try:
                slot = self._send(model, required, optional, reply, call_timeout, on_event, may_move=True)
                return self._finish(slot, call_timeout, may_move=True)
            except Refused as r:
                if attempt >= MAX_RESENDS:
                    raise MoveFailed(f"refused by {attempt + 1} sessions in turn: {r.cause}") from r.cause
        raise AssertionError("unreachable")

    def _ready(self) -> None:
        """Waits for a move under way (requests made during a move go to
        the new session); raises when the client has ended."""
        if self._lost is not None:
            with self._mu:
                while self._lost is not None and self._closed is None:
                    self._cv.wait()
        closed = self._closed
        if closed is not None:
            if isinstance(closed, MoveFailed):
                # A new exception for this request, with the move's cause
                # (e.g. NoSnapshot) kept.
                raise MoveFailed(str(closed)) from closed.__cause__
            if isinstance(closed, SessionTerminated):
                raise SessionTerminated(str(closed))
            raise ConnectionClosed(str(closed))
        if self._shut:
            raise ConnectionClosed("the session is shutting down: this client sent shutdown")

    def _send(self, model: type[m.Model], required: dict[str, Any], optional: dict[str, Any], reply: type,
              call_timeout: Optional[float], on_event: Optional[EventCallback], *, may_move: bool) -> _Slot:
        """Sends one request on the current session; its slot waits in
        _pending for the reply. With move, a session lost on the way raises
        RequestInterrupted, or Refused when the request provably did not
        run and may_move allows sending it again."""
        rid = self._new_id()
        line = _codec.encode_message(model, rid, required, optional)
        slot = _Slot(rid, reply, on_event, self._gen)
        self._pending[rid] = slot
        try:
            self.transport.send(line, timeout=call_timeout,
                                events=on_event is not None or self.on_event is not None)
        except BaseException as e:
            self._pending.pop(rid, None)
            err = self._send_failed(slot, e, call_timeout, may_move)
            if err is e:
                raise
            raise err from e
        return slot

    def _send_failed(self, slot: _Slot, e: BaseException, call_timeout: Optional[float],
                     may_move: bool) -> BaseException:
        """What a request whose send failed with e fails with."""
        if isinstance(e, SessionTerminated):
            # Ended on purpose by the operator: the client ends, never moves.
            with self._mu:
                if self._closed is None:
                    self._closed = e
            return e
        if isinstance(e, SessionLost):
            if not self._movable():
                return e
            sid = self.session_id
            self._session_lost(slot.gen, e)
            if e.delivered or not may_move:
                return RequestInterrupted(slot.rid, sid, e)
            return Refused(e)
        if isinstance(e, ConnectionClosed):
            if not self._movable():
                return e
            # Perhaps sent, perhaps not: the session may live on; the
            # reader learns whether it ended.
            return RequestInterrupted(slot.rid, self.session_id, e)
        if isinstance(e, TimeoutError):
            # The single exchange's POST outlived call_timeout: dropping it
            # cancelled the request on the host.
            return RequestTimeout(slot.rid, call_timeout or 0.0)
        return e

    def _send_behind(self, model: type[m.Model], required: dict[str, Any], optional: dict[str, Any],
                     reply: type, call_timeout: Optional[float], on_event: Optional[EventCallback]) -> _Slot:
        """A request of the single exchange sent by a thread of its own, for
        Client.start: the exchange's POST lasts until the reply, and start
        returns at once. What the POST fails with settles the request."""
        rid = self._new_id()
        line = _codec.encode_message(model, rid, required, optional)
        slot = _Slot(rid, reply, on_event, self._gen)
        self._pending[rid] = slot
        t = self.transport
        events = on_event is not None or self.on_event is not None

        def post() -> None:
            try:
                t.send(line, timeout=call_timeout, events=events)
            except BaseException as e:  # noqa: BLE001 - the request's outcome
                self._settle(slot, error=self._send_failed(slot, e, call_timeout, True))
        threading.Thread(target=post, name="aep-exchange-call", daemon=True).start()
        return slot

    def _finish(self, slot: _Slot, call_timeout: Optional[float], *, may_move: bool,
                wait: Optional[float] = None) -> Any:
        """Waits for slot's reply: at most call_timeout (then cancel goes on
        the wire and RequestTimeout is raised) and, for SyncCall.result, at
        most wait (then TimeoutError, the request going on)."""
        deadline = None if call_timeout is None else time.monotonic() + call_timeout
        until = deadline
        if wait is not None:
            w = time.monotonic() + wait
            until = w if until is None else min(until, w)
        settled = False
        try:
            try:
                self._await(slot, until)
            except _Expired:
                if deadline is not None and time.monotonic() >= deadline:
                    self._pending.pop(slot.rid, None)
                    self._cancel_quietly(slot.rid)
                    settled = True
                    raise RequestTimeout(slot.rid, call_timeout or 0.0) from None
                raise TimeoutError(f"no reply within {wait}s") from None
            settled = True
        except (KeyboardInterrupt, SystemExit):
            # The caller gave up: tell the host to stop.
            self._pending.pop(slot.rid, None)
            self._cancel_quietly(slot.rid)
            settled = True
            raise
        finally:
            if settled:
                self._pending.pop(slot.rid, None)
                self._cancel_sent.discard(slot.rid)
        err = slot.error
        if err is not None:
            if isinstance(err, Refused) and not may_move:
                raise err.cause
            raise err
        return slot.value

    def _cancel_quietly(self, rid: str) -> None:
        if self._closed is None and self._lost is None:
            try:
                self.cancel(rid)
            except ConnectionClosed:
                pass

    def env_step_arrays(self, episode_ids: Sequence[str], actions: Any, *,
                        autoreset_mode: Optional[str] = None, traceparent: Optional[str] = None,
                        call_timeout: Optional[float] = None) -> BatchArrays:
        """``env/step_batch/req`` with the reply as arrays (BatchArrays): one
        reward, termination, truncation, observation and info per episode,
        numpy arrays where numpy is installed; actions may be a numpy array.
        The reply is read as plain JSON, without a model per episode: for
        vectorised training with many episodes a step (docs/PERFORMANCE.md,
        Python SDK)."""
        self._raw += 1
        try:
            d = self._request(m.EnvStepBatchReqMessage, {"actions": actions, "episode_ids": list(episode_ids)},
                              {"autoreset_mode": autoreset_mode, "traceparent": traceparent},
                              _codec.Raw(m.EnvStepBatchRespMessage), call_timeout, None)  # type: ignore[arg-type]
        finally:
            self._raw -= 1
        return BatchArrays.from_reply(d)

    def start(self, method: str, *args: Any, **kwargs: Any) -> "SyncCall":
        """Sends a typed request (``"tool_call"``, ...) and returns at once:
        ``.result(timeout)`` gives the reply, ``.cancel()`` cancels it on the
        wire (the result is then ProtocolError with code ``cancelled``)."""
        fn: Callable[..., Any] = getattr(self, method)
        self._tl.start = True
        try:
            call = fn(*args, **kwargs)
        finally:
            self._tl.start = False
        assert isinstance(call, SyncCall)
        return call

    def _start(self, model: type[m.Model], required: dict[str, Any], optional: dict[str, Any], reply: type,
               call_timeout: Optional[float], on_event: Optional[EventCallback]) -> "SyncCall":
        for attempt in itertools.count():
            self._ready()
            try:
                if isinstance(self.transport, Exchange):
                    slot = self._send_behind(model, required, optional, reply, call_timeout, on_event)
                else:
                    slot = self._send(model, required, optional, reply, call_timeout, on_event, may_move=True)
                return SyncCall(self, slot, (model, required, optional, reply, call_timeout, on_event))
            except Refused as r:
                if attempt >= MAX_RESENDS:
                    raise MoveFailed(f"refused by {attempt + 1} sessions in turn: {r.cause}") from r.cause
        raise AssertionError("unreachable")

    # --- reading

    def _await(self, slot: _Slot, deadline: Optional[float]) -> None:
        """Returns when slot is settled, following the transport's end or a
        move to the slot's settling; raises _Expired at deadline."""
        if not self._read(lambda: slot.done, deadline, follow=True):
            raise _Expired()

    def _read(self, done: Callable[[], bool], deadline: Optional[float], follow: bool) -> bool:
        """Reads the transport for everyone while no other thread does, else
        waits for the thread that does, until done(): True then. False at
        deadline and, unless follow, when the transport ends or a move
        replaces it (the idle check's pong will not come on it). A call made
        by a callback runs on the reading thread itself: it reads on,
        nested."""
        me = threading.get_ident()
        while True:
            with self._mu:
                while not done() and self._reading and self._reader != me:
                    if deadline is None:
                        self._cv.wait()
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return False
                        self._cv.wait(left)
                if done():
                    return True
                nested = self._reading
                self._reading, self._reader = True, me
                t, gen = self.transport, self._gen
            try:
                while not done():
                    timeout = None
                    if deadline is not None:
                        timeout = deadline - time.monotonic()
                        if timeout <= 0:
                            return False
                    try:
                        line = t.recv(timeout)
                    except Exception as e:  # noqa: BLE001 - the transport's end, for every waiter
                        self._ended(gen, e)
                        if not follow:
                            return False
                        break
                    if line is not None:
                        self._dispatch(line)
                    if t is not self.transport:
                        if not follow:
                            return False
                        break  # a move replaced it: read the new one
            finally:
                if not nested:
                    with self._mu:
                        self._reading, self._reader = False, None
                        self._cv.notify_all()

    def _await_all(self, deadline: float) -> None:
        """Reads until no request is in flight, or deadline."""
        while True:
            live = [s for s in list(self._pending.values()) if not s.done]
            if not live:
                return
            self._await(live[0], deadline)

    def _own(self, t: SyncTransport) -> SyncTransport:
        """t, told that this client reads it: a WebSocket's idle check reads
        for its pong through _read_until."""
        if isinstance(t, WebSocket):
            t.owner = weakref.ref(self)
        return t

    def _read_until(self, done: Callable[[], bool], deadline: float) -> None:
        """Reads for everyone, as _await does, until done() or deadline: the
        WebSocket's idle check waiting for its pong, which the thread whose
        turn it is to read sees (_wake). It stops at the transport's end or
        a move: the pong would never come."""
        self._read(done, deadline, follow=False)

    def _wake(self) -> None:
        """A WebSocket's idle check got its pong: the sender waiting for
        another thread's reading looks again."""
        with self._mu:
            self._cv.notify_all()

    def _idle_poll(self) -> None:
        """The keep-alive thread's turn: reads what has arrived, when no
        caller is reading."""
        with self._mu:
            if self._reading or self._closed is not None or self._closing or self._lost is not None:
                return
            self._reading, self._reader = True, threading.get_ident()
            t, gen = self.transport, self._gen
        try:
            while True:
                try:
                    line = t.recv(0)
                except Exception as e:  # noqa: BLE001 - the transport's end
                    self._ended(gen, e)
                    return
                if line is None:
                    return
                self._dispatch(line)
        finally:
            with self._mu:
                self._reading, self._reader = False, None
                self._cv.notify_all()

    def _ended(self, gen: int, err: BaseException) -> None:
        """Session gen's transport ended with err."""
        if gen != self._gen:
            return  # an older session's end, already handled
        if isinstance(err, SessionTerminated):
            # Ended on purpose by the operator: never moved.
            with self._mu:
                if self._closed is None:
                    self._closed = err
            self._fail_all(self._closed)  # type: ignore[arg-type]
            return
        if self._movable():
            self._session_lost(gen, err)
            return
        with self._mu:
            if self._closed is None:
                self._closed = err if isinstance(err, ConnectionClosed) else ConnectionClosed(str(err))
        self._fail_all(self._closed)  # type: ignore[arg-type]

    def _settle(self, slot: _Slot, value: Any = None, error: Optional[BaseException] = None) -> None:
        with self._mu:
            if slot.done:
                return
            slot.value, slot.error, slot.done = value, error, True
            self._cv.notify_all()

    def _fail_all(self, err: BaseException) -> None:
        for slot in list(self._pending.values()):
            if not slot.done:
                self._settle(slot, error=ConnectionClosed(str(err)))

    def _dispatch(self, line: str) -> None:
        if self._raw and self._dispatch_raw(line):
            return
        try:
            msg = _codec.decode(line)
        except ValidationError as e:
            self._undecodable(line, e)
            return
        rid = getattr(msg, "req_id", None)
        slot = self._pending.get(rid) if rid is not None else None
        t = msg.type  # type: ignore[union-attr]
        if t.endswith("/event"):
            if slot is not None and slot.on_event is not None:
                self._call_back(slot.on_event, msg)
            cb = self.on_event
            if cb is not None:
                self._call_back(cb, msg)
            return
        if slot is not None and slot.gen == self._gen and self._lost is None:
            # The current session's point (docs/DECISIONS.md, Points).
            self.point = note_point(self.point, t, getattr(msg, "point", None))
        if slot is None or slot.done:
            return  # the reply of a request given up on (cancelled, timed out)
        if t == "error":
            err = ProtocolError.from_message(msg)
            why = reason(err)
            if why == "terminated":
                # The operator ended the session: the client ends with it
                # rather than move it elsewhere.
                with self._mu:
                    if self._closed is None:
                        self._closed = SessionTerminated(f"the operator terminated session {self.session_id}")
                self._settle(slot, error=err)
                return
            if err.code == "cancelled" and rid not in self._cancel_sent:
                # Cancelled by the host, not by us: it closes the session.
                why = "session_ended"
            if why in ("shutting_down", "session_ended") and self._movable() and slot.gen == self._gen:
                if why == "shutting_down":
                    # Refused unread: the session is ending. It can go to the next one.
                    self._settle(slot, error=Refused(err))
                # session_ended: it was running when the session ended: interrupted.
                self._session_lost(slot.gen, err)
                return
            self._settle(slot, error=err)
        elif isinstance(slot.reply, _codec.Raw):
            if isinstance(msg, slot.reply.model):
                self._settle(slot, value=msg.model_dump(mode="json"))
            else:
                self._settle(slot, error=ProtocolError(
                    "parse_error", f"reply of type {t}, expected {slot.reply.type}", req_id=rid))
        elif type(msg) is slot.reply or isinstance(msg, slot.reply):
            self._settle(slot, value=msg)
        else:
            self._settle(slot, error=ProtocolError(
                "parse_error", f"reply of type {t}, expected {_codec.wire_type(slot.reply)}", req_id=rid))

    def _dispatch_raw(self, line: str) -> bool:
        """Settles the request that wants line as a dict (_codec.Raw),
        without a model; False when line is not such a reply."""
        _, rid = _codec.peek(line)
        slot = self._pending.get(rid) if rid is not None else None
        if slot is None or slot.done or not isinstance(slot.reply, _codec.Raw):
            return False
        d = _codec.raw_reply(line, slot.reply, rid)  # type: ignore[arg-type]
        if d is None:
            return False
        if slot.gen == self._gen and self._lost is None:
            self.point = note_point(self.point, str(d.get("type", "")), d.get("point"))
        self._settle(slot, value=d)
        return True

    def _undecodable(self, line: str, err: ValidationError) -> None:
        # A reply the models do not know (a newer host's type) or that does
        # not match its model: fail its request with the reason rather than
        # let it hang.
        t, rid = _codec.reply_of(line)
        slot = self._pending.get(rid) if rid is not None else None
        if slot is not None and not slot.done and not (t or "").endswith("/event"):
            import json
            self._settle(slot, error=ProtocolError("parse_error", f"undecodable reply: {err}",
                                                   detail=json.loads(line), req_id=rid))

    @staticmethod
    def _call_back(cb: Callable[[Any], Any], msg: Any) -> None:
        try:
            r = cb(msg)
            if asyncio.iscoroutine(r):
                asyncio.run(r)  # a coroutine callback: run to its end here, there being no loop
        except Exception:  # noqa: BLE001 - a callback's failure is not the client's
            _log.exception("aep: event callback failed")

    # --- moving (move=True)

    def _session_lost(self, gen: int, err: BaseException) -> None:
        """Session number gen is gone: what was sent on it fails with
        RequestInterrupted, and a move starts at once, in a thread of its
        own; requests wait for it."""
        with self._mu:
            if gen != self._gen or self._closed is not None:
                return
            sid = self.session_id
            for slot in list(self._pending.values()):
                if slot.gen == gen and not slot.done:
                    slot.error, slot.done = RequestInterrupted(slot.rid, sid, err), True
            start = self._lost is None
            if start:
                self._lost = err
            self._cv.notify_all()
        if start:
            threading.Thread(target=self._move, name="aep-move", daemon=True).start()

    def _move(self) -> None:
        """Opens a new session and restores the lost one into it; on failure
        the client ends with MoveFailed. Never raises."""
        from_id = self.session_id or ""
        last_point = self.point
        cause = self._lost or ConnectionClosed("session lost")
        started = time.monotonic()
        timeout = self._connect_kw.get("timeout") or 30.0
        deadline = started + timeout
        old = self.transport
        try:
            old.close()
        except Exception:  # noqa: BLE001 - the old session is gone either way
            pass
        try:
            reply = self._open_session(old, deadline)
            snapshot_id, restored, resumed, gap = self._restore_from(from_id, last_point, wait_hint(cause), deadline)
        except BaseException as e:  # noqa: BLE001 - the client ends with it
            self._drop_transport()
            fail = MoveFailed(f"moving to a new session failed: {e}")  # not the lost id: a bearer secret
            fail.__cause__ = e
            mv = Move(from_session=from_id, session_id=None, snapshot_id=None, restored=(), fresh=False,
                      cause=cause, error=e, took=time.monotonic() - started, last_point=last_point)
            self._moves.append(mv)
            with self._mu:
                if self._closed is None:
                    self._closed = fail
                self._cv.notify_all()
            self._fail_all(self._closed)  # type: ignore[arg-type]
            self._report(mv)
            return
        mv = Move(from_session=from_id, session_id=reply.session_id, snapshot_id=snapshot_id,
                  restored=tuple(restored), fresh=snapshot_id is None, cause=cause, error=None,
                  took=time.monotonic() - started, last_point=last_point, point=resumed, gap=gap)
        self._moves.append(mv)
        with self._mu:
            self.handshake_reply = reply
            self.point = resumed
            self._lost = None
            self._cv.notify_all()
        self._report(mv)

    def _report(self, mv: Move) -> None:
        if self.on_move is None:
            return
        try:
            self.on_move(mv)
        except Exception:  # noqa: BLE001 - a callback's failure is not the move's
            _log.exception("on_move callback failed")

    def _drop_transport(self) -> None:
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001
            pass

    def _open_session(self, old: SyncTransport, deadline: float) -> m.HandshakeRespMessage:
        """A new session through old's URL, handshaken as the first one was;
        retried with back-off until deadline. A refused handshake is final."""
        kw = self._connect_kw
        wait, most = OPEN_BACKOFF
        while True:
            if self._closing:
                raise ConnectionClosed("client closed")
            t = self._own(old.new_session())
            with self._mu:
                self._gen += 1
                self.transport = t
            try:
                t.open(max(0.1, deadline - time.monotonic()))
                slot = self._send(m.HandshakeReqMessage,
                                  {"agent_id": kw["agent_id"], "agent_caps": kw["caps"], "auth_token": kw["token"]},
                                  {"record_trajectory": kw["record_trajectory"]}, m.HandshakeRespMessage,
                                  None, None, may_move=False)
                reply = self._finish(slot, max(0.1, deadline - time.monotonic()), may_move=False)
            except Exception as e:  # noqa: BLE001 - any failure to reach a host: try again
                self._drop_transport()
                if time.monotonic() + wait > deadline:
                    raise ConnectionClosed(f"no new session before the move's deadline: {e}") from e
                time.sleep(wait)
                wait = min(2 * wait, most)
                continue
            if not reply.ok:
                raise HandshakeError(reply)
            return reply

    def _restore_from(self, from_id: str, last_point: int, hint: float, deadline: float
                      ) -> tuple[Optional[str], list[str], int, Optional[m.PointGap]]:
        """Restores the newest snapshot of from_id that covers last_point,
        waiting up to snapshot_wait seconds (or the draining host's longer
        hint) for one; then NoSnapshot (or with fresh (None, [], 0, None)),
        or for an older one PointGap (or with accept_gap, that one and its
        gap), as AsyncClient does."""
        wait = max(self.snapshot_wait, hint)
        until = time.monotonic() + wait
        accept = False
        while True:
            opt: dict[str, Any] = {"from_session": from_id, "last_point": last_point}
            if accept:
                opt["accept_gap"] = True
            try:
                slot = self._send(m.SessionRestoreReqMessage, {}, opt,
                                  m.SessionRestoreRespMessage, None, None, may_move=False)
                r = self._finish(slot, max(0.1, deadline - time.monotonic()), may_move=False)
                resumed = r.from_point if r.from_point is not None else 0
                return r.snapshot_id, list(r.restored or []), resumed, r.gap
            except ProtocolError as e:
                if reason(e) == "store_unavailable" and time.monotonic() + 1 < deadline:
                    # The store is down and the host waited for it already:
                    # ask again until the move's deadline, never settle for less.
                    time.sleep(1)
                    continue
                if reason(e) == "point_gap":
                    # An older snapshot than the client saw: the draining
                    # host may not have written its own yet.
                    if time.monotonic() + SNAPSHOT_POLL > until:
                        if self.accept_gap:
                            accept = True
                            continue
                        raise PointGap(f"the lost session's newest snapshot does not hold everything acknowledged "
                                       f"({PointGap.reason}) after {wait:g}s: {e}", e.detail) from e
                    time.sleep(SNAPSHOT_POLL)
                    continue
                # not_found; hosts before it said unknown_snapshot, and a
                # fleet in a rolling upgrade may still hold one.
                if reason(e) not in ("not_found", "unknown_snapshot"):
                    raise
                if time.monotonic() + SNAPSHOT_POLL > until:
                    if self.fresh:
                        return None, [], 0, None
                    raise NoSnapshot(f"the lost session left no snapshot ({NoSnapshot.reason}): the host answered "
                                     f"not_found for {wait:g}s ({e})") from e
                time.sleep(SNAPSHOT_POLL)


class SyncCall:
    """A request started with Client.start."""

    def __init__(self, client: Client, slot: _Slot, args: tuple) -> None:
        self._client = client
        self._slot = slot
        self._args = args

    @property
    def req_id(self) -> Optional[str]:
        return self._slot.rid

    def result(self, timeout: Optional[float] = None) -> Any:
        """The reply, waiting at most timeout seconds (then TimeoutError, and
        the request goes on); the request's call_timeout still applies."""
        c = self._client
        call_timeout = self._args[4]
        try:
            return c._finish(self._slot, call_timeout, may_move=True, wait=timeout)
        except Refused:
            # Refused unread by a session that is lost: it goes to the next.
            c._ready()
            model, required, optional, reply, call_timeout, on_event = self._args
            self._slot = c._send(model, required, optional, reply, call_timeout, on_event, may_move=False)
            return c._finish(self._slot, call_timeout, may_move=False, wait=timeout)

    def cancel(self) -> None:
        """Sends ``cancel`` for the request."""
        self._client.cancel(self._slot.rid)


class _Keeper:
    """One daemon thread for every synchronous client of the process that
    reads, every ``period`` seconds, what has arrived on a client no caller
    is reading: the host's pings are answered (it drops a connection whose
    pings go unanswered), events reach the callbacks, and a lost session is
    noticed, and moved from, between calls. It stops when no client is
    left."""

    period = 0.5

    def __init__(self) -> None:
        self._clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def add(self, c: Client) -> None:
        with self._lock:
            self._clients.add(c)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="aep-keepalive", daemon=True)
                self._thread.start()

    def remove(self, c: Client) -> None:
        with self._lock:
            self._clients.discard(c)

    def _run(self) -> None:
        while True:
            time.sleep(self.period)
            with self._lock:
                clients = list(self._clients)
                if not clients:
                    self._thread = None
                    return
            for c in clients:
                try:
                    c._idle_poll()
                except Exception:  # noqa: BLE001 - one client's trouble is not the others'
                    _log.debug("aep: keep-alive poll failed", exc_info=True)
            del clients


_keeper = _Keeper()

__all__ = ["Client", "SyncCall", "SyncTransport", "as_sync"]
