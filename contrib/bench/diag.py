#!/usr/bin/env python3
"""Why is a state slow? Runs one workload in one state of the plugin with
FUSE_DEBUG=true and counts the FUSE requests per opcode for each run (cold,
hot), and optionally `strace -c -f` of the plugin and of the workload.

  diag.py [--state cached] [--workload W1|W2|W3|W3rm|W4|W5] [--quick] [--strace] [--strace-share] [--hot-runs N] [--share-rtt MS]

Uses the tree bench.py prepared in WORK/H (run `make bench-quick` or
`make bench` once first); mounts its own share of it at WORK/S-diag, so it
can run beside a bench (whose timings it then disturbs). Prints a table and
writes WORK/diag/<state>-<workload>.json. Timings here are inflated by the
debug log and strace: use them for counts, not speed.

W3rm is W3's `rm -rf` alone: each run deletes a copy of W3's tree that
was unpacked on the host beforehand (not through the volume), so the
volume first meets the tree in the removal, as bench.py's W3 rm row does.

--strace-share counts the syscalls of the share's sftp session (sshd's
internal-sftp: one syscall or a few per SFTP request) in each run: which
host round trips a state adds to the share's own (run it with --state
consistent for the share's). It does not slow the plugin.

--strace can stall a run for good (seen once in five W4 runs): the
refresher looks at the host through the plugin's own mount, so a plugin
thread waits on a request that other plugin threads serve, and strace held
those stopped (`ptrace_stop`). `kill -9` the strace and the run goes on.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

RX = re.compile(rb"rx \d+: (\w+)")


def count_ops(path, start):
    c = collections.Counter()
    with open(path, "rb") as f:
        f.seek(start)
        for m in RX.finditer(f.read()):
            c[m.group(1).decode()] += 1
    return c


def strace_summary(path, by="seconds"):
    """The top rows of an strace -c summary (calls, seconds, syscall), the
    largest first by seconds or by calls."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 5 and re.match(r"^[\d.]+$", p[0]) and p[-1] not in ("total",):
                    try:
                        rows.append({"syscall": p[-1], "seconds": float(p[1]), "calls": int(p[3])})
                    except ValueError:
                        pass
    except OSError:
        pass
    return sorted(rows, key=lambda r: -r[by])[:12]


