"""Steps aep environments through the OpenEnv face of a real `aep serve`
with the client of openenv_client.py (written from the OpenEnv reference;
no header is sent): the built-in guess environment to its end by
bisection, an external Python cart-pole (aep.envserver) for 60 steps twice
with the same seed, then a connection without the token, which must get
OpenEnv's error. The stateless HTTP routes are called with requests, the
token in the body. Prints one JSON line of what it saw; exits non-zero on
any failure.

usage: steps.py HOST_URL TOKEN
"""

import json
import sys

import requests

from openenv_client import EnvClient


def guess(root: str, token: str) -> dict:
    with EnvClient(f"{root}/openenv/guess").sync() as env:
        r = env.reset(seed=1, aep_token=token)
        assert r.reward is None and r.done is False, r
        assert r.observation["observation"] == {"hint": 1, "guesses": 0, "high": 100}, r
        lo, hi, steps, total = 0, 100, 0, 0.0
        while True:
            mid = (lo + hi) // 2
            r = env.step({"action": mid})
            steps += 1
            total += r.reward
            hint = r.observation["observation"]["hint"]
            if r.done:
                break
            if hint > 0:
                lo = mid + 1
            else:
                hi = mid
        assert hint == 0 and r.reward == 1.0 and r.observation["terminated"] is True, r
        state = env.state()
        assert state["step_count"] == steps and state["status"] == "terminated", state
        # The stock client raises on an error frame and the session goes on.
        try:
            env.step({"action": "not a number"})
            raise AssertionError("a bad action was accepted")
        except RuntimeError as e:
            assert "(code: EXECUTION_ERROR)" in str(e) or "(code: VALIDATION_ERROR)" in str(e), e
        r = env.reset(seed=1, aep_token=token)
        assert r.observation["observation"]["guesses"] == 0, r
        return {"steps": steps, "total_reward": total, "session": state["aep_session"]}


def cartpole(root: str, token: str) -> list:
    runs = []
    for _ in range(2):
        with EnvClient(f"{root}/openenv/cartpole").sync() as env:
            r = env.reset(seed=3, aep_token=token)
            obs = r.observation["observation"]
            assert isinstance(obs, list) and len(obs) == 4, r
            traj = [obs]
            for _ in range(60):
                r = env.step({"action": 1 if obs[2] + 0.5 * obs[3] > 0 else 0})
                obs = r.observation["observation"]
                assert r.reward == 1.0, r
                traj.append(obs)
                if r.done:
                    break
            runs.append(traj)
    assert runs[0] == runs[1], "the same seed gave two trajectories"
    return runs[0]


def no_token(root: str) -> str:
    with EnvClient(f"{root}/openenv/guess").sync() as env:
        try:
            env.reset(seed=1)
        except RuntimeError as e:
            return str(e)
    raise AssertionError("a reset without the token was answered")


def http_routes(root: str, token: str) -> dict:
    base = f"{root}/openenv/guess"
    assert requests.get(f"{base}/health", timeout=10).json() == {"status": "healthy"}
    schema = requests.get(f"{base}/schema", timeout=10).json()
    assert set(schema) == {"action", "observation", "state"}, schema
    r = requests.post(f"{base}/reset", json={"seed": 1, "aep_token": token}, timeout=10)
    assert r.status_code == 200 and r.json()["reward"] is None, r.text
    r = requests.post(f"{base}/step", json={"action": {"action": 50}, "aep_token": token}, timeout=10)
    assert r.status_code == 200 and isinstance(r.json()["reward"], float), r.text
    r = requests.post(f"{base}/step", json={"action": {"action": 50}}, timeout=10)
    assert r.status_code == 401, r.text
    return {"step": r.status_code}


def main() -> None:
    root, token = sys.argv[1], sys.argv[2]
    out = {"guess": guess(root, token), "cartpole_steps": len(cartpole(root, token)) - 1,
           "no_token": no_token(root), "http": http_routes(root, token)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
