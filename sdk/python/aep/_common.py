"""What aep.AsyncClient and aep.Client share: the record of a move, the
list of forks, and the rules of moving (sdk/python/README.md, Surviving a
drain)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, TypeVar

from . import _models as m

# A request refused unread (e.g. 404 or 503 to POST /send, or a
# ``shutting_down`` reply) is sent again in the next session, this often.
MAX_RESENDS = 3
# Back-off between tries to open a new session while moving.
OPEN_BACKOFF = (0.05, 1.0)
# How often a move asks again for a snapshot the store does not have yet.
SNAPSHOT_POLL = 0.2


class Refused(Exception):
    """Internal: the request was refused unread by a session that is lost;
    it can go to the next session."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def reason(err: BaseException) -> Optional[str]:
    """The ``detail.reason`` of a protocol error, if it has one."""
    d = getattr(err, "detail", None)
    r = d.get("reason") if isinstance(d, dict) else None
    return r if isinstance(r, str) else None


@dataclass(frozen=True)
class Move:
    """A move of a client made with ``move=True`` from a lost session to a
    new one, passed to ``on_move`` and kept in ``moves``.

    ``snapshot_id`` and ``restored`` (the plugins whose state came back)
    name what the new session restored: the newest snapshot of
    ``from_session``. When that session left no snapshot (the host answered
    ``unknown_snapshot`` for ``snapshot_wait`` seconds) the move fails with
    ``error`` a NoSnapshot, unless the client was made with ``fresh=True``:
    then ``fresh`` is True, the new session carries on empty, and the state
    of the lost one is gone. ``cause`` is how the old session was lost;
    ``error`` is why the move failed (the client has then ended with
    MoveFailed), None when it succeeded. Session ids are bearer secrets: do
    not log them."""

    from_session: str
    session_id: Optional[str]
    snapshot_id: Optional[str]
    restored: tuple[str, ...]
    fresh: bool
    cause: BaseException
    error: Optional[BaseException]
    took: float


MoveCallback = Callable[[Move], Any]

T = TypeVar("T")


class Forks(List[T]):
    """The connected forks of a session, in the order of the host's reply;
    ``reply`` is that ``session/fork/resp``."""

    def __init__(self, reply: m.SessionForkRespMessage) -> None:
        super().__init__()
        self.reply = reply
