"""Exceptions of the aep SDK.

A protocol ``error`` reply (spec §2.3, §7) is raised as ProtocolError with
the host's code, retryable flag and detail; the transport's failures are
ConnectionClosed; a call that outlives its call_timeout is RequestTimeout
(after the SDK has sent ``cancel`` for it). A client made with
``move=True`` fails the requests in flight when its session is lost with
RequestInterrupted (sdk/python/README.md, Surviving a drain).
"""

from __future__ import annotations

from typing import Any, Optional


class AEPError(Exception):
    """Base of every exception the SDK raises itself."""


class ProtocolError(AEPError):
    """The host answered a request with ``error`` (spec §2.3).

    ``code`` is one of aep.ErrorCode; ``retryable`` is the host's word on
    whether the same request can succeed later (spec §7 table).
    """

    def __init__(self, code: str, message: str = "", *, retryable: bool = False, detail: Any = None,
                 capability_name: Optional[str] = None, req_id: Optional[str] = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.detail = detail
        self.capability_name = capability_name
        self.req_id = req_id

    @classmethod
    def from_message(cls, msg: Any) -> "ProtocolError":
        """Builds the exception from an ErrorMessage model."""
        return cls(msg.code, msg.message or "", retryable=bool(msg.retryable), detail=msg.detail,
                   capability_name=msg.capability_name, req_id=msg.req_id)


class HandshakeError(ProtocolError):
    """The handshake was refused (``handshake/resp`` with ok false): wrong
    token (``unauthorized``), another protocol version (``version_mismatch``)
    or a malformed request (``schema_violation``). No session exists."""

    def __init__(self, reply: Any) -> None:
        err = reply.error
        code = err.code if err is not None else "unauthorized"
        super().__init__(code, reply.reason or "", retryable=bool(err.retryable) if err is not None else False,
                         detail=getattr(err, "detail", None), req_id=reply.req_id)
        self.reply = reply


class ConnectionClosed(AEPError):
    """The transport ended (the host exited, the stream or socket closed)
    while a request was in flight, or a request was made after close."""


class SessionLost(ConnectionClosed):
    """The host no longer has the client's session: the WebSocket or the
    event stream ended, the host cannot be reached (connection refused), or
    it answered ``POST /send`` with 404 (no such session: its host is gone
    and the proxy sent the request elsewhere), 503 (draining or closing) or
    502 (a proxy could not reach it).

    ``delivered`` is False when the message being sent provably did not
    reach the session (404, 503, refused, a closed WebSocket), so sending it
    to a new session cannot run it twice; True when it may have (502).
    """

    def __init__(self, message: str, *, delivered: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered


class SessionTerminated(ConnectionClosed):
    """The operator terminated the session (the host's admin API): a
    request was answered ``runtime_error`` with ``detail.reason``
    ``terminated``, the WebSocket closed with code 4410, or the host answers
    the session's id 404 ``terminated``. The session and its processes are
    gone on purpose, so a client made with ``move=True`` does not move it:
    the client ends, and every later request fails with this error."""


class RequestInterrupted(ConnectionClosed):
    """A request was in flight when its session was lost, and the client
    (made with ``move=True``) moved to a new session. The request may or may
    not have run on the lost session; it is not sent again, since that could
    run it twice. ``session_id`` is the lost session's id; requests made
    after the move go to the new one."""

    def __init__(self, req_id: str, session_id: Optional[str], cause: BaseException) -> None:
        super().__init__(f"request {req_id} was in flight when session {session_id} was lost ({cause}); "
                         "it may or may not have run and is not resent")
        self.req_id = req_id
        self.session_id = session_id


class MoveFailed(ConnectionClosed):
    """A client made with ``move=True`` lost its session and could not move:
    no new session opened before the move's deadline, the handshake was
    refused, the restore failed, or the lost session left no snapshot and
    ``fresh`` was not set (its ``__cause__`` is then NoSnapshot). The
    client has ended; every request fails with it. Also raised for a
    request refused unread by several sessions in turn."""


class NoSnapshot(AEPError):
    """Why a move failed when the lost session left no snapshot to restore:
    the host answered ``unknown_snapshot`` for ``snapshot_wait`` seconds
    (its host died without draining, or drained without
    operator.snapshot_on_drain). The move's ``error`` and the cause of the
    client's MoveFailed; ``fresh=True`` carries on in the new, empty
    session instead. ``reason`` is ``no_snapshot``."""

    reason = "no_snapshot"


class PointGap(AEPError):
    """Why a move failed when the lost session's newest snapshot covers
    less than the client saw acknowledged (docs/DECISIONS.md, Points): the
    host answered ``point_gap`` for ``snapshot_wait`` seconds (the longer of
    the client's and the draining host's ``detail.snapshot_wait``).
    Restoring it would silently roll back acknowledged work, so the move
    fails instead, unless the client was made with ``accept_gap=True``.
    ``detail`` is the host's: ``snapshot_id``, ``point`` (the snapshot's),
    ``last_point`` (the client's) and ``lost`` (how many acknowledged
    state-changing requests it does not hold). ``reason`` is ``point_gap``."""

    reason = "point_gap"

    def __init__(self, message: str, detail: Optional[dict] = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


class RequestTimeout(AEPError, TimeoutError):
    """A request was not answered within its call_timeout; the SDK sent
    ``cancel`` for it, so the host stops working on it."""

    def __init__(self, req_id: str, timeout: float) -> None:
        super().__init__(f"request {req_id} not answered within {timeout}s (cancel sent)")
        self.req_id = req_id
        self.timeout = timeout