def sftp_session(share):
    """The pid of the sftp session of share's private sshd (a descendant of
    the listener whose title names internal-sftp)."""
    out = bench.run(["bash", share.script, "env", share.mp], capture=True)[1]
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    listener = env.get("SHARE_SSHD_PID", "").strip("'")
    if not listener:
        raise bench.BenchError("no sshd for the share at %s" % share.mp)
    children = collections.defaultdict(list)
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            children[ppid].append(d)
        except (OSError, IndexError):
            continue
    todo = list(children[listener])
    while todo:
        pid = todo.pop()
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if b"internal-sftp" in f.read():
                    return pid
        except OSError:
            pass
        todo.extend(children[pid])
    raise bench.BenchError("no sftp session under sshd %s" % listener)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", default="cached")
    ap.add_argument("--workload", default="W1")
    ap.add_argument("--quick", action="store_true", help="the W2 size of bench-quick")
    ap.add_argument("--strace", action="store_true", help="strace -c -f the plugin and the workload (no FUSE debug)")
    ap.add_argument("--strace-share", action="store_true",
                    help="strace -c -f the share's sftp session in each run (the host round trips)")
    ap.add_argument("--perf", action="store_true", help="perf record -g the plugin during the hot run (no FUSE debug); "
                    "writes WORK/p/<run>/perf-hot.txt")
    ap.add_argument("--hot-runs", type=int, default=1,
                    help="hot runs after the cold one (hot, hot2, ...): what the first repeat pays once")
    ap.add_argument("--work", default=os.path.join(bench.REPO, "_build", "bench"))
    ap.add_argument("--plugin", default=os.path.join(bench.REPO, "bin", "bindstate"))
    ap.add_argument("--share-rtt", type=float, default=0.0, metavar="MS",
                    help="milliseconds added to each round trip to the share (contrib/delayline, as bench.py)")
    ap.add_argument("--delayline", default=os.path.join(bench.REPO, "bin", "delayline"))
    a = ap.parse_args()

    args = bench.argparse.Namespace(quick=a.quick, work=a.work, reps=1, timeout=1800, w2_count=0, fuse_debug=False,
                                    configs="native", workloads=a.workload)
    b = bench.Bench(args)
    if not os.path.isdir(b.H):
        raise bench.BenchError("no %s: run make bench-quick first" % b.H)
    if a.workload == "W3rm":
        w3 = bench.W3(b)
        w3.tar = bench.small_files_tar(b.cache, bench.W3_DIRS, bench.W3_FILES, 100, 4000)
        w = bench.W3rm(b, w3)
    else:
        w = {"W1": bench.W1, "W2": bench.W2, "W3": bench.W3, "W4": bench.W4, "W5": bench.W5}[a.workload](b)
    if a.workload == "W1":
        w.packages = len(bench.run(["go", "list", "./..."], cwd=os.path.join(b.H, "go", "src"),
                                   env=b.go_env(os.path.join(b.H, "go")), capture=True)[1].split())
    elif a.workload == "W2":
        os.makedirs(os.path.join(b.H, "w2", "diag"), exist_ok=True)
    elif a.workload == "W3":
        w.tar = bench.small_files_tar(b.cache, bench.W3_DIRS, bench.W3_FILES, 100, 4000)
        os.makedirs(os.path.join(b.H, "w3", "diag"), exist_ok=True)
    elif a.workload == "W3rm":
        # A tree per run, unpacked on the host (run i deletes r<9+i>).
        for i in range(1 + a.hot_runs):
            d = os.path.join(b.H, w.rel("diag"), w3.dname("diag", 9 + i))
            bench.shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            bench.run(["tar", "-xf", w3.tar, "-C", d])
    elif a.workload == "W5":
        w.prepare()
        w.prepare_config("diag")
    elif a.workload == "W4":
        w.pristine = os.path.join(b.cache, "w4-pristine")
        if not os.path.isdir(os.path.join(b.H, "w4", "diag")):
            os.makedirs(os.path.join(b.H, "w4"), exist_ok=True)
            w.prepare_config("diag")
    if isinstance(w, bench.WritesOnce):
        # What an earlier diag run made (W3 and W5 write into a new
        # directory of each run's number).
        for label in range(9, 9 + 1 + a.hot_runs):
            bench.shutil.rmtree(os.path.join(b.H, w.rel("diag"), w.dname("diag", label)), ignore_errors=True)
    # Its own share (own sshd and sshfs mountpoint): never the one a running
    # bench.py uses.
    b.S = os.path.join(b.work, "S-diag")
    share = bench.Share(b.H, b.S, a.share_rtt, a.delayline)
    plugin_bin = os.path.join(b.work, "bindstate-diag")
    bench.shutil.copy2(a.plugin, plugin_bin)
    out = {"state": a.state, "workload": a.workload, "runs": {}}
    straces = []
    try:
        share.up()
        p = bench.Plugin(plugin_bin, b.work, b.work, "diag-%s-%s" % (a.state, a.workload), fuse_debug=not (a.strace or a.perf))
        p.start()
        try:
            vol = "diag"
            target, _ = p.volume(vol, os.path.join(b.S, w.rel("diag")), a.state)
            runs = ["cold"] + (["hot"] if a.hot_runs >= 1 else []) + ["hot%d" % i for i in range(2, a.hot_runs + 1)]
            for i, label in enumerate(runs):
                v = "cold" if label == "cold" else "hot"
                if v == "cold":
                    bench.drop_caches()
                start = os.path.getsize(p.logpath)
                st = None
                if a.strace:
                    sp = os.path.join(p.dir, "strace-plugin-%s.txt" % label)
                    st = subprocess.Popen(["strace", "-c", "-f", "-o", sp, "-p", str(p.pid)],
                                          stderr=subprocess.DEVNULL)
                    straces.append(sp)
                    time.sleep(0.5)
                sst = None
                if a.strace_share:
                    ssp = os.path.join(p.dir, "strace-share-%s.txt" % label)
                    sst = subprocess.Popen(["strace", "-c", "-f", "-o", ssp, "-p", sftp_session(share)],
                                           stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                pf = None
                if a.perf and label == "hot":
                    pdata = os.path.join(p.dir, "perf-hot.data")
                    pf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "1999", "-o", pdata, "-p", str(p.pid)],
                                          stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                with bench.Sampler(p.pid) as s:
                    # A workload that writes once (W3) unpacks into a new
                    # directory each run.
                    once = isinstance(w, (bench.WritesOnce, bench.W3rm))
                    res = w.run(target, "diag", 9 + i if once else 9, v)
                for tracer in (st, sst):
                    if tracer:
                        tracer.terminate()
                        tracer.wait()
                if pf:
                    pf.send_signal(2)
                    pf.wait()
                    ptxt = os.path.join(p.dir, "perf-hot.txt")
                    with open(ptxt, "w") as f:
                        subprocess.run(["perf", "report", "-i", pdata, "--stdio", "--no-children", "--sort", "symbol",
                                        "-g", "none", "--percent-limit", "0.5"], stdout=f, stderr=subprocess.DEVNULL)
                    print("  perf profile of the plugin (hot):", ptxt)
                ops = count_ops(p.logpath, start)
                r = {"s": round(res["s"], 3), "plugin": s.result, "fuse_ops": dict(ops.most_common()),
                     "fuse_ops_total": sum(ops.values())}
                if a.strace:
                    r["strace_plugin"] = strace_summary(straces[-1])
                if a.strace_share:
                    r["strace_share"] = strace_summary(ssp, by="calls")
                out["runs"][label] = r
                print("%s %s %s: %.2f s, %d FUSE requests: %s" % (a.state, a.workload, label, res["s"], sum(ops.values()),
                                                               ", ".join("%s %d" % kv for kv in ops.most_common(10))))
                if a.strace_share:
                    print("  share's sftp session syscalls (top by calls):",
                          ", ".join("%s %d" % (x["syscall"], x["calls"]) for x in r["strace_share"][:10]))
                if a.strace:
                    print("  plugin syscalls (top by time):", ", ".join("%s %d calls %.2fs" % (x["syscall"], x["calls"], x["seconds"])
                                                                      for x in r["strace_plugin"][:8]))
            if a.strace:
                # the workload's own syscalls, hot, through the mount
                wl = os.path.join(p.dir, "strace-workload.txt")
                if a.workload == "W1":
                    cmd = ["strace", "-c", "-f", "-o", wl, "go", "list", "./..."]
                    bench.run(cmd, cwd=os.path.join(target, "src"), env=b.go_env(target), capture=True)
                elif a.workload == "W2":
                    cmd = ["strace", "-c", "-f", "-o", wl, "bash", "-c",
                           "dd if=/dev/zero of=%s/diag-strace.bin bs=1k count=%d status=none && sync" % (target, b.w2_count)]
                    bench.run(cmd)
                else:
                    cmd = None
                if cmd:
                    out["strace_workload"] = strace_summary(wl)
                    print("  workload syscalls (top by time):", ", ".join("%s %d calls %.2fs" % (x["syscall"], x["calls"], x["seconds"])
                                                                        for x in out["strace_workload"][:8]))
            p.unmount(vol)
        finally:
            p.stop()
    finally:
        share.down()
    d = os.path.join(b.work, "diag")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "%s-%s%s%s.json" % (a.state, a.workload, "-strace" if a.strace else "",
                                              "-share" if a.strace_share else ""))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    try:
        main()
    except bench.BenchError as e:
        print("diag: %s" % e, file=sys.stderr)
        sys.exit(1)
