"""What aep.AsyncClient and aep.Client share: the record of a move, the
list of forks, and the rules of moving (sdk/python/README.md, Surviving a
drain)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, TypeVar

from . import _models as m
from .errors import ProtocolError

try:  # optional: arrays are lists without it
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the machine
    _np = None

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
    ``not_found`` for ``snapshot_wait`` seconds) the move fails with
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
    #: The client's last seen point in the lost session, which the restore
    #: had to cover; ``point`` is the point the new session resumed from
    #: (the snapshot's). ``gap``, set only with ``accept_gap=True``, is what
    #: was lost: the host's PointGap (``point``, ``last_point``, ``lost``).
    last_point: int = 0
    point: int = 0
    gap: Optional[Any] = None


MoveCallback = Callable[[Move], Any]

T = TypeVar("T")


class Forks(List[T]):
    """The connected forks of a session, in the order of the host's reply;
    ``reply`` is that ``session/fork/resp``."""

    def __init__(self, reply: m.SessionForkRespMessage) -> None:
        super().__init__()
        self.reply = reply


@dataclass(frozen=True)
class BatchArrays:
    """An ``env/step_batch/resp`` as arrays, one entry per episode in the
    order of the request (Client.env_step_arrays). ``rewards``,
    ``terminated``, ``truncated`` and ``reset`` are numpy arrays (float64,
    bool) when numpy is installed, else lists; ``observations``, ``infos``,
    ``final_observations`` and ``final_infos`` are lists of the JSON values
    (the finals None where an episode did not finish in ``same_step``
    mode). ``reply`` is the reply's JSON object."""

    episode_ids: list[str]
    observations: list[Any]
    rewards: Any
    terminated: Any
    truncated: Any
    reset: Any
    infos: list[dict[str, Any]]
    steps: list[int]
    final_observations: list[Any]
    final_infos: list[Optional[dict[str, Any]]]
    reply: dict[str, Any]

    @classmethod
    def from_reply(cls, d: dict[str, Any]) -> "BatchArrays":
        try:
            res = d["results"]
            ids = [r["episode_id"] for r in res]
            obs = [r["observation"] for r in res]
            rewards = [float(r["reward"]) for r in res]
            term = [bool(r["terminated"]) for r in res]
            trunc = [bool(r["truncated"]) for r in res]
            infos = [r["info"] for r in res]
            steps = [r["step"] for r in res]
        except (KeyError, TypeError, ValueError) as e:
            raise ProtocolError("parse_error", f"env/step_batch/resp without {e} in a result",
                                req_id=d.get("req_id") if isinstance(d, dict) else None) from None
        reset = [bool(r.get("reset")) for r in res]
        fobs = [r.get("final_observation") for r in res]
        finfo = [r.get("final_info") for r in res]
        if _np is not None:
            return cls(ids, obs, _np.asarray(rewards, dtype=_np.float64), _np.asarray(term, dtype=bool),
                       _np.asarray(trunc, dtype=bool), _np.asarray(reset, dtype=bool), infos, steps, fobs, finfo, d)
        return cls(ids, obs, rewards, term, trunc, reset, infos, steps, fobs, finfo, d)


def wait_hint(cause: BaseException) -> float:
    """How long a draining host said its snapshot of the session may take
    (``shutting_down``'s ``detail.snapshot_wait``, seconds); 0 when it said
    nothing."""
    err = cause.cause if isinstance(cause, Refused) else cause
    d = getattr(err, "detail", None)
    if reason(err) != "shutting_down" or not isinstance(d, dict):
        return 0.0
    w = d.get("snapshot_wait")
    return float(w) if isinstance(w, (int, float)) and 0 < w <= 3600 else 0.0


def note_point(current: int, reply_type: str, point: Any) -> int:
    """The client's point after a reply of the current session carrying
    point (docs/DECISIONS.md, Points): the highest seen, or for a restore
    the point the session resumed from."""
    if not isinstance(point, int) or isinstance(point, bool):
        return current
    if reply_type == "session/restore/resp" or point > current:
        return point
    return current
