"""A GRPO group through the Python SDK against a real `aep serve`: a
recorded session resets the guess environment, takes three steps, forks 8
ways; each fork bisects to the end of the episode, its last step rated
POSITIVE by the step's request id and its episode NEUTRAL with a score;
the parent exports the group (jsonl and chat) with
Client.export_trajectories. Then the same with a parent that does not
record (its forks ask to be recorded): the export says prefix missing.
Writes the exports to OUT_DIR and prints one JSON line of what the Go
test needs to export the same records itself.

usage: grpo.py HOST_URL TOKEN OUT_DIR
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "sdk", "python"))

import aep  # noqa: E402

ENV = {"kind": "env", "name": "guess"}
CAPS = ["env", "learn", "session"]


def play(url: str, token: str, out: str, name: str, record: bool) -> dict:
    with aep.Client.http(url, token=token, caps=CAPS, record_trajectory=record) as parent:
        assert bool(parent.handshake_reply.record_trajectory) == record, parent.handshake_reply
        ep = parent.env_reset(env_name="guess", seed=7).episode_id
        lo, hi = 0, 100
        for _ in range(3):
            g = lo + (hi - lo) // 5  # a poor policy keeps the episode open
            s = parent.env_step(episode_id=ep, action=g)
            assert not s.terminated
            if s.observation["hint"] < 0:
                hi = g
            else:
                lo = g + 1
        # The forks of a recorded parent record as it does; those of one
        # that does not ask for themselves here.
        forks = parent.fork(8, record_trajectory=True) if not record else parent.fork(8)
        group = forks.reply.group
        handles = []
        try:
            for i, c in enumerate(forks):
                assert c.handshake_reply.record_trajectory, c.handshake_reply
                handles.append(c.session_info().handle)
                flo, fhi, last = lo, hi, None
                for _ in range(64):
                    g = (flo + fhi) // 2 if i % 2 == 0 else flo + (fhi - flo) // 3
                    call = c.start("env_step", episode_id=ep, action=g)
                    s = call.result(30)
                    last = call.req_id
                    if s.terminated:
                        break
                    if s.observation["hint"] < 0:
                        fhi = g
                    else:
                        flo = g + 1
                assert s.terminated, "the fork never found the secret"
                c.learn_feedback([
                    {"type": "POSITIVE", "correlation_id": last, "component": ENV},
                    {"type": "NEUTRAL", "score": 0.5 if i % 2 == 0 else -0.5, "component": ENV},
                ])
        finally:
            # Closed forks have written their last record (shutdown):
            # every later export holds the same records.
            for c in forks:
                c.close()
        exports = {}
        for fmt in ("jsonl", "chat"):
            with open(os.path.join(out, f"{name}.sdk.{fmt}"), "w", encoding="utf-8") as f:
                exports[fmt] = parent.export_trajectories(f, group=group, format=fmt)
        return {"session_id": parent.session_id, "handle": parent.session_info().handle, "group": group,
                "forks": handles, "prefix": exports["jsonl"].prefix, "missing": exports["jsonl"].prefix_missing,
                "samples": len(exports["chat"].lines)}


def main() -> None:
    url, token, out = sys.argv[1:4]
    print(json.dumps({"recorded": play(url, token, out, "recorded", True),
                      "unrecorded": play(url, token, out, "unrecorded", False)}))


if __name__ == "__main__":
    main()
