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

A third side, the same bare client talking to aep itself (handshaken,
then the same requests), tells the SDK's own cost from the host's. The
sides run ``--n`` round trips each in alternating blocks of ``--block`` per
session (at least 200 a block), after a warm-up of each; printed last is
one JSON line with each side's nanoseconds per round trip.
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
from typing import Any, Awaitable, Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aep  # noqa: E402

EPISODE = "ep-0123456789abcdef"  # the floor's stand-in for a real episode id
STEP_OPTIONS = {"high": 1_000_000, "max_steps": 1_000_000_000}  # an episode no benchmark finishes
ACTION = 7


def bare_request(op: str, rid: str, episode: str, echo: bool) -> dict[str, Any]:
    """What the bare client sends: the request the SDK sends for op; to the
    echo floor (echo) with the req_id its reply carries."""
    if op == "ping":
        msg = {"type": "ping", "id": rid, "proto": "1.0", "ts": time.time()}
    else:
        msg = {"type": "env/step/req", "id": rid, "proto": "1.0", "ts": time.time(), "episode_id": episode,
               "action": ACTION}
    if echo:
        msg["req_id"] = rid
    return msg


def handshake_request(token: str) -> dict[str, Any]:
    return {"type": "handshake/req", "id": "h", "proto": "1.0", "ts": time.time(), "agent_id": "bench-bare",
            "agent_caps": ["env"], "auth_token": token}


def reset_request() -> dict[str, Any]:
    return {"type": "env/reset/req", "id": "r", "proto": "1.0", "ts": time.time(), "env_name": "guess", "seed": 1,
            "options": STEP_OPTIONS}


# --- the bare client: against the echo floor, and against aep


async def ws_bare(url: str, op: str, sessions: int, token: Optional[str]) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """Sessions of the bare asyncio websockets client: with token against
    aep (handshaken, an episode reset), else against the echo floor."""
    from websockets.client import connect  # the legacy asyncio client: websockets 10.4 has no other
    conns = []
    for _ in range(sessions):
        ws = await connect(url, compression=None, max_size=None, ping_interval=None)
        episode = EPISODE
        if token is not None:
            await ws.send(json.dumps(handshake_request(token)))
            if not json.loads(await ws.recv()).get("ok"):
                raise SystemExit("bare client: handshake refused")
            if op == "step":
                await ws.send(json.dumps(reset_request()))
                episode = json.loads(await ws.recv())["episode_id"]
        conns.append((ws, episode))
    seq = [0]
    echo = token is None

    async def session(ws: Any, episode: str, count: list[int]) -> None:
        while count[0] > 0:
            count[0] -= 1
            seq[0] += 1
            rid = f"f-{seq[0]}"
            await ws.send(json.dumps(bare_request(op, rid, episode, echo)))
            reply = json.loads(await ws.recv())
            if reply["req_id"] != rid:
                raise AssertionError(f"bare client: reply {reply!r} to {rid}")

    async def block(n: int) -> None:
        count = [n]
        await asyncio.gather(*(session(ws, ep, count) for ws, ep in conns))

    async def close() -> None:
        for ws, _ in conns:
            await ws.close()
    return block, close


