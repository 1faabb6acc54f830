"""The Python SDK's benchmark driver: sdk/python/bench_test.go runs it once
per case (internal/sdkbench) and reports what it prints.

One case is an operation (``ping``, or ``step``: env/step of the guess
environment) over a transport (``ws``: GET /ws; ``exchange``: POST /send
answered with the reply) from ``--sessions`` concurrent sessions of this
process, with one of the SDK's clients (``sync``: aep.Client; ``async``:
aep.AsyncClient, every session on one asyncio loop). The SDK talks to a
real ``aep serve``; beside it, the floor is what Python itself does with
the same transport against a bare Go echo server (internal/echofloor):

- WebSocket: the asyncio ``websockets`` client, one connection per session,
  each round trip a ``json.dumps`` of the request (with a ``req_id``, so
  the echo is shaped as a reply), a send, a receive, a ``json.loads`` and a
  check of the ``req_id``;
- single exchange: ``http.client`` on a keep-alive connection per session,
  the same JSON work.

Both sides run ``--n`` round trips in alternating blocks of ``--block`` per
session, after a warm-up of each; printed last is one JSON line with each
side's nanoseconds per round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import time
import urllib.parse
from typing import Any, Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aep  # noqa: E402

EPISODE = "ep-0123456789abcdef"  # the floor's stand-in for a real episode id
STEP_OPTIONS = {"high": 1_000_000, "max_steps": 1_000_000_000}  # an episode no benchmark finishes
ACTION = 7


def floor_request(op: str, rid: str) -> dict[str, Any]:
    """What the floor sends: the request the SDK sends for op, plus the
    req_id its reply carries."""
    if op == "ping":
        return {"type": "ping", "id": rid, "proto": "1.0", "ts": time.time(), "req_id": rid}
    return {"type": "env/step/req", "id": rid, "proto": "1.0", "ts": time.time(), "episode_id": EPISODE,
            "action": ACTION, "req_id": rid}


# --- floors


async def ws_floor(url: str, op: str, sessions: int) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    from websockets.client import connect  # the legacy asyncio client: websockets 10.4 has no other
    conns = [await connect(url, compression=None, max_size=None, ping_interval=None) for _ in range(sessions)]
    seq = [0]

    async def session(ws: Any, count: list[int]) -> None:
        while count[0] > 0:
            count[0] -= 1
            seq[0] += 1
            rid = f"f-{seq[0]}"
            await ws.send(json.dumps(floor_request(op, rid)))
            reply = json.loads(await ws.recv())
            if reply["req_id"] != rid:
                raise AssertionError(f"floor: reply {reply!r} to {rid}")

    async def block(n: int) -> None:
        count = [n]
        await asyncio.gather(*(session(ws, count) for ws in conns))

    async def close() -> None:
        for ws in conns:
            await ws.close()
    return block, close


class ExchangeFloor:
    """A single-exchange session of the floor: a keep-alive http.client
    connection, the headers aep's exchange takes."""

    def __init__(self, base: str, op: str) -> None:
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.netloc)
        self.op = op
        self.seq = 0
        self.headers = {"Content-Type": "text/plain", "Accept": "application/json", "X-Session-Id": "floor"}

    def trip(self) -> None:
        self.seq += 1
        rid = f"f-{self.seq}"
        self.conn.request("POST", "/send", body=json.dumps(floor_request(self.op, rid)).encode(), headers=self.headers)
        resp = self.conn.getresponse()
        reply = json.loads(resp.read())
        if resp.status != 200 or reply["req_id"] != rid:
            raise AssertionError(f"floor: {resp.status} {reply!r} to {rid}")


# --- the SDK


def sync_trip(c: aep.Client, op: str, episode: str) -> Callable[[], Any]:
    if op == "ping":
        return c.ping
    return lambda: c.env_step(episode_id=episode, action=ACTION)


def open_sync(transport: str, url: str, token: str) -> aep.Client:
    if transport == "ws":
        return aep.Client.websocket(url, token=token, caps=["env"])
    return aep.Client.exchange(url, token=token, caps=["env"])


async def open_async(transport: str, url: str, token: str) -> aep.AsyncClient:
    if transport == "ws":
        return await aep.AsyncClient.websocket(url, token=token, caps=["env"])
    return await aep.AsyncClient.exchange(url, token=token, caps=["env"])


