"""A training loop of 10,000 steps of the guess environment over WebSocket,
over HTTP+SSE and over the single exchange, with a random policy: each
guess is drawn at random from the interval the episode's hints leave open.
It checks that the loop completes and solves episodes and reports steps/s
for docs/PERFORMANCE.md (printed, and appended to $AEP_PERF_OUT when set);
speed is never asserted."""

from __future__ import annotations

import json
import os
import random
import time
import unittest

from tests.hosts import have_websockets, sync_client

from aep import gym

STEPS = 10_000


def train(transport: str) -> dict:
    rng = random.Random(1)
    with sync_client(transport, caps=["env"]) as c:
        env = gym.AEPEnv(c, "guess")
        obs, _ = env.reset(seed=0)
        lo, hi = 0, obs["high"]
        episodes, solved, returns, ret = 0, 0, [], 0.0
        start = time.perf_counter()
        for _ in range(STEPS):
            guess = rng.randrange(lo, hi) if hi > lo else lo
            obs, reward, terminated, truncated, _ = env.step(guess)
            ret += reward
            if obs["hint"] < 0:
                hi = guess
            elif obs["hint"] > 0:
                lo = guess + 1
            if terminated or truncated:
                episodes += 1
                solved += int(terminated)
                returns.append(ret)
                ret = 0.0
                obs, _ = env.reset()
                lo, hi = 0, obs["high"]
        elapsed = time.perf_counter() - start
        env.close()
    return {"transport": transport, "steps": STEPS, "seconds": round(elapsed, 3),
            "steps_per_second": round(STEPS / elapsed), "episodes": episodes, "solved": solved,
            "mean_return": round(sum(returns) / max(1, len(returns)), 3)}


def report(result: dict) -> None:
    print(f"\n{json.dumps(result)}")
    out = os.environ.get("AEP_PERF_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(result) + "\n")


class TestTrainingLoop(unittest.TestCase):
    def check(self, transport: str) -> None:
        r = train(transport)
        report(r)
        self.assertEqual(r["steps"], STEPS)
        self.assertGreater(r["episodes"], 0)
        # Random guesses inside the open interval solve most 100-number
        # games within the 20 guesses allowed.
        self.assertGreater(r["solved"], r["episodes"] // 2)

    def test_websocket(self) -> None:
        if not have_websockets():
            self.skipTest("websockets is not installed")
        self.check("websocket")

    def test_http_sse(self) -> None:
        self.check("http")

    def test_exchange(self) -> None:
        self.check("exchange")


if __name__ == "__main__":
    unittest.main()
