"""aep.envserver: spaces to JSON Schema, values to JSON, the protocol's
requests answered in process, and the pure-Python cart-pole of
tests/cartpole.py served to a real host (an external environment of the env
capability, run by the system Python in the sandbox) and stepped through aep
with this SDK over stdio, HTTP+SSE and WebSocket: the same seed gives the
same trajectory twice, and the very trajectory Python computes stepping the
environment directly. Steps per second through aep, beside the direct floor,
are printed and appended to $AEP_PERF_OUT for docs/PERFORMANCE.md; speed is
never asserted."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request
from typing import Any, Optional

from tests import cartpole
from tests.hosts import SDK, TOKEN, _free_port, binary, have_websockets

import aep
from aep import envserver, gym

SEED = 3


def system_python() -> Optional[str]:
    """A python3 among the sandbox's system paths, which the host runs."""
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(p):
            return p
    return None


CONFIG = """server:
  auth_token: {token}
plugins:
  - name: env
    type: env
    cls: aep.env.builtin
    config:
      envs: [guess]
      external:
        - name: cartpole
          command: python3
          args: [{server}, "{cartpole}:CartPole"]
          read_only: [{sdk}]
          env_allow: [LANG]
          env: {{PYTHONDONTWRITEBYTECODE: "1"}}
"""


