"""A stdio client's host: it takes the token given in code from its
environment (never its argv), and its logs are discarded unless the caller
says where they go."""

from __future__ import annotations

import os
import subprocess
import tempfile
import unittest
from unittest import mock

from tests.hosts import TOKEN, binary

import aep


def _proc_file(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


class TestStdioToken(unittest.TestCase):
    def setUp(self) -> None:
        self.data = tempfile.mkdtemp(prefix="aep-py-stdio-token-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.data])
        self.argv = [binary(), "serve", "--stdio", "--data-dir", self.data]

    def without_token(self) -> "mock._patch[dict[str, str]]":
        env = {k: v for k, v in os.environ.items() if k != "AEP_AUTH_TOKEN"}
        return mock.patch.dict(os.environ, env, clear=True)

    def check_host(self, c: aep.Client) -> int:
        self.assertTrue(c.handshake_reply is not None and c.handshake_reply.ok)
        pid = c.transport.proc.pid  # type: ignore[attr-defined]
        self.assertNotIn(TOKEN.encode(), _proc_file(pid, "cmdline"), "the token is on the host's command line")
        tokens = [kv for kv in _proc_file(pid, "environ").split(b"\0") if kv.startswith(b"AEP_AUTH_TOKEN=")]
        self.assertEqual(tokens, [b"AEP_AUTH_TOKEN=" + TOKEN.encode()])
        return pid

    def test_token_given_in_code_without_env(self) -> None:
        with self.without_token():
            with aep.Client.stdio(self.argv, token=TOKEN, caps=["tools"], cwd=self.data) as c:
                pid = self.check_host(c)
                # Discarded logs: the host's stderr is /dev/null.
                self.assertEqual(os.readlink(f"/proc/{pid}/fd/2"), os.devnull)
                self.assertTrue(c.tool_list().tools)

    def test_token_given_in_code_beats_our_env(self) -> None:
        with mock.patch.dict(os.environ, {"AEP_AUTH_TOKEN": "not-" + TOKEN}):
            with aep.Client.stdio(self.argv, token=TOKEN, caps=["tools"], cwd=self.data) as c:
                self.check_host(c)

    def test_token_from_env_by_default(self) -> None:
        with mock.patch.dict(os.environ, {"AEP_AUTH_TOKEN": TOKEN}):
            with aep.Client.stdio(self.argv, caps=["tools"], cwd=self.data) as c:
                self.check_host(c)

    def test_explicit_env_token_is_the_hosts(self) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "AEP_AUTH_TOKEN": "the-hosts-own"}
        with self.assertRaises(aep.HandshakeError):
            aep.Client.stdio(self.argv, token=TOKEN, env=env, cwd=self.data)

    def test_logs_go_where_the_caller_says(self) -> None:
        path = os.path.join(self.data, "host.log")
        with self.without_token(), open(path, "wb") as log:
            with aep.Client.stdio(self.argv, token=TOKEN, caps=["tools"], cwd=self.data, stderr=log) as c:
                c.ping()
        with open(path, encoding="utf-8") as f:
            self.assertIn("stdio session started", f.read())

    def test_exit_says_logs_were_discarded(self) -> None:
        with self.assertRaises(aep.ConnectionClosed) as cm:
            aep.Client.stdio([binary(), "serve", "--stdio", "--config", "/nonexistent/aep.yaml"], token=TOKEN)
        self.assertIn("pass stderr=", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
