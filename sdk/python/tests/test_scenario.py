"""The shared scenario (the Go twin is sdk/scenario/scenario_test.go), over
every transport against a real aep host: handshake, tool list and a call
with streaming events, memory store and recall, an env episode to
termination, a toolkit configure error, a cancelled call and protocol
errors; with the sync API and with the asyncio API."""

from __future__ import annotations

import asyncio
import time
import unittest

from tests import hosts
from tests.hosts import TOKEN, async_client, per_transport, sync_client

import aep
from aep import models as m

ECHO3 = {"argv": ["sh", "-c", "echo a; echo b; echo c"]}


def bisect_episode(c: aep.Client, seed: int) -> tuple[int, float, bool]:
    """Plays guess by bisection until the episode terminates."""
    r = c.env_reset(env_name="guess", seed=seed)
    lo, hi = 0, r.observation["high"]
    steps, total = 0, 0.0
    while True:
        guess = (lo + hi) // 2
        s = c.env_step(episode_id=r.episode_id, action=guess)
        steps += 1
        total += s.reward
        hint = s.observation["hint"]
        if hint < 0:
            hi = guess
        elif hint > 0:
            lo = guess + 1
        if s.terminated or s.truncated:
            c.env_close(episode_id=r.episode_id)
            return steps, total, s.terminated