def run_sync(a: argparse.Namespace) -> tuple[float, float]:
    loop = asyncio.new_event_loop()
    c = open_sync(a.transport, a.aep, a.token)
    episode = c.env_reset(env_name="guess", seed=1, options=STEP_OPTIONS).episode_id if a.op == "step" else ""
    trip = sync_trip(c, a.op, episode)

    def sdk_block(n: int) -> float:
        start = time.perf_counter_ns()
        for _ in range(n):
            trip()
        return time.perf_counter_ns() - start

    if a.transport == "ws":
        fblock, fclose = loop.run_until_complete(ws_floor(a.floor, a.op, 1))

        def floor_block(n: int) -> float:
            start = time.perf_counter_ns()
            loop.run_until_complete(fblock(n))
            return time.perf_counter_ns() - start
    else:
        f = ExchangeFloor(a.floor, a.op)
        fclose = None

        def floor_block(n: int) -> float:
            start = time.perf_counter_ns()
            for _ in range(n):
                f.trip()
            return time.perf_counter_ns() - start
    try:
        return interleave(a, floor_block, sdk_block)
    finally:
        c.close()
        if fclose is not None:
            loop.run_until_complete(fclose())
        loop.close()


async def run_async(a: argparse.Namespace) -> tuple[float, float]:
    clients = [await open_async(a.transport, a.aep, a.token) for _ in range(a.sessions)]
    trips = []
    for c in clients:
        if a.op == "ping":
            trips.append(c.ping)
        else:
            ep = (await c.env_reset(env_name="guess", seed=1, options=STEP_OPTIONS)).episode_id
            trips.append(lambda c=c, ep=ep: c.env_step(episode_id=ep, action=ACTION))

    async def session(trip: Callable[[], Awaitable[Any]], count: list[int]) -> None:
        while count[0] > 0:
            count[0] -= 1
            await trip()

    async def sdk_block(n: int) -> float:
        count = [n]
        start = time.perf_counter_ns()
        await asyncio.gather(*(session(t, count) for t in trips))
        return time.perf_counter_ns() - start

    if a.transport == "ws":
        fblock, fclose = await ws_floor(a.floor, a.op, a.sessions)

        async def floor_block(n: int) -> float:
            start = time.perf_counter_ns()
            await fblock(n)
            return time.perf_counter_ns() - start
    else:
        raise SystemExit("the exchange floor is synchronous (http.client): use --client sync")
    try:
        return await interleave_async(a, floor_block, sdk_block)
    finally:
        for c in clients:
            await c.aclose()
        await fclose()


def blocks(a: argparse.Namespace) -> list[int]:
    per = a.block * a.sessions
    out, left = [], a.n
    while left > 0:
        out.append(min(per, left))
        left -= out[-1]
    return out


def interleave(a: argparse.Namespace, floor: Callable[[int], float], sdk: Callable[[int], float]) -> tuple[float, float]:
    warm = min(a.n, 500) * a.sessions
    floor(warm)
    sdk(warm)
    tf = ts = 0.0
    for n in blocks(a):
        tf += floor(n)
        ts += sdk(n)
    return tf / a.n, ts / a.n


async def interleave_async(a: argparse.Namespace, floor: Callable[[int], Awaitable[float]],
                           sdk: Callable[[int], Awaitable[float]]) -> tuple[float, float]:
    warm = min(a.n, 500) * a.sessions
    await floor(warm)
    await sdk(warm)
    tf = ts = 0.0
    for n in blocks(a):
        tf += await floor(n)
        ts += await sdk(n)
    return tf / a.n, ts / a.n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=["ping", "step"], required=True)
    p.add_argument("--transport", choices=["ws", "exchange"], required=True)
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--client", choices=["sync", "async"], required=True)
    p.add_argument("--n", type=int, required=True, help="round trips a side")
    p.add_argument("--block", type=int, default=200, help="round trips per session per block")
    p.add_argument("--aep", required=True, help="the host's /ws URL or HTTP base")
    p.add_argument("--floor", required=True, help="the echo floor's URL")
    p.add_argument("--token", required=True)
    a = p.parse_args()
    if a.client == "sync":
        if a.sessions != 1:
            raise SystemExit("the synchronous client runs one session per thread: --sessions 1")
        floor_ns, sdk_ns = run_sync(a)
    else:
        floor_ns, sdk_ns = asyncio.run(run_async(a))
    print(json.dumps({"floor_ns_per_op": floor_ns, "sdk_ns_per_op": sdk_ns, "n": a.n}))


if __name__ == "__main__":
    main()