class Host:
    """`aep serve` with the cart-pole configured, on a free loopback port."""

    def __init__(self) -> None:
        self.data = tempfile.mkdtemp(prefix="aep-py-envserver-")
        self.config = os.path.join(self.data, "aep.yaml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(token=TOKEN, server=os.path.join(SDK, "aep", "envserver.py"),
                                  cartpole=os.path.join(SDK, "tests", "cartpole.py"), sdk=SDK))
        self.log = open(os.path.join(self.data, "host.log"), "wb")
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": self.data}
        self.port = _free_port()
        self.proc = subprocess.Popen([binary(), "serve", "--config", self.config, "--listen", f"127.0.0.1:{self.port}",
                                      "--data-dir", os.path.join(self.data, "http")],
                                     env=self.env, stdout=self.log, stderr=self.log, cwd=self.data)
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("aep serve with the cart-pole did not become ready")

    def client(self, transport: str) -> aep.Client:
        if transport == "stdio":
            d = tempfile.mkdtemp(dir=self.data)
            return aep.Client.stdio([binary(), "serve", "--stdio", "--config", self.config, "--data-dir", d],
                                    env=self.env, cwd=d, stderr=subprocess.DEVNULL, token=TOKEN, caps=["env"])
        if transport == "http":
            return aep.Client.http(f"http://127.0.0.1:{self.port}", token=TOKEN, caps=["env"])
        return aep.Client.websocket(f"ws://127.0.0.1:{self.port}/ws", token=TOKEN, caps=["env"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


def through_aep(env: gym.AEPEnv, seed: int, steps: int = 60) -> list:
    """cartpole.trajectory, stepping through aep."""
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(cartpole.policy(obs))
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


def steps_per_second(step_fn: Any, reset_fn: Any, n: int) -> float:
    obs = reset_fn()
    start = time.perf_counter()
    for _ in range(n):
        obs, _, terminated, truncated, _ = step_fn(cartpole.policy(obs))
        if terminated or truncated:
            obs = reset_fn()
    return n / (time.perf_counter() - start)


def report(result: dict) -> None:
    print(f"\n{json.dumps(result)}")
    out = os.environ.get("AEP_PERF_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(result) + "\n")


class FakeSpace:
    """Spaces named like gymnasium's, with their attributes."""

    def __init__(self, name: str, **attrs: Any) -> None:
        self.__class__ = type(name, (FakeSpace,), {})
        self.__dict__.update(attrs)


class TestSpaces(unittest.TestCase):
    def test_space_to_schema(self) -> None:
        cases = [
            (envserver.Discrete(3, start=-1), {"type": "integer", "minimum": -1, "maximum": 1}),
            (envserver.Box(-1.0, 1.0, (2, 3)), {"type": "array", "minItems": 2, "maxItems": 2, "items": {
                "type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "number", "minimum": -1.0, "maximum": 1.0}}}),
            (envserver.Box(-math.inf, 5, ()), {"type": "number", "maximum": 5.0}),
            (FakeSpace("Box", low=[0, 0], high=[1, 2], shape=(2,), dtype="int64"),
             {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0.0}}),
            (FakeSpace("MultiDiscrete", nvec=[2, 3]), {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [
                {"type": "integer", "minimum": 0, "maximum": 1}, {"type": "integer", "minimum": 0, "maximum": 2}]}),
            (FakeSpace("MultiBinary", n=4), {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1}, "minItems": 4, "maxItems": 4}),
            (FakeSpace("Text", min_length=1, max_length=8), {"type": "string", "minLength": 1, "maxLength": 8}),
            (FakeSpace("Dict", spaces={"pos": envserver.Discrete(4)}), {"type": "object", "additionalProperties": False,
                "properties": {"pos": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["pos"]}),
            (FakeSpace("Tuple", spaces=[envserver.Discrete(2), FakeSpace("Text", min_length=None, max_length=None)]),
             {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 1}, {"type": "string"}]}),
            ({"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a"]}),
            (None, {}),
        ]
        for space, want in cases:
            with self.subTest(space=type(space).__name__):
                self.assertEqual(envserver.space_to_schema(space), want)

    def test_to_json(self) -> None:
        self.assertEqual(envserver.to_json({1: (1.5, float("nan")), "b": [True, None, float("inf")]}),
                         {"1": [1.5, None], "b": [True, None, None]})
        if envserver._np is not None:  # pragma: no cover - numpy is optional
            np = envserver._np
            self.assertEqual(envserver.to_json({"a": np.arange(3), "b": np.float32(0.5)}), {"a": [0, 1, 2], "b": 0.5})


class TestProtocol(unittest.TestCase):
    """The requests of schemas/envproto/envproto.json, answered in process."""

    def exchange(self, *reqs: dict) -> list:
        inp = io.StringIO("".join(json.dumps(r) + "\n" for r in reqs))
        out = io.StringIO()
        status = envserver.EnvServer(cartpole.CartPole()).serve(inp, out)
        self.assertEqual(status, 0)
        return [json.loads(line) for line in out.getvalue().splitlines()]

    def test_requests(self) -> None:
        spec, reset, step, bad, err, render, unknown, close = self.exchange(
            {"type": "envproto/spec/req", "id": "1"},
            {"type": "envproto/reset/req", "id": "2", "seed": SEED},
            {"type": "envproto/step/req", "id": "3", "action": 1},
            {"type": "envproto/step/req", "id": "4", "action": 2},
            {"type": "envproto/restore/req", "id": "5", "state": "not json"},
            {"type": "envproto/render/req", "id": "6"},
            {"type": "envproto/nonsense/req", "id": "7"},
            {"type": "envproto/close/req", "id": "8"},
            {"type": "envproto/step/req", "id": "9", "action": 1},  # after close: never read
        )
        self.assertEqual((spec["type"], spec["protocol"], spec["req_id"]), ("envproto/spec/resp", "1", "1"))
        self.assertEqual(spec["action_space"], {"type": "integer", "minimum": 0, "maximum": 1})
        self.assertEqual(spec["render_modes"], ["ansi"])
        direct = cartpole.CartPole()
        obs, info = direct.reset(seed=SEED)
        self.assertEqual((reset["observation"], reset["info"]), (obs, info))
        obs, *_ = direct.step(1)
        self.assertEqual((step["type"], step["observation"], step["reward"], step["req_id"]), ("envproto/step/resp", obs, 1.0, "3"))
        self.assertEqual((bad["type"], bad.get("bad_action")), ("envproto/error", True))
        self.assertEqual((err["type"], err.get("bad_action")), ("envproto/error", None))
        self.assertIn("step 1", render["text"])
        self.assertEqual(unknown["type"], "envproto/error")
        self.assertEqual(close, {"type": "envproto/close/resp", "req_id": "8"})

    def test_state_and_restore(self) -> None:
        spec, _, _, state = self.exchange(
            {"type": "envproto/spec/req", "id": "1"},
            {"type": "envproto/reset/req", "id": "2", "seed": SEED},
            {"type": "envproto/step/req", "id": "3", "action": 1},
            {"type": "envproto/state/req", "id": "4"},
        )
        self.assertIs(spec["snapshots"], True)
        self.assertEqual(state["type"], "envproto/state/resp")
        # A fresh server restores it and continues as the original does,
        # an unseeded reset (the random state) included.
        _, step, _, reset = self.exchange(
            {"type": "envproto/restore/req", "id": "1", "state": state["state"]},
            {"type": "envproto/step/req", "id": "2", "action": 0},
            {"type": "envproto/spec/req", "id": "3"},
            {"type": "envproto/reset/req", "id": "4"},
        )
        direct = cartpole.CartPole()
        direct.reset(seed=SEED)
        direct.step(1)
        self.assertEqual(step["observation"], direct.step(0)[0])
        self.assertEqual(reset["observation"], direct.reset()[0])

        class Plain:
            action_space = observation_space = None
        out = io.StringIO()
        envserver.EnvServer(Plain()).serve(io.StringIO(json.dumps({"type": "envproto/state/req", "id": "1"}) + "\n"), out)
        self.assertEqual(json.loads(out.getvalue())["type"], "envproto/error")

    def test_exception_is_an_error_reply(self) -> None:
        # A step before any reset: the environment raises; the server answers and goes on.
        step, spec = self.exchange({"type": "envproto/step/req", "id": "1", "action": 0}, {"type": "envproto/spec/req", "id": "2"})
        self.assertEqual(step["type"], "envproto/error")
        self.assertIn("TypeError", step["message"])
        self.assertEqual(spec["type"], "envproto/spec/resp")

    def test_print_goes_to_stderr(self) -> None:
        class Loud(cartpole.CartPole):
            def reset(self, seed=None, options=None):
                print("resetting")
                return super().reset(seed=seed)
        inp = io.StringIO(json.dumps({"type": "envproto/reset/req", "id": "1"}) + "\n")
        out = io.StringIO()
        envserver.EnvServer(Loud()).serve(inp, out)
        self.assertEqual(json.loads(out.getvalue())["type"], "envproto/reset/resp")

    def test_load(self) -> None:
        cls = envserver.load(os.path.join(SDK, "tests", "cartpole.py") + ":CartPole")
        self.assertEqual(cls.__name__, "CartPole")
        self.assertIs(envserver.load("tests.cartpole:policy"), cartpole.policy)
        with self.assertRaises(ValueError):
            envserver.load("no-colon")


class TestCartPoleThroughAEP(unittest.TestCase):
    host: Optional[Host] = None

    @classmethod
    def setUpClass(cls) -> None:
        if system_python() is None:
            raise unittest.SkipTest("no python3 among the sandbox's system paths for the host to run")
        cls.host = Host()

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.host is not None:
            cls.host.stop()

    def transports(self) -> list:
        return ["stdio", "http"] + (["websocket"] if have_websockets() else [])

    def test_same_seed_same_trajectory(self) -> None:
        want = cartpole.trajectory(cartpole.CartPole(), SEED)
        self.assertGreater(len(want), 10)
        for transport in self.transports():
            with self.subTest(transport=transport):
                with self.host.client(transport) as c:
                    env = gym.AEPEnv(c, "cartpole")
                    self.assertEqual(env.action_space.contains(1), True)
                    first, second = through_aep(env, SEED), through_aep(env, SEED)
                    self.assertEqual(first, second)
                    self.assertEqual(first, [(list(o), r, t, u) for o, r, t, u in want])
                    self.assertNotEqual(through_aep(env, SEED + 1)[1], first[1])
                    self.assertIn("cart at", env.render())
                    with self.assertRaises(aep.ProtocolError):
                        env.step(2)  # outside Discrete(2)
                    env.close()

    def test_steps_per_second(self) -> None:
        n = 2000
        direct = cartpole.CartPole()
        floor = steps_per_second(direct.step, lambda: direct.reset(seed=SEED)[0], n)
        report({"bench": "external python cart-pole", "transport": "direct in Python (floor)", "steps": n, "steps_per_second": round(floor)})
        for transport in self.transports():
            with self.host.client(transport) as c:
                env = gym.AEPEnv(c, "cartpole")
                rate = steps_per_second(env.step, lambda: env.reset(seed=SEED)[0], n)
                env.close()
            report({"bench": "external python cart-pole", "transport": f"aep python SDK, {transport}", "steps": n,
                    "steps_per_second": round(rate)})


if __name__ == "__main__":
    unittest.main()