class Scenario:
    transport: str

    def test_scenario_sync(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport) as c:
            # Handshake.
            hs = c.handshake_reply
            self.assertTrue(hs.ok)
            self.assertTrue(hs.session_id)
            self.assertEqual([(e.name, e.enabled) for e in hs.accepted_caps],
                             [(n, True) for n in hosts.ALL_CAPS])
            self.assertIsInstance(c.ping(), m.PongMessage)

            # Tool list, and a call with streaming events.
            names = {t.name for t in c.tool_list().tools}
            self.assertIn("run_command", names)
            seen: list[m.ToolEventMessage] = []
            session_wide: list[str] = []
            c.on_event = lambda ev: session_wide.append(ev.req_id)
            r = c.tool_call("run_command", arguments=ECHO3, streaming=True, on_event=seen.append)
            c.on_event = None
            self.assertTrue(r.result.success, r.result)
            self.assertEqual(r.result.data["stdout"], "a\nb\nc\n")
            self.assertEqual([e.seq for e in seen], list(range(len(seen))))
            self.assertEqual([e.data["message"] for e in seen], ["a", "b", "c"])
            self.assertTrue(all(e.req_id == r.req_id and e.type == "tool/event" for e in seen))
            self.assertEqual(session_wide, [r.req_id] * 3)
            self.assertEqual(len(r.result.events), 3)
            # Not streaming: the events are in the result only.
            seen.clear()
            r = c.tool_call("run_command", arguments=ECHO3, on_event=seen.append)
            self.assertEqual((len(seen), len(r.result.events)), (0, 3))

            # Memory store and recall.
            mem = c.memory_init(namespace="scenario").memory_id
            st = c.memory_store(memory_id=mem, entries=[
                m.MemoryEntry(key="whale", content="the blue whale is the largest animal", tier="episodic"),
                {"key": "ant", "content": "ants are small and many", "tier": "episodic"},
            ])
            self.assertEqual(st.type, "memory/store/resp")
            hits = c.memory_recall(memory_id=mem, query="whale").hits
            self.assertGreaterEqual(len(hits), 1)
            self.assertEqual(hits[0].entry.key, "whale")

            # An env episode to termination.
            steps, total, terminated = bisect_episode(c, seed=7)
            self.assertTrue(terminated)
            self.assertEqual(total, 1.0)
            self.assertLessEqual(steps, 7)

            # A toolkit configure error is a reply with status error.
            tk = c.toolkit_configure(toolkit_name="sql", config={"driver": "oracle", "database": "x",
                                                                 "mode": "read_only"})
            self.assertEqual(tk.status, "error")
            self.assertIn("driver", tk.message)

            # A cancelled call: cancel goes on the wire, the host answers
            # cancelled (not retryable).
            call = c.start("tool_call", "run_command", arguments={"argv": ["sleep", "30"]})
            time.sleep(0.3)
            t0 = time.monotonic()
            call.cancel()
            with self.assertRaises(aep.ProtocolError) as cm:
                call.result(20)
            self.assertEqual((cm.exception.code, cm.exception.retryable), ("cancelled", False))
            self.assertEqual(cm.exception.req_id, call.req_id)
            self.assertLess(time.monotonic() - t0, 20)

            # A timeout cancels on the wire too; the session goes on.
            with self.assertRaises(aep.RequestTimeout):
                c.tool_call("run_command", arguments={"argv": ["sleep", "30"]}, call_timeout=0.3)

            # Protocol errors: schema_violation naming the field, and
            # capability_missing for a capability not asked for.
            with self.assertRaises(aep.ProtocolError) as cm:
                c.tool_call("")
            e = cm.exception
            self.assertEqual((e.code, e.retryable, e.detail), ("schema_violation", False, {"field": "tool_name"}))
            with self.assertRaises(aep.ProtocolError) as cm:
                c.proc_list()
            self.assertEqual((cm.exception.code, cm.exception.retryable), ("capability_missing", False))
            self.assertEqual(c.ping().type, "pong")

    def test_scenario_async(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]

        async def run() -> None:
            async with await async_client(self.transport) as c:
                self.assertTrue(c.handshake_reply.ok)
                # Events as an async iterator, beside the reply.
                got: list[m.ToolEventMessage] = []

                async def collect() -> None:
                    async for ev in c.events():
                        got.append(ev)
                        if len(got) == 3:
                            return
                collector = asyncio.create_task(collect())
                await asyncio.sleep(0)
                r = await c.tool_call("run_command", arguments=ECHO3, streaming=True)
                await asyncio.wait_for(collector, 10)
                self.assertEqual([(e.req_id, e.seq) for e in got], [(r.req_id, 0), (r.req_id, 1), (r.req_id, 2)])

                # Pipelined requests each get their own reply.
                pongs = await asyncio.gather(*(c.ping() for _ in range(8)))
                self.assertEqual(len({p.req_id for p in pongs}), 8)

                # Cancelling the awaiting task sends cancel; the session goes on.
                task = asyncio.create_task(c.tool_call("run_command", arguments={"argv": ["sleep", "30"]}))
                await asyncio.sleep(0.3)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                # A Call's cancel ends it with the host's cancelled error.
                call = c.start("tool_call", "run_command", arguments={"argv": ["sleep", "30"]})
                await asyncio.sleep(0.3)
                await call.cancel()
                with self.assertRaises(aep.ProtocolError) as cm:
                    await asyncio.wait_for(call, 20)
                self.assertEqual(cm.exception.code, "cancelled")

                with self.assertRaises(aep.ProtocolError) as cm:
                    await c.env_step(episode_id="no-such-episode", action=1)
                self.assertEqual(cm.exception.code, "schema_violation")
                self.assertEqual((await c.ping()).type, "pong")

        asyncio.run(run())

    def test_handshake_refused(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with self.assertRaises(aep.HandshakeError) as cm:
            sync_client(self.transport, token="wrong-" + TOKEN)
        self.assertEqual((cm.exception.code, cm.exception.retryable), ("unauthorized", False))

    def test_shutdown_closes(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        c = sync_client(self.transport)
        with c:
            c.ping()
        with self.assertRaises(aep.ConnectionClosed):
            c.ping()
        if self.transport == "stdio":
            # shutdown ended the session, and with it `aep serve --stdio`.
            self.assertEqual(c.transport.proc.returncode, 0)

    def test_shutdown_ends_new_requests(self) -> None:
        """Once a client sent shutdown its session is ending: a new request
        fails at once with ConnectionClosed, and a client made with
        move=True does not move the session it ended itself."""
        self: unittest.TestCase  # type: ignore[no-redef]
        move = self.transport != "stdio"
        with sync_client(self.transport, move=move) as c:
            c.ping()
            c.shutdown()
            started = time.monotonic()
            with self.assertRaises(aep.ConnectionClosed):
                c.ping()
            self.assertLess(time.monotonic() - started, 1.0)
            self.assertEqual(c.moves, [])

        async def run() -> None:
            ac = await async_client(self.transport, move=move)
            try:
                await ac.ping()
                await ac.shutdown()
                with self.assertRaises(aep.ConnectionClosed):
                    await asyncio.wait_for(ac.ping(), 5)
                self.assertEqual(ac.moves, [])
            finally:
                await ac.aclose()

        asyncio.run(run())


per_transport(Scenario, globals())


class TestWebSocketAvailable(unittest.TestCase):
    def test_websocket_available(self) -> None:
        if not hosts.have_websockets():
            self.skipTest("websockets is not installed: the WebSocket transport is untested here")


if __name__ == "__main__":
    unittest.main()
