"""One synchronous client shared by threads, over every transport: each
thread's calls get their own replies while another thread reads for all
(aep/_sync.py), a long call in one thread does not hold up the others, and
a call that times out in one thread leaves the rest alone."""

from __future__ import annotations

import threading
import time
import unittest

from tests.hosts import per_transport, sync_client

import aep

THREADS = 8
CALLS = 50


class Threads:
    transport: str

    def test_shared_client(self) -> None:
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport, caps=["env", "tools"]) as c:
            errors: list[BaseException] = []
            seen: list[str] = []
            lock = threading.Lock()

            def work(seed: int) -> None:
                try:
                    ep = c.env_reset(env_name="guess", seed=seed, options={"high": 1000, "max_steps": 1000}).episode_id
                    for i in range(CALLS):
                        if i % 2:
                            p = c.ping()
                            with lock:
                                seen.append(p.req_id)
                        else:
                            r = c.env_step(episode_id=ep, action=i)
                            self.assertEqual(r.episode_id, ep)
                            self.assertEqual(r.step, i // 2 + 1)
                            if r.terminated:
                                ep = c.env_reset(env_name="guess", episode_id=ep).episode_id
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            # A long call in flight the whole time, in a thread of its own.
            slow = c.start("tool_call", "run_command", arguments={"argv": ["sleep", "1"]})
            threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(errors, [])
            self.assertEqual(len(seen), THREADS * CALLS // 2)
            self.assertEqual(len(set(seen)), len(seen))
            self.assertTrue(slow.result(30).result.success)
            self.assertLess(time.monotonic() - started, 30)

            # A timeout in one thread while another keeps calling.
            def pinger() -> None:
                try:
                    for _ in range(20):
                        c.ping()
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
            t = threading.Thread(target=pinger)
            t.start()
            with self.assertRaises(aep.RequestTimeout):
                c.tool_call("run_command", arguments={"argv": ["sleep", "5"]}, call_timeout=0.3)
            t.join(30)
            self.assertEqual(errors, [])
            self.assertEqual(c.ping().type, "pong")


    def test_a_callback_may_call(self) -> None:
        """A call made from on_event runs on the thread reading for the
        client: it reads on, nested, rather than wait for itself."""
        self: unittest.TestCase  # type: ignore[no-redef]
        with sync_client(self.transport, caps=["tools"]) as c:
            pongs: list[str] = []
            c.tool_call("run_command", arguments={"argv": ["sh", "-c", "echo a; echo b"]}, streaming=True,
                        on_event=lambda ev: pongs.append(c.ping(call_timeout=10).type), call_timeout=20)
            self.assertGreaterEqual(len(pongs), 2)
            self.assertEqual(set(pongs), {"pong"})


per_transport(Threads, globals())


if __name__ == "__main__":
    unittest.main()
