"""Session fork through the SDK, GRPO-style (the Go twin is
capabilities/all/fork_test.go, TestForkGRPO): one session advances a guess
episode 5 steps, forks 8 ways, and each fork continues with its own action
sequence. The 8 trajectories share their first 5 steps exactly (same
observations, same random state: each fork finds the same secret, and a
reset without a seed draws the same next secret everywhere), diverge
after, and the parent is unchanged. Over HTTP+SSE and WebSocket: a stdio
host serves one session, so it cannot be attached to a fork."""

from __future__ import annotations

import asyncio
import json
import unittest

from tests.hosts import PerTransport, async_client, sync_client

import aep

OPTS = {"high": 1_000_000, "max_steps": 60}


def solve(c: aep.Client, ep: str, lo: int, hi: int, traj: list) -> int:
    """Bisects [lo, hi) to the end of the episode; returns the secret."""
    while True:
        g = (lo + hi) // 2
        s = c.env_step(episode_id=ep, action=g)
        traj.append((g, s.observation, s.reward))
        if s.terminated:
            return g
        assert not s.truncated, "truncated before the secret was found"
        if s.observation["hint"] < 0:
            hi = g
        else:
            lo = g + 1


class Fork:
    transport: str

    def test_grpo_fork_8_ways(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport, caps=["env", "tools", "memory"]) as parent:
            r = parent.env_reset(env_name="guess", seed=5, options=OPTS)
            ep = r.episode_id
            lo, hi = 0, OPTS["high"]
            prefix = []
            for _ in range(5):
                g = lo + (hi - lo) // 7  # a poor policy keeps the episode open
                s = parent.env_step(episode_id=ep, action=g)
                prefix.append((g, s.observation, s.reward))
                if s.observation["hint"] < 0:
                    hi = g
                else:
                    lo = g + 1
            at5 = parent.env_observe(episode_id=ep)
            self.assertEqual(at5.step, 5)
            parent.tool_call("write_file", arguments={"path": "plan.txt", "content": "parent"})

            forks = parent.fork(8)
            try:
                self.assertEqual(len(forks), 8)
                self.assertEqual(len(forks.reply.forks), 8)
                self.assertEqual(forks.reply.not_forked, [])
                ids = {f.session_id for f in forks}
                self.assertEqual(ids, {f.session_id for f in forks.reply.forks})
                self.assertNotIn(parent.session_id, ids)
                trajectories, secrets, nexts = [], [], []
                for i, c in enumerate(forks):
                    o = c.env_observe(episode_id=ep)
                    # The shared prefix: exactly where the parent stood.
                    self.assertEqual((o.step, o.observation, o.total_reward), (at5.step, at5.observation, at5.total_reward))
                    traj = list(prefix)
                    g = lo + (i + 1) * (hi - lo) // 10  # each fork's own first action
                    s = c.env_step(episode_id=ep, action=g)
                    self.assertEqual(s.step, 6)
                    traj.append((g, s.observation, s.reward))
                    if s.terminated:
                        secrets.append(g)
                    elif s.observation["hint"] < 0:
                        secrets.append(solve(c, ep, lo, g, traj))
                    else:
                        secrets.append(solve(c, ep, g + 1, hi, traj))
                    trajectories.append(traj)
                    nr = c.env_reset(env_name="guess", episode_id=ep)
                    nexts.append(solve(c, nr.episode_id, 0, nr.observation["high"], []))
                    # Each fork's files are its own copy.
                    c.tool_call("write_file", arguments={"path": "plan.txt", "content": f"fork {i}"})
                for t in trajectories:
                    self.assertEqual(t[:5], prefix)
                self.assertEqual(len({json.dumps(t[5:]) for t in trajectories}), 8, "the forks did not diverge")
                self.assertEqual(set(secrets), {secrets[0]}, "forks drew different secrets")
                self.assertEqual(set(nexts), {nexts[0]}, "forks' random state differs")
                for i, c in enumerate(forks):
                    self.assertEqual(c.tool_call("read_file", arguments={"path": "plan.txt"}).result.data["content"], f"fork {i}")
            finally:
                for c in forks:
                    c.close()
            # The parent is unchanged, and its random state is the forks'.
            o = parent.env_observe(episode_id=ep)
            self.assertEqual((o.step, o.observation), (5, at5.observation))
            self.assertEqual(parent.tool_call("read_file", arguments={"path": "plan.txt"}).result.data["content"], "parent")
            self.assertEqual(solve(parent, ep, lo, hi, []), secrets[0])
            nr = parent.env_reset(env_name="guess", episode_id=ep)
            self.assertEqual(solve(parent, nr.episode_id, 0, nr.observation["high"], []), nexts[0])

    def test_async_fork_memory(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]

        async def go() -> None:
            parent = await async_client(self.transport, caps=["memory"])
            async with parent:
                mem = (await parent.memory_init()).memory_id
                await parent.memory_store(memory_id=mem, entries=[{"key": "k", "content": "parent", "tier": "working"}])
                forks = await parent.fork(2)
                try:
                    a, b = forks
                    await a.memory_store(memory_id=mem, entries=[{"key": "k", "content": "a", "tier": "working"}])
                    got = {}
                    for name, c in (("a", a), ("b", b), ("parent", parent)):
                        r = await c.memory_retrieve(memory_id=mem, keys=["k"])
                        got[name] = r.entries[0].content
                    self.assertEqual(got, {"a": "a", "b": "parent", "parent": "parent"})
                finally:
                    for c in forks:
                        await c.aclose()

        asyncio.run(go())


for _name in ("http", "websocket"):
    _cls = "Fork" + _name.capitalize()
    globals()[_cls] = type(_cls, (PerTransport, Fork, unittest.TestCase), {"transport": _name, "__module__": __name__})


class TrajectoryExport(PerTransport, unittest.TestCase):
    """A recorded session exports its own trajectory, and the chat form."""

    transport = "http"

    def test_record_and_export(self) -> None:
        with sync_client(self.transport, caps=["env"], record_trajectory=True) as c:
            self.assertTrue(c.handshake_reply.record_trajectory)
            r = c.env_reset(env_name="guess", seed=1)
            c.env_step(episode_id=r.episode_id, action=50)
            page = c.session_trajectory_export()
            types = [line["type"] for line in page.lines]
            self.assertEqual(types[:2], ["handshake/req", "handshake/resp"])
            self.assertIn("env/step/resp", types)
            self.assertNotIn(c.session_id, json.dumps(page.lines))
            chat = c.session_trajectory_export(format="chat")
            names = [msg["name"] for msg in chat.lines[0]["messages"] if msg["role"] == "tool"]
            self.assertEqual(names, ["env_reset", "env_step"])
