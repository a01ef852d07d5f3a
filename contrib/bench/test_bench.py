#!/usr/bin/env python3
"""Smoke test of the benchmark harness itself (no root, no mounts, seconds):
the ratio arithmetic, the table and chart, the process helpers, and the
plugin protocol client against a fake plugin on a unix socket.

  make bench-smoke     (or: python3 contrib/bench/test_bench.py)
"""

import http.server
import json
import os
import socketserver
import sys
import tempfile
import threading
import time
import unittest
import unittest.mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import report  # noqa: E402


def fake_result():
    return {
        "meta": {"date": "2026-01-01T00:00:00Z", "commit": "abc", "reps": 3, "quick": True, "w2": "10 x 1 KiB",
                 "cpus": 2, "kernel": "k", "reclaim": "DAMON pageout (kdamond 0)", "wall_s": 1},
        "configs": ["native", "consistent", "cached", "delegated", "rclone"],
        "skipped": {"rclone": "rclone is not installed"},
        "results": {
            "W1 cold": {"native": {"samples": [1.0, 2.0, 3.0]}, "consistent": {"samples": [20.0, 40.0, 60.0]},
                        "cached": {"samples": [4.0, 2.0, 6.0]}},
            "W1 hot": {"native": {"samples": [0.5, 0.5, 0.5]}, "delegated": {"samples": [0.6, 0.7, 0.65]}},
        },
        "resources": {"cached": {"W1 cold": [{"cpu_s": 1.0, "cpu_pct": 50.0, "rss_max_mib": 20.0, "rss_end_mib": 19.0}]}},
        "idle": {"cached": [{"cpu_s": 0.0, "cpu_pct": 0.0, "rss_max_mib": 10.0, "rss_end_mib": 10.0, "when": "after mount"}]},
        "writeback": {"delegated": {"W1 hot": {"exit_flush_s": [0.1, 0.2, 0.3]}}},
        "errors": {"delegated": {"W1 cold": "boom"}},
        "cycle_errors": [{"config": "cached", "workload": "W1", "rep": 2, "error": "Unmount hung"}],
        "notes": [],
    }


