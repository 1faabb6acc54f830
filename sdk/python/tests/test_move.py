"""A client made with ``move=True`` survives its host's drain (docs/deploy.md,
How a client survives a drain), with real `aep serve` hosts sharing one
store: host A is drained (SIGTERM, operator.snapshot_on_drain) while the
client holds a working-memory entry and a request is in flight; the
forwarder, standing in for the proxy, then sends everything to host B. The
request in flight fails with RequestInterrupted; the client's next call
opens a new session on B, restores the old one from its id and finds the
entry there; a second drain moves it on again, from the newest id. A host
that drains without a snapshot ends the client with MoveFailed (NoSnapshot)
unless it asked for ``fresh``. Without ``move`` the client fails as before. Over HTTP+SSE and WebSocket, on a
SQLite file and (HTTP) on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import unittest
from typing import Any

from tests.fleet import FleetHost, Forwarder, Store
from tests.hosts import TOKEN, PerTransport, skip_unless_transport

import aep

CAPS = ["memory", "tools"]


class Fleet:
    """Hosts on one store behind one forwarder, torn down by the test."""

    def __init__(self, tc: unittest.TestCase, pg: bool = False) -> None:
        self.store = Store(pg)
        tc.addCleanup(self.store.close)
        self.hosts: list[FleetHost] = []
        self.fwd: Forwarder

        def close() -> None:
            for h in self.hosts:
                h.stop()
            if hasattr(self, "fwd"):
                self.fwd.close()
        tc.addCleanup(close)

    def host(self, host_id: str, **kw: Any) -> FleetHost:
        # One at a time: hosts that start at once would migrate a SQLite
        # store concurrently (PostgreSQL takes a lock, SQLite does not).
        h = FleetHost(host_id, self.store.dsn, **kw)
        self.hosts.append(h)
        if not hasattr(self, "fwd"):
            self.fwd = Forwarder(h.port)
        return h


def open_client(transport: str, fwd: Forwarder, **kw: Any) -> aep.Client:
    if transport == "http":
        return aep.Client.http(fwd.url, token=TOKEN, caps=CAPS, **kw)
    return aep.Client.websocket(fwd.ws_url, token=TOKEN, caps=CAPS, **kw)


def in_flight(c: aep.Client) -> aep.SyncCall:
    """A call that is still running when its host's drain times out."""
    call = c.start("tool_call", "run_command", arguments={"argv": ["sleep", "30"]})
    deadline = time.time() + 10
    while call.req_id is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the host has it and runs it
    return call


def working(c: aep.Client, mid: str, *keys: str) -> dict[str, Any]:
    r = c.memory_retrieve(memory_id=mid, keys=list(keys), tier="working")
    return {e.key: e.content for e in r.entries}


def store(c: aep.Client, mid: str, key: str, content: str) -> None:
    c.memory_store(memory_id=mid, entries=[aep.models.MemoryEntry(key=key, content=content, tier="working")])