class ExchangeBare:
    """A single-exchange session of the bare client: a keep-alive
    http.client connection with the headers aep's exchange takes; with
    token a session of aep's (created, handshaken, an episode reset), else
    the echo floor's."""

    def __init__(self, base: str, op: str, token: Optional[str]) -> None:
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.netloc)
        self.op = op
        self.seq = 0
        self.echo = token is None
        self.episode = EPISODE
        sid = "floor"
        if token is not None:
            self.conn.request("POST", "/session", body=b"")
            sid = json.loads(self.conn.getresponse().read())["session_id"]
        self.headers = {"Content-Type": "text/plain", "Accept": "application/json", "X-Session-Id": sid}
        if token is not None:
            if not self.post(handshake_request(token)).get("ok"):
                raise SystemExit("bare client: handshake refused")
            if op == "step":
                self.episode = self.post(reset_request())["episode_id"]

    def post(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.conn.request("POST", "/send", body=json.dumps(msg).encode(), headers=self.headers)
        resp = self.conn.getresponse()
        reply = json.loads(resp.read())
        if resp.status != 200:
            raise AssertionError(f"bare client: {resp.status} {reply!r}")
        return reply

    def trip(self) -> None:
        self.seq += 1
        rid = f"f-{self.seq}"
        if self.post(bare_request(self.op, rid, self.episode, self.echo))["req_id"] != rid:
            raise AssertionError(f"bare client: a reply to another request than {rid}")

    def close(self) -> None:
        self.conn.close()


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


def timed(f: Callable[[int], Any]) -> Callable[[int], float]:
    def run(n: int) -> float:
        start = time.perf_counter_ns()
        f(n)
        return time.perf_counter_ns() - start
    return run


def run_sync(a: argparse.Namespace) -> tuple[float, ...]:
    loop = asyncio.new_event_loop()
    c = open_sync(a.transport, a.aep, a.token)
    episode = c.env_reset(env_name="guess", seed=1, options=STEP_OPTIONS).episode_id if a.op == "step" else ""
    trip = sync_trip(c, a.op, episode)

    def sdk_block(n: int) -> None:
        for _ in range(n):
            trip()

    closers: list[Callable[[], Any]] = []
    sides: list[Callable[[int], float]] = []
    for token, url in ((None, a.floor), (a.token, a.aep)):  # the floor, then the bare client against aep
        if a.transport == "ws":
            block, close = loop.run_until_complete(ws_bare(url, a.op, 1, token))
            closers.append(lambda close=close: loop.run_until_complete(close()))
            sides.append(timed(lambda n, block=block: loop.run_until_complete(block(n))))
        else:
            bare = ExchangeBare(url, a.op, token)
            closers.append(bare.close)
            sides.append(timed(lambda n, bare=bare: [bare.trip() for _ in range(n)]))
    try:
        return interleave(a, sides + [timed(sdk_block)])
    finally:
        c.close()
        for close in closers:
            close()
        loop.close()


async def run_async(a: argparse.Namespace) -> tuple[float, ...]:
    if a.transport != "ws":
        raise SystemExit("the exchange's bare client is synchronous (http.client): use --client sync")
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

    async def sdk_block(n: int) -> None:
        count = [n]
        await asyncio.gather(*(session(t, count) for t in trips))

    floor, fclose = await ws_bare(a.floor, a.op, a.sessions, None)
    raw, rclose = await ws_bare(a.aep, a.op, a.sessions, a.token)

    def atimed(f: Callable[[int], Awaitable[None]]) -> Callable[[int], Awaitable[float]]:
        async def run(n: int) -> float:
            start = time.perf_counter_ns()
            await f(n)
            return time.perf_counter_ns() - start
        return run
    try:
        return await interleave_async(a, [atimed(floor), atimed(raw), atimed(sdk_block)])
    finally:
        for c in clients:
            await c.aclose()
        await fclose()
        await rclose()


def blocks(a: argparse.Namespace) -> list[int]:
    per = max(200, a.block * a.sessions)
    out, left = [], a.n
    while left > 0:
        out.append(min(per, left))
        left -= out[-1]
    return out


def interleave(a: argparse.Namespace, sides: list[Callable[[int], float]]) -> tuple[float, ...]:
    """Each side's nanoseconds per round trip, the sides run in turn, block
    by block, after a warm-up of each."""
    warm = min(a.n, 500)
    for side in sides:
        side(warm)
    total = [0.0] * len(sides)
    for n in blocks(a):
        for i, side in enumerate(sides):
            total[i] += side(n)
    return tuple(t / a.n for t in total)


async def interleave_async(a: argparse.Namespace, sides: list[Callable[[int], Awaitable[float]]]) -> tuple[float, ...]:
    warm = min(a.n, 500)
    for side in sides:
        await side(warm)
    total = [0.0] * len(sides)
    for n in blocks(a):
        for i, side in enumerate(sides):
            total[i] += await side(n)
    return tuple(t / a.n for t in total)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=["ping", "step"], required=True)
    p.add_argument("--transport", choices=["ws", "exchange"], required=True)
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--client", choices=["sync", "async"], required=True)
    p.add_argument("--n", type=int, required=True, help="round trips a side")
    p.add_argument("--block", type=int, default=20, help="round trips per session per block (at least 200 a block)")
    p.add_argument("--aep", required=True, help="the host's /ws URL or HTTP base")
    p.add_argument("--floor", required=True, help="the echo floor's URL")
    p.add_argument("--token", required=True)
    a = p.parse_args()
    if a.client == "sync":
        if a.sessions != 1:
            raise SystemExit("the synchronous client runs one session per thread: --sessions 1")
        floor_ns, raw_ns, sdk_ns = run_sync(a)
    else:
        floor_ns, raw_ns, sdk_ns = asyncio.run(run_async(a))
    print(json.dumps({"floor_ns_per_op": floor_ns, "raw_ns_per_op": raw_ns, "sdk_ns_per_op": sdk_ns, "n": a.n}))


if __name__ == "__main__":
    main()
