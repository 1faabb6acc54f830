"""An OpenEnv client written from the OpenEnv wire protocol reference
(openenv-core 0.2.3, commit 685de41; §7 "What the stock client does"):
openenv-core cannot be installed here (PyPI is unreachable), so this module
sends exactly what that reference says its EnvClient and GenericEnvClient
send, and reads replies as they do. It sends no header of its own on the
WebSocket upgrade and none on HTTP.

Standard library plus the `websockets` package, as the stock client.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional

import websockets


@dataclass
class StepResult:
    observation: Dict[str, Any]
    reward: Optional[float]
    done: bool


def ws_url(base_url: str) -> str:
    """The stock client's URL rule: strip a trailing "/", http→ws,
    https→wss, no scheme → ws://, then append /ws."""
    url = base_url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws"


class EnvClient:
    """GenericEnvClient's behaviour: reset(**kw) sends
    {"type":"reset","data":kw}; step(action) sends {"type":"step","data":
    action} with a dict sent as is; state() sends {"type":"state"}; each
    call waits for exactly one reply; an "error" reply raises
    RuntimeError("Server error: <message> (code: <code>)"); leaving sends
    {"type":"close"} (best effort) and closes the socket."""

    def __init__(self, base_url: str, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 60.0, max_message_size_mb: float = 100.0) -> None:
        self.url = ws_url(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_size = int(max_message_size_mb * 1024 * 1024)
        self._ws = None

    async def connect(self) -> None:
        try:
            self._ws = await websockets.connect(self.url, open_timeout=self.connect_timeout_s,
                                                max_size=self.max_size)
        except Exception as e:  # the stock client's ConnectionError
            raise ConnectionError(f"Failed to connect to {self.url}: {e}") from e

    async def _send_and_receive(self, message: Dict[str, Any]) -> Dict[str, Any]:
        if self._ws is None:
            await self.connect()
        await self._ws.send(json.dumps(message))
        raw = await asyncio.wait_for(self._ws.recv(), timeout=self.message_timeout_s)
        reply = json.loads(raw)
        if reply.get("type") == "error":
            data = reply.get("data", {})
            raise RuntimeError(f"Server error: {data.get('message', 'Unknown error')} (code: {data.get('code', 'UNKNOWN')})")
        return reply

    @staticmethod
    def _parse_result(payload: Dict[str, Any]) -> StepResult:
        return StepResult(observation=payload.get("observation", {}), reward=payload.get("reward"),
                          done=payload.get("done", False))

    async def reset(self, **kwargs: Any) -> StepResult:
        reply = await self._send_and_receive({"type": "reset", "data": kwargs})
        return self._parse_result(reply.get("data", {}))

    async def step(self, action: Dict[str, Any], **kwargs: Any) -> StepResult:
        reply = await self._send_and_receive({"type": "step", "data": action})
        return self._parse_result(reply.get("data", {}))

    async def state(self) -> Dict[str, Any]:
        reply = await self._send_and_receive({"type": "state"})
        return reply.get("data", {})

    async def close(self) -> None:
        if self._ws is not None:
            try:
                await self._ws.send(json.dumps({"type": "close"}))
            except Exception:
                pass
            await self._ws.close()
            self._ws = None

    def sync(self) -> "SyncEnvClient":
        return SyncEnvClient(self)


class SyncEnvClient:
    """.sync(): the async client run on a private event loop thread."""

    def __init__(self, client: EnvClient) -> None:
        self._client = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> "SyncEnvClient":
        self._run(self._client.connect())
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def reset(self, **kwargs: Any) -> StepResult:
        return self._run(self._client.reset(**kwargs))

    def step(self, action: Dict[str, Any]) -> StepResult:
        return self._run(self._client.step(action))

    def state(self) -> Dict[str, Any]:
        return self._run(self._client.state())

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