class Move:
    transport: str
    pg = False

    def test_moves_on_drain_and_restores(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        fleet = Fleet(self, pg=self.pg)
        a = fleet.host("py-a")
        b = fleet.host("py-b")
        moves: list[aep.Move] = []
        c = open_client(self.transport, fleet.fwd, move=True, on_move=moves.append)
        self.addCleanup(c.close)
        first = c.session_id
        assert first is not None
        self.assertTrue(first.startswith("s-py-a-"), first)
        mid = c.memory_init(namespace="move").memory_id
        store(c, mid, "plan", "step 1")
        call = in_flight(c)

        a.drain()
        fleet.fwd.target = b.port  # the proxy sends a gone host's session to the pool

        with self.assertRaises(aep.RequestInterrupted) as cm:
            call.result(30)
        self.assertIsInstance(cm.exception, aep.ConnectionClosed)
        self.assertEqual(cm.exception.session_id, first)
        self.assertIn("may or may not have run", str(cm.exception))

        # The next call moves: a new session on B with A's working memory.
        self.assertEqual(working(c, mid, "plan"), {"plan": "step 1"})
        second = c.session_id
        assert second is not None
        self.assertTrue(second.startswith("s-py-b-"), second)
        self.assertEqual(len(moves), 1)
        self.assertEqual((moves[0].from_session, moves[0].session_id, moves[0].fresh, moves[0].error),
                         (first, second, False, None))
        self.assertTrue(moves[0].snapshot_id and moves[0].snapshot_id.startswith("sql-"), moves[0])
        self.assertIn("memory.builtin", moves[0].restored)
        # The drain's snapshot covers everything acknowledged: memory/init
        # and memory/store (the call in flight was cancelled, no point).
        self.assertEqual((moves[0].last_point, moves[0].point, moves[0].gap), (2, 2, None))
        self.assertEqual(c.point, 2)
        self.assertEqual(c.moves, moves)

        # A second drain moves on from the newest id: B's session, which
        # holds what was written on B as well.
        store(c, mid, "plan2", "step 2")
        c2 = fleet.host("py-c")
        b.drain()
        fleet.fwd.target = c2.port
        self.assertEqual(working(c, mid, "plan", "plan2"), {"plan": "step 1", "plan2": "step 2"})
        self.assertEqual(len(moves), 2)
        self.assertEqual(moves[1].from_session, second)
        self.assertFalse(moves[1].fresh)
        self.assertIsNone(moves[1].error)
        self.assertTrue(c.session_id and c.session_id.startswith("s-py-c-"), c.session_id)
        self.assertEqual(c.tool_call("run_command", arguments={"argv": ["echo", "ok"]}).result.success, True)

    def _killed_after_snapshot(self, **kw: Any) -> tuple[aep.Client, list[aep.Move], str]:
        """A client on host A takes a snapshot, then writes once more; A
        dies (SIGKILL) and the forwarder sends the client to host B."""
        self: unittest.TestCase  # type: ignore[no-redef]
        fleet = Fleet(self)
        a = fleet.host("py-a")
        b = fleet.host("py-b")
        moves: list[aep.Move] = []
        c = open_client(self.transport, fleet.fwd, move=True, on_move=moves.append, snapshot_wait=0.5, **kw)
        self.addCleanup(c.close)
        mid = c.memory_init().memory_id
        store(c, mid, "plan", "saved")
        self.assertEqual(c.point, 2)
        snap = c.session_snapshot(target="sql")
        self.assertEqual(snap.covers_point, 2)
        store(c, mid, "plan2", "acknowledged, in no snapshot")
        self.assertEqual(c.point, 3)
        a.kill()
        fleet.fwd.target = b.port
        # The next request finds the session gone (over a WebSocket that
        # dropped, perhaps as an interrupted request) and the client moves.
        try:
            c.ping()
        except (aep.RequestInterrupted, aep.MoveFailed):
            pass
        return c, moves, mid

    def test_never_a_silent_rollback(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c, moves, mid = self._killed_after_snapshot()  # type: ignore[attr-defined]
        # The newest snapshot covers point 2, the client saw 3: the move
        # ends the client rather than resume it without plan2.
        with self.assertRaises(aep.MoveFailed) as cm:
            c.ping()
        gap = cm.exception.__cause__
        self.assertIsInstance(gap, aep.PointGap)
        assert isinstance(gap, aep.PointGap)
        self.assertEqual((gap.detail.get("point"), gap.detail.get("last_point"), gap.detail.get("lost")), (2, 3, 1))
        self.assertEqual(len(moves), 1)
        self.assertIsInstance(moves[0].error, aep.PointGap)
        self.assertEqual(moves[0].last_point, 3)

    def test_accept_gap_says_what_was_lost(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c, moves, mid = self._killed_after_snapshot(accept_gap=True)  # type: ignore[attr-defined]
        self.assertEqual(working(c, mid, "plan", "plan2"), {"plan": "saved"})
        self.assertEqual(len(moves), 1)
        mv = moves[0]
        self.assertIsNone(mv.error)
        assert mv.gap is not None
        self.assertEqual((mv.gap.point, mv.gap.last_point, mv.gap.lost), (2, 3, 1))
        self.assertEqual((mv.last_point, mv.point, c.point), (3, 2, 2))

    def _drain_without_snapshot(self, **kw: Any) -> tuple[aep.Client, list[aep.Move], str, str]:
        """A client on host A, which drains without snapshotting, and holds
        a working-memory entry; the forwarder then sends it to host B.
        Returns the client, its moves, A's session id and the memory id."""
        self: unittest.TestCase  # type: ignore[no-redef]
        fleet = Fleet(self)
        a = fleet.host("py-a", snapshot_on_drain=False)
        b = fleet.host("py-b")
        moves: list[aep.Move] = []
        c = open_client(self.transport, fleet.fwd, move=True, on_move=moves.append, snapshot_wait=0.5, **kw)
        self.addCleanup(c.close)
        first = c.session_id
        assert first is not None
        mid = c.memory_init().memory_id
        store(c, mid, "plan", "lost")
        a.drain()
        fleet.fwd.target = b.port
        return c, moves, first, mid

    def test_no_snapshot_ends_the_client(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c, moves, first, mid = self._drain_without_snapshot()  # type: ignore[attr-defined]
        # The move opens a session on B, the restore finds nothing
        # (not_found) for snapshot_wait, and without fresh=True the
        # move fails: the client ends rather than go on without its state.
        with self.assertRaises(aep.MoveFailed) as cm:
            c.ping()
        self.assertIn("the lost session left no snapshot (no_snapshot)", str(cm.exception))
        self.assertIsInstance(cm.exception.__cause__, aep.NoSnapshot)
        self.assertEqual(len(moves), 1)
        mv = moves[0]
        self.assertEqual((mv.from_session, mv.session_id, mv.fresh, mv.snapshot_id, mv.restored),
                         (first, None, False, None, ()))
        self.assertIsInstance(mv.error, aep.NoSnapshot)
        assert isinstance(mv.error, aep.NoSnapshot)
        self.assertEqual(mv.error.reason, "no_snapshot")
        self.assertIn("not_found", str(mv.error))
        self.assertIsInstance(mv.error.__cause__, aep.ProtocolError)
        # Ended for good: every later request fails the same way, and
        # no further move is tried.
        with self.assertRaises(aep.MoveFailed):
            c.memory_retrieve(memory_id=mid, keys=["plan"], tier="working")
        self.assertEqual(c.session_id, first)
        self.assertEqual(c.moves, moves)

    def test_fresh_when_asked_and_no_snapshot(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c, moves, first, mid = self._drain_without_snapshot(fresh=True)  # type: ignore[attr-defined]
        # With fresh=True the new session stays, empty: the old memory is
        # not there.
        self.assertEqual(c.ping().type, "pong")
        self.assertEqual(len(moves), 1)
        self.assertEqual((moves[0].from_session, moves[0].fresh, moves[0].snapshot_id, moves[0].restored,
                          moves[0].error), (first, True, None, (), None))
        self.assertTrue(c.session_id and c.session_id.startswith("s-py-b-"))
        with self.assertRaises(aep.ProtocolError):
            c.memory_retrieve(memory_id=mid, keys=["plan"], tier="working")

    def test_a_move_that_finds_no_host_ends_the_client(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        fleet = Fleet(self)
        a = fleet.host("py-a")
        moves: list[aep.Move] = []
        c = open_client(self.transport, fleet.fwd, move=True, on_move=moves.append, timeout=2.0)
        self.addCleanup(c.close)
        first = c.session_id
        a.drain()  # and no other host: every new session is refused
        # The client moves by itself once it sees the session's end, and
        # gives up at the deadline (timeout).
        deadline = time.time() + 20
        while not moves and time.time() < deadline:
            time.sleep(0.05)
        with self.assertRaises(aep.MoveFailed):
            c.ping()
        self.assertEqual(len(moves), 1)
        self.assertEqual((moves[0].from_session, moves[0].session_id), (first, None))
        self.assertIsNotNone(moves[0].error)

    def test_without_move_the_loss_is_an_error(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        fleet = Fleet(self)
        a = fleet.host("py-a")
        b = fleet.host("py-b")
        c = open_client(self.transport, fleet.fwd)
        self.addCleanup(c.close)
        first = c.session_id
        call = in_flight(c)
        a.drain()
        fleet.fwd.target = b.port
        # The drain snapshots, so it seals the host and cancels what still
        # runs at its timeout (server/drain.go): the host's own `cancelled`,
        # which the client passes on as the reply.
        with self.assertRaises(aep.ProtocolError) as cm:
            call.result(30)
        self.assertEqual(cm.exception.code, "cancelled")
        with self.assertRaises(aep.ConnectionClosed) as closed:
            c.ping()
        self.assertNotIsInstance(closed.exception, aep.RequestInterrupted)
        self.assertEqual(c.session_id, first)
        self.assertEqual(c.moves, [])


def _classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for name in ("http", "websocket"):
        cls_name = "Move" + name.capitalize()
        out[cls_name] = type(cls_name, (PerTransport, Move, unittest.TestCase), {"transport": name, "__module__": __name__})
    return out


globals().update(_classes())


class MovePostgres(PerTransport, Move, unittest.TestCase):
    """The move over HTTP with the fleet on PostgreSQL, as in production."""

    transport = "http"
    pg = True

    # The other cases do not depend on the store.
    test_no_snapshot_ends_the_client = None  # type: ignore[assignment]
    test_fresh_when_asked_and_no_snapshot = None  # type: ignore[assignment]
    test_without_move_the_loss_is_an_error = None  # type: ignore[assignment]
    test_a_move_that_finds_no_host_ends_the_client = None  # type: ignore[assignment]


class IdleWebSocketHostGone(unittest.TestCase):
    """An agent idle while its host was killed sends its next request
    before the proxy has noticed: the forwarder keeps the client's
    connection open, swallows what the client sends next and then drops
    the connection; the session cannot be re-attached (the forwarder now
    goes to host B, which does not have it). With the idle check the ping
    is what is swallowed, so the request is known never to have reached a
    host: the client moves, restores the snapshot, and the request runs
    once, in the new session. With the check off the request is written
    into the dead connection, its fate unknown: RequestInterrupted, and it
    is not sent again. The synchronous client and the asyncio client."""

    def setUp(self) -> None:
        skip_unless_transport(self, "websocket")

    def _fleet(self) -> tuple[Fleet, FleetHost, FleetHost]:
        fleet = Fleet(self)
        return fleet, fleet.host("py-a"), fleet.host("py-b")

    @staticmethod
    def _kill_unnoticed(fleet: Fleet, a: FleetHost, b: FleetHost) -> None:
        time.sleep(0.5)  # idle past the check
        if fleet.fwd.kill_unnoticed() != 1:
            raise AssertionError("the client has not exactly one connection through the forwarder")
        a.kill()
        fleet.fwd.target = b.port

    def _check_moved(self, resent: bool, err: BaseException | None, moves: list[aep.Move], first: str,
                     got: dict[str, Any], point: int) -> None:
        self.assertEqual(len(moves), 1, moves)
        mv = moves[0]
        self.assertIsNone(mv.error)
        self.assertEqual(mv.from_session, first)
        self.assertTrue(mv.session_id and mv.session_id.startswith("s-py-b-"), mv)
        self.assertEqual((mv.last_point, mv.point), (2, 2))
        if resent:
            if err is not None:
                raise AssertionError(f"the request sent after the host died unseen failed: {err!r}, "
                                     "want it answered in the new session")
            # Run once, in the new session: the snapshot's entry and the
            # request's, and one state change past the restored point.
            self.assertEqual(got, {"k": "1", "after": "2"})
            self.assertEqual(point, 3)
            return
        self.assertIsInstance(err, aep.RequestInterrupted, "the request written into the dead connection")
        self.assertIn("may or may not have run", str(err))
        self.assertEqual(got, {"k": "1"})  # not sent again
        self.assertEqual(point, 2)

    def _sync(self, idle_check: float | None, resent: bool) -> None:
        fleet, a, b = self._fleet()
        moves: list[aep.Move] = []
        c = aep.Client.websocket(fleet.fwd.ws_url, token=TOKEN, caps=CAPS, move=True, on_move=moves.append,
                                 snapshot_wait=0.5, idle_check=idle_check)
        self.addCleanup(c.close)
        first = c.session_id
        assert first is not None
        mid = c.memory_init().memory_id
        store(c, mid, "k", "1")
        self.assertEqual(c.session_snapshot(target="sql").covers_point, 2)
        self._kill_unnoticed(fleet, a, b)
        err: BaseException | None = None
        try:
            store(c, mid, "after", "2")
        except aep.ConnectionClosed as e:
            err = e
        got = working(c, mid, "k", "after")
        self._check_moved(resent, err, moves, first, got, c.point)

    def _async(self, idle_check: float | None, resent: bool) -> None:
        fleet, a, b = self._fleet()
        moves: list[aep.Move] = []

        async def run() -> tuple[BaseException | None, str, dict[str, Any], int]:
            c = await aep.AsyncClient.websocket(fleet.fwd.ws_url, token=TOKEN, caps=CAPS, move=True,
                                                on_move=moves.append, snapshot_wait=0.5, idle_check=idle_check)
            try:
                first = c.session_id
                assert first is not None
                mid = (await c.memory_init()).memory_id
                await c.memory_store(memory_id=mid, entries=[aep.models.MemoryEntry(key="k", content="1", tier="working")])
                self.assertEqual((await c.session_snapshot(target="sql")).covers_point, 2)
                await asyncio.sleep(0.5)  # idle past the check, the loop running
                self._kill_unnoticed(fleet, a, b)
                err: BaseException | None = None
                try:
                    await c.memory_store(memory_id=mid, entries=[
                        aep.models.MemoryEntry(key="after", content="2", tier="working")])
                except aep.ConnectionClosed as e:
                    err = e
                r = await c.memory_retrieve(memory_id=mid, keys=["k", "after"], tier="working")
                return err, first, {e.key: e.content for e in r.entries}, c.point
            finally:
                await c.aclose()
        err, first, got, point = asyncio.run(run())
        self._check_moved(resent, err, moves, first, got, point)

    def test_sync_idle_check_sends_in_new_session(self) -> None:
        self._sync(0.2, resent=True)

    def test_sync_without_idle_check_interrupted(self) -> None:
        self._sync(None, resent=False)

    def test_async_idle_check_sends_in_new_session(self) -> None:
        self._async(0.2, resent=True)

    def test_async_without_idle_check_interrupted(self) -> None:
        self._async(None, resent=False)


class MoveNeedsANetworkTransport(unittest.TestCase):
    def test_stdio_refuses_move(self) -> None:
        t = aep.StdioTransport(["true"])
        self.assertFalse(t.movable)
        with self.assertRaises(ValueError):
            aep.Client.connect(t, token=TOKEN, move=True)

