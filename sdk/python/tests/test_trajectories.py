"""Trajectory exports through the SDK (docs/trajectories.md): the export
line format held to the same golden lines as Go's wire.WriteLine, and a
fork's export against a real host — its whole episode, the parent's
records first, the same bytes as `aep export trajectories` writes. The
GRPO group with feedback rewards, byte for byte against the Go client and
the CLI, is internal/aepbin/lineage_test.go (testdata/lineage/grpo.py)."""

from __future__ import annotations

import json
import os
import subprocess
import unittest

from tests.hosts import binary, http_host, sync_client

import aep

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "wire", "testdata")


class ExportLine(unittest.TestCase):
    def test_golden(self) -> None:
        with open(os.path.join(GOLDEN, "export_line.json"), encoding="utf-8") as f:
            values = json.load(f)
        with open(os.path.join(GOLDEN, "export_line.golden"), encoding="utf-8") as f:
            want = f.read()
        self.assertEqual("".join(aep.export_line(v) for v in values), want)

    def test_refuses_what_is_not_json(self) -> None:
        with self.assertRaises(ValueError):
            aep.export_line(float("nan"))
        with self.assertRaises(TypeError):
            aep.export_line({"a": object()})


class ForkEpisode(unittest.TestCase):
    def test_fork_exports_its_whole_episode(self) -> None:
        with sync_client("http", caps=["env"], record_trajectory=True) as parent:
            ep = parent.env_reset(env_name="guess", seed=3).episode_id
            parent.env_step(episode_id=ep, action=50)
            forks = parent.fork(2)
            try:
                self.assertRegex(forks.reply.group, r"^g-[0-9a-f]{32}$")
                c = forks[0]
                self.assertTrue(c.handshake_reply.record_trajectory)  # as its parent records
                c.env_step(episode_id=ep, action=25)
                mine = c.export_trajectories()
                handle = c.session_info().handle
            finally:
                for f in forks:
                    f.close()
            types = [(line["session"] == handle, line["type"]) for line in mine.lines]
            self.assertEqual(types[:2], [(False, "handshake/req"), (False, "handshake/resp")])
            self.assertIn((False, "env/reset/resp"), types)
            self.assertIn((True, "env/step/resp"), types)
            self.assertEqual(mine.prefix, "complete")
            self.assertTrue(all(line["episode"] == handle for line in mine.lines))
            own = [line for line in mine.lines if line["session"] == handle]
            self.assertTrue(all(line["group"] == forks.reply.group and line["parent"] == line["root"] for line in own))
            group = parent.export_trajectories(group=forks.reply.group, format="chat")
            self.assertEqual([s["group"] for s in group.lines], [forks.reply.group] * 2)
        cli = subprocess.run([binary(), "export", "trajectories", "--group", forks.reply.group, "--format", "chat",
                              "--data-dir", http_host().data], capture_output=True, check=True, text=True)
        self.assertEqual(cli.stdout, group.text)


if __name__ == "__main__":
    unittest.main()
