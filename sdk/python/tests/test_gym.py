"""aep.gym against a real host: the Gymnasium Env API over every transport,
and the vector env's three autoreset modes (env/step_batch). gymnasium and
numpy are not installed where these run, so spaces are SchemaSpace and
batches are lists; the gymnasium paths are listed as untested in the
README."""

from __future__ import annotations

import unittest

from tests.hosts import per_transport, sync_client

import aep
from aep import gym

# high 1: the secret is 0, so action 0 terminates at once and 5 never does;
# max_steps 3 truncates the latter on its third guess.
OPTS = {"high": 1, "max_steps": 3}


class Env:
    transport: str

    def test_env_api(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport, caps=["env"]) as c:
            env = gym.AEPEnv(c, "guess", options=OPTS)
            if gym._gym is None:
                self.assertIsInstance(env.action_space, gym.SchemaSpace)
                self.assertEqual(env.action_space.schema["type"], "integer")
            self.assertTrue(env.observation_space.contains({"hint": 1, "guesses": 0, "high": 1}))
            self.assertFalse(env.observation_space.contains({"hint": 2, "guesses": 0, "high": 1}))
            obs, info = env.reset(seed=1)
            self.assertEqual((obs["guesses"], info), (0, {}))
            first = env.episode_id
            obs, reward, terminated, truncated, info = env.step(5)
            self.assertEqual((obs["hint"], reward, terminated, truncated), (-1, 0.0, False, False))
            env.step(5)
            *_, terminated, truncated, _ = env.step(5)
            self.assertEqual((terminated, truncated), (False, True))
            # A finished episode must be reset; reset reuses the episode.
            with self.assertRaises(aep.ProtocolError):
                env.step(5)
            env.reset()
            self.assertEqual(env.episode_id, first)
            obs, reward, terminated, truncated, _ = env.step(0)
            self.assertEqual((obs["hint"], reward, terminated, truncated), (0, 1.0, True, False))
            self.assertIn("solved", env.render())
            env.close()
            with self.assertRaises(aep.ProtocolError):
                c.env_step(episode_id=first, action=0)


per_transport(Env, globals())


class TestVectorEnv(unittest.TestCase):
    def test_next_step(self) -> None:
        with sync_client("websocket" if _ws() else "http", caps=["env"]) as c:
            v = gym.AEPVectorEnv(c, "guess", 2, options=OPTS)
            obs, infos = v.reset(seed=3)
            self.assertEqual([o["guesses"] for o in obs], [0, 0])
            obs, rew, term, trunc, infos = v.step([0, 5])
            self.assertEqual((list(rew), list(term), list(trunc)), ([1.0, 0.0], [True, False], [False, False]))
            # The finished episode is reset by the next batch step; its
            # action is ignored and its reward is 0.
            obs, rew, term, trunc, infos = v.step([0, 5])
            self.assertEqual(list(rew), [0.0, 0.0])
            self.assertEqual(infos.get("_reset"), [True, False])
            self.assertEqual(obs[0]["guesses"], 0)
            obs, rew, term, trunc, infos = v.step([0, 5])
            self.assertEqual((list(term), list(trunc)), ([True, False], [False, True]))
            v.close()

    def test_same_step(self) -> None:
        with sync_client("http", caps=["env"]) as c:
            v = gym.AEPVectorEnv(c, "guess", 2, autoreset_mode="same_step", options=OPTS)
            v.reset(seed=3)
            obs, rew, term, trunc, infos = v.step([0, 5])
            self.assertEqual(list(term), [True, False])
            # Reset at once: the observation is the new episode's, the
            # final one is in final_obs.
            self.assertEqual(obs[0]["guesses"], 0)
            self.assertEqual(infos["_final_obs"], [True, False])
            self.assertEqual(infos["final_obs"][0], {"hint": 0, "guesses": 1, "high": 1})
            v.close()

    def test_disabled(self) -> None:
        with sync_client("stdio", caps=["env"]) as c:
            v = gym.AEPVectorEnv(c, "guess", 2, autoreset_mode="disabled", options=OPTS)
            v.reset(seed=3)
            _, _, term, _, _ = v.step([0, 5])
            self.assertEqual(list(term), [True, False])
            # Stepping a finished episode is refused, and the whole batch
            # with it.
            with self.assertRaises(aep.ProtocolError):
                v.step([0, 5])
            obs, _ = v.reset(options={"reset_mask": [True, False]})
            self.assertEqual(obs[1], None)
            obs, _, term, _, _ = v.step([0, 5])
            self.assertEqual(obs[1]["guesses"], 2)
            self.assertEqual(list(term), [True, False])
            v.close()

    def test_bad_mode(self) -> None:
        with self.assertRaises(ValueError):
            gym.AEPVectorEnv(None, "guess", 2, autoreset_mode="sometimes")  # type: ignore[arg-type]


def _ws() -> bool:
    from tests.hosts import have_websockets
    return have_websockets()


class TestSchemaSpace(unittest.TestCase):
    def test_contains(self) -> None:
        cases = [
            ({"type": "integer"}, 3, True),
            ({"type": "integer"}, 3.5, False),
            ({"type": "integer"}, True, False),
            ({"type": "number", "minimum": 0, "maximum": 1}, 0.5, True),
            ({"type": "number", "minimum": 0, "maximum": 1}, 2, False),
            ({"enum": [-1, 0, 1]}, 0, True),
            ({"enum": [-1, 0, 1]}, 2, False),
            ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"a": "x"}, True),
            ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {}, False),
            ({"type": "array", "items": {"type": "integer"}}, [1, 2], True),
            ({"type": "array", "items": {"type": "integer"}}, [1, "2"], False),
        ]
        for schema, x, want in cases:
            with self.subTest(schema=schema, x=x):
                self.assertEqual(gym.SchemaSpace(schema).contains(x), want)


if __name__ == "__main__":
    unittest.main()
