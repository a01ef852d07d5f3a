#!/usr/bin/env python3
"""What one database commit costs in a state: N times, write 8 KiB into a
16 MB file and fdatasync it (a WAL's commit), on a volume of the plugin
over the sshfs share, or on the share itself.

  commits.py [--plugin BIN] [--state delegated|cached|share] [--commits N]
             [--fsync] [--strace] [--work DIR]

Prints the time per commit. --fsync uses fsync instead of fdatasync;
--strace writes `strace -f -T` of the plugin during the loop to
WORK/strace-STATE.txt (its timings are inflated by strace). Needs root
(FUSE, a private sshd); the share and the plugin are its own, in WORK
(default _build/bench/commits).
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin", default=os.path.join(bench.REPO, "bin", "bindstate"))
    ap.add_argument("--state", default="delegated", choices=("delegated", "cached", "share"))
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--fsync", action="store_true", help="fsync, not fdatasync")
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--work", default=os.path.join(bench.REPO, "_build", "bench", "commits"))
    a = ap.parse_args()

    os.makedirs(os.path.join(a.work, "H", "wal"), exist_ok=True)
    share = bench.Share(os.path.join(a.work, "H"), os.path.join(a.work, "S"))
    share.up()
    try:
        p = bench.Plugin(a.plugin, a.work, a.work, "commits-" + a.state, fuse_debug=False)
        p.start()
        try:
            src = os.path.join(a.work, "S", "wal")
            target = src if a.state == "share" else p.volume("commits", src, a.state)[0]
            fd = os.open(os.path.join(target, "seg-%d" % time.time_ns()), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.write(fd, b"\0" * (16 << 20))
                os.fsync(fd)
                time.sleep(1)  # the first writeback done: the loop is commits only
                st = None
                if a.strace:
                    out = os.path.join(a.work, "strace-%s.txt" % a.state)
                    st = subprocess.Popen(["strace", "-f", "-T", "-tt", "-o", out, "-p", str(p.pid)],
                                          stderr=subprocess.DEVNULL)
                    time.sleep(1)
                sync = os.fsync if a.fsync else os.fdatasync
                page = b"x" * 8192
                t = time.monotonic()
                for i in range(a.commits):
                    os.pwrite(fd, page, i * 8192)
                    sync(fd)
                dt = time.monotonic() - t
                if st:
                    st.terminate()
                    st.wait()
            finally:
                os.close(fd)
            print("%s: %d commits (%s) in %.3f s, %.3f ms each" % (
                a.state, a.commits, "fsync" if a.fsync else "fdatasync", dt, dt * 1000 / a.commits))
        finally:
            p.stop()
    finally:
        share.down()


if __name__ == "__main__":
    main()
