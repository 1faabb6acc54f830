"""env_step_arrays, the batched step with its reply as arrays, against a
real host over every transport (synchronous and asyncio clients): the same
results as env_step_batch's models, in the request's order, finals in
same_step mode; and a reply whose envelope is not first (another host's
encoding) takes the usual way and still comes back as arrays."""

from __future__ import annotations

import asyncio
import json
import unittest

from tests.hosts import async_client, per_transport, sync_client

import aep
from aep import _codec, _sync, models as m

N = 8


def same(tc: unittest.TestCase, b: aep.BatchArrays, r: m.EnvStepBatchRespMessage) -> None:
    """The same results but for the episode ids (r is another session's)."""
    tc.assertEqual(b.observations, [s.observation for s in r.results])
    tc.assertEqual(list(b.rewards), [s.reward for s in r.results])
    tc.assertEqual(list(b.terminated), [s.terminated for s in r.results])
    tc.assertEqual(list(b.truncated), [s.truncated for s in r.results])
    tc.assertEqual(b.steps, [s.step for s in r.results])
    tc.assertEqual(b.infos, [s.info for s in r.results])


class Batch:
    transport: str

    def test_sync(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport, caps=["env"]) as c, sync_client(self.transport, caps=["env"]) as twin:
            eps = [c.env_reset(env_name="guess", seed=i).episode_id for i in range(N)]
            teps = [twin.env_reset(env_name="guess", seed=i).episode_id for i in range(N)]
            for guess in (50, 25, 12, 6):
                b = c.env_step_arrays(eps, [guess] * N, autoreset_mode="same_step")
                r = twin.env_step_batch(episode_ids=teps, actions=[guess] * N, autoreset_mode="same_step")
                self.assertEqual(len(b.rewards), N)
                same(self, b, r)
                self.assertEqual(b.episode_ids, eps)
                for i, s in enumerate(r.results):
                    self.assertEqual(b.final_observations[i], s.final_observation)
                    self.assertEqual(b.reset[i], bool(s.reset))
            with self.assertRaises(aep.ProtocolError) as cm:
                c.env_step_arrays(["no-such-episode"], [1])
            # An unknown episode is an error of state (docs/DECISIONS.md).
            self.assertTrue(cm.exception.not_found, (cm.exception.code, cm.exception.detail))
            self.assertEqual(c.ping().type, "pong")

    def test_async(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]

        async def run() -> None:
            async with await async_client(self.transport, caps=["env"]) as c:
                eps = [(await c.env_reset(env_name="guess", seed=i)).episode_id for i in range(N)]
                other = (await c.env_reset(env_name="guess", seed=99)).episode_id
                # Side by side with a request that wants models.
                b, r = await asyncio.gather(c.env_step_arrays(eps, [50] * N), c.env_step_batch(
                    episode_ids=[other], actions=[25]))
                self.assertEqual(b.episode_ids, eps)
                self.assertEqual(len(r.results), 1)
                self.assertEqual(b.steps, [1] * N)
        asyncio.run(run())


per_transport(Batch, globals())


class Fallback(unittest.TestCase):
    def test_a_reply_with_its_envelope_last(self) -> None:
        c = _sync.Client(transport=None)  # type: ignore[arg-type]
        slot = _sync._Slot("r-1", _codec.Raw(m.EnvStepBatchRespMessage), None, 0)
        c._pending["r-1"] = slot
        c._raw = 1
        result = {"episode_id": "e", "observation": {"hint": 0}, "reward": 1.0, "terminated": True,
                  "truncated": False, "info": {}, "step": 3}
        line = json.dumps({"results": [result], "type": "env/step_batch/resp", "id": "h", "proto": "1.0",
                           "ts": 1.5, "req_id": "r-1"})
        self.assertEqual(_codec.peek(line), (None, None))
        c._dispatch(line)
        self.assertTrue(slot.done)
        b = aep.BatchArrays.from_reply(slot.value)
        self.assertEqual((b.episode_ids, list(b.rewards), list(b.terminated)), (["e"], [1.0], [True]))

    def test_peek_is_checked(self) -> None:
        c = _sync.Client(transport=None)  # type: ignore[arg-type]
        slot = _sync._Slot("r-2", _codec.Raw(m.EnvStepBatchRespMessage), None, 0)
        c._pending["r-2"] = slot
        c._raw = 1
        # An event of the request, peeked to the same req_id: not its reply.
        ev = json.dumps({"type": "env/event", "id": "h", "proto": "1.0", "ts": 1.5, "req_id": "r-2", "kind": "log",
                         "data": {"message": "x"}, "seq": 0})
        c._dispatch(ev)
        self.assertFalse(slot.done)
        err = json.dumps({"type": "error", "id": "h", "proto": "1.0", "ts": 1.5, "req_id": "r-2", "code": "timeout",
                          "message": "m", "retryable": True})
        c._dispatch(err)
        self.assertTrue(slot.done)
        self.assertIsInstance(slot.error, aep.ProtocolError)


if __name__ == "__main__":
    unittest.main()