class ReportTest(unittest.TestCase):
    def test_ratios_are_to_native_median(self):
        s = report.summary(fake_result())
        self.assertEqual(s["W1 cold"]["native"]["ratio"], 1.0)
        self.assertEqual(s["W1 cold"]["consistent"]["ratio"], 20.0)  # 40 / 2
        self.assertEqual(s["W1 cold"]["consistent"]["ratio_min"], 10.0)
        self.assertEqual(s["W1 cold"]["consistent"]["ratio_max"], 30.0)
        self.assertEqual(s["W1 cold"]["cached"]["ratio"], 2.0)
        self.assertEqual(s["W1 hot"]["delegated"]["ratio"], 1.3)

    def test_markdown(self):
        md = report.markdown(fake_result())
        self.assertIn("| W1 cold | 2 s (1-3) | **20.0x** (10.0-30.0) | **2.00x** (1.00-3.00) | error | skipped |", md)
        self.assertIn("| W1 hot |", md)
        self.assertIn("rclone skipped: rclone is not installed", md)
        self.assertIn("delegated W1 cold: boom", md)
        self.assertIn("Unmount hung", md)
        self.assertIn("proactive page-cache reclaim: DAMON pageout (kdamond 0)", md)
        self.assertIn("Share: sshfs over loopback sshd.", md)  # results from before --share

    def test_docker_run_extra(self):
        res = fake_result()
        run = lambda p, s: {"first_process_s": p, "first_stat_s": s, "exit_s": s + 0.05}
        res["extra"] = {"docker_run": {"probe": "p4/f", "runs": 3, "configs": {
            "native": {"runs": [run(0.3, 0.3), run(0.4, 0.4), run(0.5, 0.5)]},
            "cached": {"volume_create_s": 0.017, "runs": [run(0.6, 0.7), run(0.5, 0.52), run(0.55, 0.6)]},
            "delegated": {"error": "docker run -v bench-run-delegated:/data: exit 125"}}}}
        md = report.markdown(res)
        self.assertIn("  - native: first run 0.300 s (stat 0.300 s), later runs 0.450 s (stat 0.450 s)", md)
        self.assertIn("  - cached: first run 0.600 s (stat 0.700 s), later runs 0.525 s (stat 0.560 s); "
                      "`docker volume create` before it 0.017 s", md)
        self.assertIn("  - delegated: error: docker run -v bench-run-delegated:/data: exit 125", md)
        res["extra"] = {"docker_run": {"error": "no 100k-file source"}}
        self.assertIn("- `docker run` to the first process: error: no 100k-file source", report.markdown(res))

    def test_markdown_names_the_share(self):
        res = fake_result()
        res["meta"]["share"] = bench.SHARE_TEXT["local"]
        self.assertIn("Share: none: a local ext4 folder, bind-mounted (--share local).", report.markdown(res))

    def test_peers_need_the_sshfs_share(self):
        with self.assertRaises(bench.BenchError):
            bench.LocalShare("/nonexistent/H", "/nonexistent/S").env()

    def test_proactive_reclaim(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(bench.proactive_reclaim(os.path.join(d, "absent")), "none")

            def scheme(k, state, action):
                sd = os.path.join(d, k, "contexts", "0", "schemes", "0")
                os.makedirs(sd)
                with open(os.path.join(d, k, "state"), "w") as f:
                    f.write(state + "\n")
                with open(os.path.join(sd, "action"), "w") as f:
                    f.write(action + "\n")
            scheme("0", "off", "pageout")
            scheme("1", "on", "stat")
            self.assertEqual(bench.proactive_reclaim(d), "none")
            scheme("2", "on", "pageout")
            self.assertEqual(bench.proactive_reclaim(d), "DAMON pageout (kdamond 2)")

    def test_write_all(self):
        with tempfile.TemporaryDirectory() as d:
            paths = report.write_all(fake_result(), d, "t")
            self.assertTrue(os.path.exists(os.path.join(d, "t.json")))
            self.assertTrue(os.path.exists(os.path.join(d, "t.md")))
            with open(os.path.join(d, "t.json")) as f:
                self.assertIn("summary", json.load(f))
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                return
            self.assertIn(os.path.join(d, "t.png"), paths)
            with open(os.path.join(d, "t.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


    def test_the_json_keeps_each_record_on_one_line(self):
        res = fake_result()
        res["idle"] = {"cached": [{"cpu_pct": 0.5, "when": "after mount"}, {"cpu_pct": 2.0, "when": "after workload"}]}
        text = report.dumps(res)
        self.assertEqual(json.loads(text), res)
        self.assertIn('\n   {"cpu_pct": 0.5, "when": "after mount"},\n', text)
        self.assertIn('"samples": [1.0, 2.0, 3.0]', text)
        # Laid out a member a line down to the records, sorted.
        self.assertIn('{\n "configs": ', text)

    def test_a_volumes_status_is_kept_per_run_only_where_it_may_change(self):
        st = {"conflicts": 0, "dirty": 2, "failed": 0, "key": "6f4b", "lag": "1s", "last_error": "",
              "mountpoint": "/work/_build/bench/p/003-cached-W1-r1/mnt/6f4b", "mounts": 1, "rescan": "1s",
              "source": "/work/_build/bench/S/go", "state": "cached", "writers": "through the plugin: sshfs",
              "xattrs": "refused"}
        per_run, per_volume = bench.split_status(st)
        self.assertEqual(per_run, {"conflicts": 0, "dirty": 2, "failed": 0, "lag": "1s", "last_error": ""})
        self.assertEqual(per_volume, {"rescan": "1s", "state": "cached", "writers": "through the plugin: sshfs",
                                      "xattrs": "refused"})


def fake_sweep():
    """Two runs of the same rows, the share's round trips +0 and +2 ms."""
    slow = fake_result()
    slow["meta"] = dict(slow["meta"], share_rtt_ms=2.0, share_op_ms={"median": 2.4, "min": 2.3})
    slow["results"] = {"W1 cold": {"native": {"samples": [1.0, 2.0, 3.0]}, "consistent": {"samples": [200.0, 100.0, 300.0]},
                                   "cached": {"samples": [5.0, 6.0, 7.0]}}}
    slow["errors"] = {}
    fast = fake_result()
    fast["meta"] = dict(fast["meta"], share_rtt_ms=0.0, share_op_ms={"median": 0.25, "min": 0.2})
    return {"sweep": "share_rtt_ms", "runs": [fast, slow], "wall_s": 9}


class SweepTest(unittest.TestCase):
    def test_the_table_gives_each_row_per_latency(self):
        md = report.sweep_markdown(fake_sweep())
        self.assertIn("| workload | configuration | +0 ms (one request 0.25 ms) | +2 ms (one request 2.40 ms) |", md)
        self.assertIn("| W1 cold | consistent | **20.0x** (10.0-30.0) | **100x** (50.0-150) |", md)
        self.assertIn("| W1 cold | cached | **2.00x** (1.00-3.00) | **3.00x** (2.50-3.50) |", md)
        # A row the slow run did not measure, and an error of the fast one.
        self.assertIn("| W1 hot | delegated | **1.30x** (1.20-1.40) | - |", md)
        self.assertIn("delegated (+0 ms): W1 cold: boom", md)

    def test_write_sweep(self):
        with tempfile.TemporaryDirectory() as d:
            paths = report.write_sweep(fake_sweep(), d, "s")
            with open(os.path.join(d, "s.json")) as f:
                self.assertEqual([r["summary"]["W1 cold"]["consistent"]["ratio"] for r in json.load(f)["runs"]], [20.0, 100.0])
            self.assertIn(os.path.join(d, "s.md"), paths)
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                return
            with open(os.path.join(d, "s.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_share_op_ms_times_requests_to_names_that_do_not_exist(self):
        with tempfile.TemporaryDirectory() as d:
            looked = []
            real = os.lstat

            def lstat(path):
                looked.append(path)
                return real(path)
            with unittest.mock.patch.object(bench.os, "lstat", lstat):
                op = bench.share_op_ms(d, n=20)
            self.assertGreater(op["median"], 0)
            self.assertLessEqual(op["min"], op["median"])
            # Each a new name in d (sshfs answers a name it has seen from
            # its cache, without a request), none there.
            self.assertEqual(len(set(looked)), 20)
            self.assertTrue(all(os.path.dirname(p) == d for p in looked))
            self.assertEqual(os.listdir(d), [])  # it made nothing

    def test_a_local_share_has_no_round_trips_to_lengthen(self):
        with self.assertRaises(bench.BenchError):
            bench.LocalShare("/nonexistent/H", "/nonexistent/S", rtt_ms=0.5)

    def test_bad_share_rtt_is_refused_with_what_is_valid(self):
        for bad in ("fast", "-1", ","):
            with self.assertRaises(bench.BenchError) as e:
                bench.main(["--share-rtt", bad])
            self.assertIn("e.g. 0,0.5,2", str(e.exception))


class ProcessTest(unittest.TestCase):
    def test_run_times_and_captures(self):
        dt, out = bench.run("sleep 0.2; echo hi", capture=True)
        self.assertGreaterEqual(dt, 0.2)
        self.assertEqual(out.strip(), "hi")

    def test_run_timeout_kills_the_group(self):
        with tempfile.TemporaryDirectory() as d:
            mark = os.path.join(d, "late")
            with self.assertRaises(bench.BenchError):
                bench.run("(sleep 1; touch %s) & sleep 5" % mark, timeout=0.3)
            time.sleep(1.3)
            self.assertFalse(os.path.exists(mark), "a child outlived the timeout")

    def test_run_failure_says_why(self):
        with self.assertRaises(bench.BenchError) as c:
            bench.run("echo nope >&2; exit 3")
        self.assertIn("exit 3", str(c.exception))
        self.assertIn("nope", str(c.exception))

    def test_sampler(self):
        with bench.Sampler(os.getpid()) as s:
            t = time.process_time()
            while time.process_time() - t < 0.2:
                pass
        self.assertGreater(s.result["cpu_s"], 0.1)
        self.assertGreater(s.result["rss_max_mib"], 1)


class FlakyWorkload(bench.Workload):
    """Times out, or fails outright, in the repetitions it is told to."""
    name = "WX"

    def __init__(self, b, timeouts=(), failures=()):
        super().__init__(b)
        self.timeouts, self.failures, self.runs = set(timeouts), set(failures), []

    def run(self, target, cfg, rep, variant):
        self.runs.append((rep, variant))
        if variant == "cold" and rep in self.timeouts:
            bench.run("sleep 5", timeout=0.05)
        if variant == "cold" and rep in self.failures:
            raise bench.BenchError("listed 3 packages, expected 4")
        return {"s": 0.01}


class CycleTest(unittest.TestCase):
    """Bench.cycle on the native configuration (no mounts, no root)."""

    def bench(self):
        b = bench.Bench.__new__(bench.Bench)
        b.H, b.quick = tempfile.gettempdir(), True
        b.results, b.errors, b.fatal = {}, {}, set()
        b.resources, b.writeback, b.idle, b.cycle_errors = {}, {}, {}, []
        return b

    def setUp(self):
        drop, bench.drop_caches = bench.drop_caches, lambda: None
        self.addCleanup(setattr, bench, "drop_caches", drop)

    def test_a_timeout_costs_only_its_repetition(self):
        b = self.bench()
        w = FlakyWorkload(b, timeouts={1})
        for rep in (1, 2, 3):
            b.cycle(w, "native", rep)
        self.assertEqual(len(b.results["WX cold"]["native"]["samples"]), 2, b.results)
        self.assertEqual(len(b.results["WX hot"]["native"]["samples"]), 2, b.results)
        self.assertIn("r1: timeout", b.errors["native"]["WX cold"])
        self.assertIn("r1: skipped: the cold run failed", b.errors["native"]["WX hot"])
        cell = report.cell({"errors": b.errors, "meta": {"reps": 3}}, report.summary({"results": b.results}),
                           "WX cold", "native")
        self.assertIn("(2/3 ok)", cell)

    def test_a_wrong_result_ends_the_row(self):
        b = self.bench()
        w = FlakyWorkload(b, failures={1})
        for rep in (1, 2, 3):
            b.cycle(w, "native", rep)
        self.assertEqual(w.runs, [(1, "cold")], "runs after a failure that is not a timeout")
        self.assertNotIn("WX cold", b.results)
        self.assertIn("expected 4", b.errors["native"]["WX cold"])


class ReadOnlyConfigTest(unittest.TestCase):
    def test_read_only_configurations_run_only_what_writes_nothing(self):
        b = bench.Bench.__new__(bench.Bench)
        b.configs, b.skipped, b.reps, b.notes, b.w3rm = ["native", "cached-ro"], {}, 1, set(), None
        b.a = type("A", (), {"peer_workloads": "W1"})()
        reads, writes = FlakyWorkload(b), FlakyWorkload(b)
        writes.name, writes.writes = "WW", True
        b.workloads = [reads, writes]
        ran = []
        b.cycle = lambda w, cfg, rep: ran.append((w.name, cfg))
        b.run_all()
        self.assertEqual(ran, [("WX", "native"), ("WX", "cached-ro"), ("WW", "native")])
        self.assertTrue(any("cached-ro: WW not run" in n for n in b.notes), b.notes)


class W5Test(unittest.TestCase):
    def test_the_dump_commits_each_batch(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "dump.sql")
            bench.write_w5_dump(p, 7, 3)
            with open(p) as f:
                sql = f.read()
        self.assertTrue(sql.startswith("CREATE TABLE items"))
        self.assertEqual(sql.count("COMMIT;"), 7)
        self.assertEqual(sql.count("BEGIN;"), 7)
        self.assertIn("(20,'item-20',", sql)
        self.assertNotIn("(21,", sql)

    def test_landed_when_the_host_has_every_file_at_its_size(self):
        with tempfile.TemporaryDirectory() as d:
            b = bench.Bench.__new__(bench.Bench)
            b.H = os.path.join(d, "H")
            w = bench.W5(b)
            w.expected = {}
            target = os.path.join(d, "target", "r1")
            host = os.path.join(b.H, "w5", "delegated", "r1")
            for top in (target, host):
                os.makedirs(os.path.join(top, "base"))
            with open(os.path.join(target, "base", "1"), "w") as f:
                f.write("12345")
            self.assertFalse(w.landed("delegated", 1, ""), "nothing expected yet")
            w.expected[("delegated", 1)] = bench.tree_sizes(target)
            self.assertFalse(w.landed("delegated", 1, ""))
            with open(os.path.join(host, "base", "1"), "w") as f:
                f.write("123")
            self.assertFalse(w.landed("delegated", 1, ""), "a file not at its size yet")
            with open(os.path.join(host, "base", "1"), "a") as f:
                f.write("45")
            self.assertTrue(w.landed("delegated", 1, ""))


FAKE_MUTAGEN = """#!/bin/sh
# Logs each call (its arguments and the two environment variables the
# harness sets), acts out the agent install, answers `sync list`.
echo "$* | $MUTAGEN_DATA_DIRECTORY | $MUTAGEN_SSH_PATH" >>"$(dirname "$0")/calls"
case "$1 $2" in
"sync create") mkdir -p "$FAKE_REMOTE_STATE" ;;
"sync list") cat "$(dirname "$0")/list.json" 2>/dev/null || echo "[]" ;;
esac
"""


class MutagenPeerTest(unittest.TestCase):
    """MutagenPeer against a fake mutagen that logs its calls."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        for attr in ("binary", "remote_state", "remote_state_ours"):
            self.addCleanup(setattr, bench.MutagenPeer, attr, getattr(bench.MutagenPeer, attr))
        bench.MutagenPeer.binary = os.path.join(self.bin, "mutagen")
        bench.MutagenPeer.remote_state = os.path.join(self.tmp, "root-home", ".mutagen")
        bench.MutagenPeer.remote_state_ours = None
        os.environ["FAKE_REMOTE_STATE"] = bench.MutagenPeer.remote_state
        self.addCleanup(os.environ.pop, "FAKE_REMOTE_STATE")

    def build(self):
        with open(bench.MutagenPeer.binary, "w") as f:
            f.write(FAKE_MUTAGEN)
        os.chmod(bench.MutagenPeer.binary, 0o755)
        open(os.path.join(self.bin, "mutagen-agents.tar.gz"), "w").close()

    def bench(self):
        b = bench.Bench.__new__(bench.Bench)
        b.work, b.H, b.timeout, b.notes = self.tmp, os.path.join(self.tmp, "H"), 30, set()
        cfg = os.path.join(self.tmp, "ssh_config")
        b.share = type("S", (), {"env": lambda self: {"SHARE_SSH_CONFIG": cfg}})()
        return b

    def calls(self):
        with open(os.path.join(self.bin, "calls")) as f:
            return [line.rstrip("\n").split(" | ") for line in f]

    def test_missing_until_built_with_its_agents(self):
        self.assertIn("contrib/bench/mutagen.sh", bench.MutagenPeer.missing())
        self.build()
        self.assertIsNone(bench.MutagenPeer.missing())
        os.remove(os.path.join(self.bin, "mutagen-agents.tar.gz"))
        self.assertIn("not built", bench.MutagenPeer.missing())

    def test_a_run_syncs_over_the_shares_ssh_with_state_of_its_own(self):
        self.build()
        b = self.bench()
        peer = bench.MutagenPeer(b, type("W", (), {"name": "W2"})(), "w2/mutagen", 1)
        target, info = peer.up()
        self.assertEqual(target, os.path.join(peer.dir, "local"))
        self.assertTrue(os.path.isdir(target))
        self.assertIn("initial_sync_s", info)
        self.assertIsNotNone(peer.sync_back())
        self.assertEqual(peer.down(), 0.0)
        self.assertIsNone(peer.down(), "a second down does nothing")
        calls = self.calls()
        self.assertEqual([c[0].split(" ")[:2] for c in calls],
                         [["daemon", "start"], ["sync", "create"], ["sync", "flush"], ["sync", "list"],
                          ["sync", "flush"], ["sync", "list"], ["sync", "terminate"], ["daemon", "stop"]])
        create = calls[1][0].split(" ")
        self.assertEqual(create[-2:], ["share:" + os.path.join(b.H, "w2/mutagen"), target], create)
        data, sshpath = calls[0][1], calls[0][2]
        self.assertTrue(data.startswith(peer.dir + "/"), "the daemon's state is the run's own: %s" % data)
        self.assertTrue(all(c[1:] == [data, sshpath] for c in calls), calls)
        for tool in ("ssh", "scp"):
            with open(os.path.join(sshpath, tool)) as f:
                self.assertIn("-F " + os.path.join(self.tmp, "ssh_config"), f.read())
        self.assertEqual(b.notes, set())
        self.assertTrue(os.path.isdir(bench.MutagenPeer.remote_state))
        bench.MutagenPeer.cleanup()
        self.assertFalse(os.path.exists(bench.MutagenPeer.remote_state), "the agent the run installed is removed")

    def test_cleanup_keeps_a_users_own_mutagen_state(self):
        self.build()
        os.makedirs(bench.MutagenPeer.remote_state)
        peer = bench.MutagenPeer(self.bench(), type("W", (), {"name": "W1"})(), "w1", 1)
        peer.up()
        peer.down()
        bench.MutagenPeer.cleanup()
        self.assertTrue(os.path.isdir(bench.MutagenPeer.remote_state))

    def test_what_mutagen_could_not_sync_is_noted(self):
        self.build()
        with open(os.path.join(self.bin, "list.json"), "w") as f:
            json.dump([{"conflicts": [{"root": "a"}], "alpha": {"scanProblems": [{"path": "x"}]},
                        "beta": {"transitionProblems": []}}], f)
        b = self.bench()
        peer = bench.MutagenPeer(b, type("W", (), {"name": "W3"})(), "w3", 2)
        peer.up()
        peer.down()
        self.assertEqual(b.notes, {"mutagen: W3 initial sync r2: conflicts, alpha scanProblems"})


class FakePlugin(http.server.BaseHTTPRequestHandler):
    volumes = {}

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        route = self.path.lstrip("/")
        res, status = {}, 200
        if route == "Plugin.Activate":
            res = {"Implements": ["VolumeDriver"]}
        elif route == "VolumeDriver.Create":
            if "source" not in body.get("Opts", {}):
                res, status = {"Err": "option \"source\" is required"}, 500
            else:
                self.volumes[body["Name"]] = body["Opts"]
        elif route == "VolumeDriver.Mount":
            res = {"Mountpoint": self.server.mnt}
        elif route in ("VolumeDriver.Unmount", "VolumeDriver.Remove"):
            pass
        else:
            res, status = {"Err": "no route"}, 404
        data = json.dumps(res).encode()
        self.send_response(status)
        self.send_header("Content-Type", bench.CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        req, _ = super().get_request()
        return req, ("local", 0)


class ProtocolTest(unittest.TestCase):
    def test_create_mount_unmount(self):
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "p.sock")
            srv = UnixServer(sock, FakePlugin)
            srv.mnt = d
            th = threading.Thread(target=srv.serve_forever, daemon=True)
            th.start()
            try:
                p = bench.Plugin("/bin/true", d, d, "t")
                p.sock = sock
                p.call("Plugin.Activate", {})
                mp, dt = p.volume("v", "/src", "cached")
                self.assertEqual(mp, d)
                self.assertEqual(FakePlugin.volumes["v"], {"source": "/src", "state": "cached"})
                self.assertGreaterEqual(p.unmount("v"), 0)
                # a read-only configuration is its state with readonly=true
                p.volume("r", "/src", "cached-ro")
                self.assertEqual(FakePlugin.volumes["r"], {"source": "/src", "state": "cached", "readonly": "true"})
                p.unmount("r")
                with self.assertRaises(bench.BenchError) as c:
                    p.call("VolumeDriver.Create", {"Name": "w", "Opts": {}})
                self.assertIn("source", str(c.exception))
            finally:
                srv.shutdown()
                srv.server_close()


if __name__ == "__main__":
    unittest.main(verbosity=1)
