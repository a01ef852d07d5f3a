#!/usr/bin/env python3
"""bindstate benchmark, as ../shared/BENCH.md specifies.

One run measures every configuration side by side against the same slow share
(a local ext4 directory H served by a private sshd on 127.0.0.1 and mounted
back with sshfs by contrib/share.sh):

  native      the workload runs on H directly (ext4): the reference
  consistent  a consistent bindstate volume of the share (a plain bind)
  cached      a cached volume (FUSE over a local store, writes through)
  delegated   a delegated volume (FUSE over a local store, writes journaled)
  rclone      `rclone mount --vfs-cache-mode full` over sftp to the same sshd
  unison      `unison` syncing H into a local directory (docker-sync's engine)
  mutagen     Mutagen v0.18.1 syncing H over ssh into a local directory

The plugin runs as a plain process on a private socket and state dir under
WORK, driven with Docker's volume plugin protocol (VolumeDriver.Create,
Mount, Unmount, Remove) over its unix socket; the workloads run on the host
against the returned mountpoint, so Docker's own overhead is not measured.

Workloads (each a row of the table; every figure is a ratio to native taken
in the same run, median of the repetitions, min and max shown):

  W1 cold/hot  `go list ./...` in a copy of GOROOT (GOROOT=the copy): stat,
               open and read of many small files. Cold: fresh share mount,
               fresh volume and store, caches dropped. Hot: run again.
  W2 cold/hot  dd 100k x 1 KiB then sync (sync included). Cold: fresh volume.
               For delegated: writeback lag after the cold run, exit flush
               (Unmount) after the hot run.
  W3           untar 20k small files in 200 dirs into a fresh subdirectory of
               a `chattr +T` directory, then read them all.
  W3 rm        the delete of those files, done at teardown (BENCH.md: deleting
               between runs slows later ext4 creates), timed per run.
  W4 cold/hot  `git status` on a committed copy of the Go tree (lstat storm).
  W5           import of a SQL dump (2,000 committed transactions, so 2,000
               WAL fsyncs, then a CHECKPOINT) into Debian's PostgreSQL whose
               data directory is a fresh one on the target; initdb and the
               server's start and stop are not timed.

Extras (a full run; --extras-only PARTS for one): big, a 100k-file source
(mount and first stat, a cold walk, the plugin's RSS and idle CPU); run, the
time from `docker run` to the container's first process with that source
mounted in each state, through a private dockerd with the managed plugin
(contrib/bench/dockerrun: here Docker's overhead is the point); flush, the
exit flush of 100 MB in small files against `cp -r` to the share.

Each repetition runs every configuration in turn (interleaved), so drift on
the shared machine hits them all alike. Plugin RSS and CPU are read from
/proc/PID during each workload and at idle.

Usage: bench.py [--quick] [--work DIR] [--out DIR] [--plugin BIN] ...
(see --help; `make bench` and `make bench-quick` call it). Needs root (FUSE
mounts, sshd, drop_caches).
"""

import argparse
import datetime
import http.client
import io
import json
import os
import platform
import pwd
import random
import shlex
import shutil
import signal
import socket
import stat
import statistics
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import report  # noqa: E402  (same directory)

CONTENT_TYPE = "application/vnd.docker.plugins.v1.1+json"
GOROOT_SRC = "/usr/local/go"

STATE_CONFIGS = ("consistent", "cached", "delegated")
# Read-only volumes (-o readonly=true): served without OPEN. Run only the
# workloads that write nothing (W1, W4).
READONLY_CONFIGS = ("cached-ro", "delegated-ro")
PLUGIN_CONFIGS = STATE_CONFIGS + READONLY_CONFIGS
CORE_CONFIGS = ("native",) + STATE_CONFIGS
PEER_CONFIGS = ("rclone", "unison", "mutagen")
ALL_CONFIGS = CORE_CONFIGS + READONLY_CONFIGS + PEER_CONFIGS


def volume_opts(cfg):
    """The state and options of a plugin configuration's volume."""
    if cfg in READONLY_CONFIGS:
        return cfg[:-len("-ro")], {"readonly": "true"}
    return cfg, {}


def log(*a):
    print("[bench %s]" % time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


class Timeout(BenchError):
    """A run that did not finish in time: the share stalls now and then
    (sshfs over loopback has held a `dd` for minutes), so it counts against
    that run only, and the next repetition still runs."""


# ---------------------------------------------------------------- processes

def run(cmd, cwd=None, env=None, timeout=None, capture=False, check=True):
    """Runs cmd (a list, or a string for bash -c) in its own process group.
    Returns (seconds, stdout). On timeout the whole group is killed."""
    if isinstance(cmd, str):
        cmd = ["bash", "-o", "pipefail", "-c", cmd]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True,
                         stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Timeout("timeout after %ss: %s" % (timeout, " ".join(cmd)[-200:]))
    except BaseException:  # interrupted: leave nothing running
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    dt = time.monotonic() - t0
    if check and p.returncode != 0:
        raise BenchError("exit %d: %s: %s" % (p.returncode, " ".join(cmd)[-200:], (err or "").strip()[-600:]))
    return dt, out


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mounted(path):
    path = os.path.abspath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4].replace("\\040", " ") == path:
                return True
    return False


def mounts_under(prefix):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == prefix or mp.startswith(prefix.rstrip("/") + "/"):
                out.append(mp)
    return sorted(out, key=len, reverse=True)


def force_unmount(mp):
    for cmd in (["fusermount3", "-u", "-z", mp], ["umount", "-l", mp]):
        if not mounted(mp):
            return
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ------------------------------------------------------------ /proc sampling

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """CPU seconds (user+system) used by pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0  # MiB
    return 0.0


class Sampler:
    """Samples a process's RSS every 50 ms while a workload runs, and its CPU
    time at both ends. pid None: records nothing."""

    def __init__(self, pid):
        self.pid = pid
        self.stop_ev = threading.Event()
        self.rss_max = 0.0
        self.cpu0 = 0.0
        self.t0 = 0.0

    def _loop(self):
        while not self.stop_ev.wait(0.05):
            try:
                self.rss_max = max(self.rss_max, proc_rss(self.pid))
            except OSError:
                return

    def __enter__(self):
        if self.pid:
            self.cpu0 = proc_cpu(self.pid)
            self.rss_max = proc_rss(self.pid)
            self.th = threading.Thread(target=self._loop, daemon=True)
            self.th.start()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.wall = time.monotonic() - self.t0
        if not self.pid:
            self.result = None
            return False
        self.stop_ev.set()
        self.th.join()
        try:
            cpu = proc_cpu(self.pid) - self.cpu0
            rss = proc_rss(self.pid)
        except OSError:
            cpu, rss = None, None
        self.result = {"cpu_s": _r(cpu), "cpu_pct": _r(100 * cpu / self.wall if cpu is not None and self.wall else None),
                       "rss_max_mib": _r(max(self.rss_max, rss or 0)), "rss_end_mib": _r(rss)}
        return False


def _r(x, nd=3):
    return None if x is None else round(x, nd)


def idle(pid, seconds):
    """Plugin CPU (% of one core) and RSS over an idle window."""
    with Sampler(pid) as s:
        time.sleep(seconds)
    return s.result


# ------------------------------------------------------------------- share

class Share:
    """The slow share: contrib/share.sh up/down (private sshd + sshfs). With
    rtt_ms, every round trip to the sshd is that much longer (the share's
    delay line, SHARE_RTT; delayline is its binary)."""

    def __init__(self, hostdir, mp, rtt_ms=0.0, delayline=None):
        self.hostdir, self.mp = hostdir, mp
        self.rtt_ms, self.delayline = rtt_ms, delayline
        self.script = os.path.join(REPO, "contrib", "share.sh")
        if not os.access(self.script, os.X_OK):
            raise BenchError("contrib/share.sh missing or not executable")

    def up(self):
        if mounted(self.mp):
            self.down()
        env = None
        if self.rtt_ms:
            env = dict(os.environ, SHARE_RTT="%g" % self.rtt_ms)
            if self.delayline:
                env["DELAYLINE"] = self.delayline
        run([self.script, "up", self.hostdir, self.mp], env=env, timeout=60)

    def down(self):
        run([self.script, "down", self.mp], timeout=60, check=False)

    def remount(self):
        """A fresh sshfs (and sshd): nothing cached in sshfs itself."""
        self.down()
        self.up()

    def env(self):
        _, out = run([self.script, "env", self.mp], capture=True, timeout=30)
        env = {}
        for line in out.splitlines():
            k, _, v = line.partition("=")
            env[k] = shlex.split(v)[0] if v else ""
        return env


class LocalShare:
    """A source on a kernel file system instead of the slow share (--share
    local): H bind-mounted at S. What a state costs over a source that is
    not FUSE (NFS, SMB, 9p and virtiofs are kernel file systems too, and the
    plugin treats them alike; none can be served on this machine), e.g.
    cached writers served from the host file. Peers need the sshd."""

    def __init__(self, hostdir, mp, rtt_ms=0.0, delayline=None):
        if rtt_ms:
            raise BenchError("--share-rtt needs the sshfs share: a local folder has no round trips to lengthen")
        self.hostdir, self.mp = hostdir, mp

    def up(self):
        if mounted(self.mp):
            self.down()
        os.makedirs(self.mp, exist_ok=True)
        run(["mount", "--bind", self.hostdir, self.mp], timeout=30)

    def down(self):
        run(["umount", self.mp], timeout=30, check=False)

    def remount(self):
        """Nothing is cached in a bind mount; drop_caches does the rest."""

    def env(self):
        raise BenchError("the peers need the sshfs share: run them without --share local")


SHARES = {"sshfs": Share, "local": LocalShare}


def share_op_ms(mp, n=100):
    """What one request to the share costs, as a workload sees it: the
    median and min of n lstats of names that do not exist (each a FUSE
    round trip to sshfs and an SFTP one to the sshd; sshfs caches a missing
    name, so each name is new), in ms."""
    tag = "%d-%d" % (os.getpid(), time.monotonic_ns())
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        try:
            os.lstat(os.path.join(mp, ".bench-op-probe-%s-%d" % (tag, i)))
        except FileNotFoundError:
            pass
        ts.append((time.perf_counter() - t0) * 1e3)
    return {"median": round(statistics.median(ts), 3), "min": round(min(ts), 3)}
SHARE_TEXT = {"sshfs": "sshfs over loopback sshd", "local": "none: a local ext4 folder, bind-mounted (--share local)"}


# ------------------------------------------------------------------ plugin

class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.sock_path)
        self.sock = s


class Plugin:
    """The plugin as a plain process on a private socket and state dir."""

    seq = 0

    def __init__(self, binary, work, allowed_roots, tag, fuse_debug=False, cpu_profile=False):
        Plugin.seq += 1
        self.binary = binary
        self.dir = os.path.join(work, "p", "%03d-%s" % (Plugin.seq, tag))
        self.sock = os.path.join(self.dir, "plugin.sock")
        self.state = os.path.join(self.dir, "state")
        self.mnt = os.path.join(self.dir, "mnt")
        self.logpath = os.path.join(self.dir, "plugin.log")
        self.allowed_roots = allowed_roots
        self.fuse_debug = fuse_debug
        self.cpu_profile = cpu_profile
        self.proc = None
        self.mounts = []  # (name, id)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        env = dict(os.environ)
        env.update({"SOCKET_NAME": self.sock, "STATE_DIR": self.state, "MOUNT_ROOT": self.mnt,
                    "ALLOWED_ROOTS": self.allowed_roots, "HOST_PREFIX": "", "LOG_LEVEL": "info",
                    "UNMOUNT_FLUSH_TIMEOUT": "600s", "FUSE_DEBUG": "true" if self.fuse_debug else "false"})
        if self.cpu_profile:
            env["CPU_PROFILE"] = os.path.join(self.dir, "cpu.pprof")
        self.logf = open(self.logpath, "wb")
        self.proc = subprocess.Popen([self.binary], env=env, stdout=self.logf, stderr=self.logf,
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError("plugin exited (%d) at start: %s" % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.sock):
                try:
                    self.call("Plugin.Activate", {}, timeout=5)
                    return self
                except (OSError, BenchError):
                    pass
            time.sleep(0.05)
        raise BenchError("plugin did not answer on %s: %s" % (self.sock, self.log_tail()))

    def log_tail(self, n=1500):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def call(self, route, body, timeout=900):
        c = UnixHTTP(self.sock, timeout)
        try:
            c.request("POST", "/" + route, json.dumps(body), {"Content-Type": CONTENT_TYPE})
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            j = json.loads(data or b"{}")
        except ValueError:
            j = {"Err": data.decode(errors="replace")}
        if r.status != 200 or (isinstance(j, dict) and j.get("Err")):
            raise BenchError("%s: %s %s" % (route, r.status, (j.get("Err") if isinstance(j, dict) else j)))
        return j

    def volume(self, name, source, cfg):
        """Creates and mounts a volume of configuration cfg (a state, or a
        read-only one); returns (mountpoint, mount seconds)."""
        state, opts = volume_opts(cfg)
        self.call("VolumeDriver.Create", {"Name": name, "Opts": dict(opts, source=source, state=state)})
        t0 = time.monotonic()
        j = self.call("VolumeDriver.Mount", {"Name": name, "ID": "bench-" + name})
        dt = time.monotonic() - t0
        self.mounts.append(name)
        mp = j.get("Mountpoint") or ""
        if not os.path.isdir(mp):
            raise BenchError("Mount returned %r, not a directory" % mp)
        return mp, dt

    def unmount(self, name, timeout=900):
        t0 = time.monotonic()
        try:
            self.call("VolumeDriver.Unmount", {"Name": name, "ID": "bench-" + name}, timeout=timeout)
        except socket.timeout:
            raise BenchError("Unmount of %s did not return in %d s (hung); goroutine dump: %s"
                             % (name, timeout, self.dump_stacks()))
        dt = time.monotonic() - t0
        self.mounts.remove(name)
        return dt

    def dump_stacks(self):
        """SIGQUIT: the Go runtime writes every goroutine's stack to the log
        and exits. Keeps a copy of the log outside the per-run dirs."""
        if not self.proc or self.proc.poll() is not None:
            return "(plugin not running)"
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        d = os.path.join(os.path.dirname(os.path.dirname(self.dir)), "diag")
        os.makedirs(d, exist_ok=True)
        dst = os.path.join(d, "stacks-" + os.path.basename(self.dir) + ".log")
        shutil.copy2(self.logpath, dst)
        self.mounts = []
        return dst

    def status(self, name):
        try:
            return (self.call("VolumeDriver.Get", {"Name": name}, timeout=30).get("Volume") or {}).get("Status")
        except BenchError:
            return None

    def stop(self):
        """Unmounts what is left, stops the process (SIGTERM, then SIGKILL),
        and clears any mount it left behind."""
        if not self.proc:
            return
        for name in list(self.mounts):
            try:
                self.unmount(name, timeout=60)
            except (OSError, BenchError) as e:
                log("plugin: unmount %s at stop: %s" % (name, e))
                self.mounts.remove(name)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                log("plugin %d did not stop in 120 s: killing it" % self.proc.pid)
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        for mp in mounts_under(self.mnt):
            log("plugin left %s mounted: unmounting it" % mp)
            force_unmount(mp)
        self.proc = None


# --------------------------------------------------------------- workloads

def count_files(path):
    n = 0
    for _, _, files in os.walk(path):
        n += len(files)
    return n


class Workload:
    """A workload: prepares H once, then runs against a target directory
    that shows H/<rel> (natively, through a share, a volume or a peer)."""
    name = ""
    variants = ("cold", "hot")
    writes = False  # has something to write back (lag, exit flush)
    remount_share = True  # cold needs a fresh sshfs (reads); writes need not

    def __init__(self, b):
        self.b = b

    def rel(self, cfg):
        return self.name.lower()

    def prepare(self):
        pass

    def prepare_config(self, cfg):
        pass

    def run(self, target, cfg, rep, variant):
        raise NotImplementedError

    def landed(self, cfg, rep, variant):
        """Whether what that run wrote is on H."""
        return True

    def teardown(self):
        pass


class W1(Workload):
    name = "W1"

    def rel(self, cfg):
        return "go"

    def prepare(self):
        b = self.b
        dst = os.path.join(b.H, "go")
        os.makedirs(os.path.join(dst, "src"))
        for f in ("VERSION", "go.env"):
            if os.path.exists(os.path.join(GOROOT_SRC, f)):
                shutil.copy2(os.path.join(GOROOT_SRC, f), dst)
        if not b.quick:
            run(["cp", "-a", os.path.join(GOROOT_SRC, "src"), dst])
        else:
            # A small tree: package strings and its dependencies (about 1.3k
            # files: runtime and internal/...), copied directory by directory.
            _, out = run(["go", "list", "-deps", "-f", "{{.Dir}}", "./strings"],
                         cwd=os.path.join(GOROOT_SRC, "src"), env=b.go_env(GOROOT_SRC), capture=True)
            src = os.path.join(GOROOT_SRC, "src")
            for d in sorted(set(out.split())):
                rel = os.path.relpath(d, src)
                os.makedirs(os.path.join(dst, "src", rel), exist_ok=True)
                for e in os.scandir(d):
                    if e.is_file(follow_symlinks=False):
                        shutil.copy2(e.path, os.path.join(dst, "src", rel))
            for f in ("go.mod", "go.sum", "vendor/modules.txt"):
                p = os.path.join(src, f)
                if os.path.exists(p):
                    os.makedirs(os.path.dirname(os.path.join(dst, "src", f)), exist_ok=True)
                    shutil.copy2(p, os.path.join(dst, "src", f))
        self.files = count_files(dst)
        _, out = run(["go", "list", "./..."], cwd=os.path.join(dst, "src"), env=b.go_env(dst), capture=True)
        self.packages = len(out.split())
        b.meta["w1_tree"] = {"files": self.files, "packages": self.packages}
        log("W1 tree: %d files, %d packages" % (self.files, self.packages))

    def run(self, target, cfg, rep, variant):
        dt, out = run(["go", "list", "./..."], cwd=os.path.join(target, "src"), env=self.b.go_env(target),
                      capture=True, timeout=self.b.timeout)
        if len(out.split()) != self.packages:
            raise BenchError("go list listed %d packages, expected %d" % (len(out.split()), self.packages))
        return {"s": dt}


class W2(Workload):
    name = "W2"
    writes = True
    remount_share = False

    def rel(self, cfg):
        return "w2/" + cfg

    def prepare_config(self, cfg):
        os.makedirs(os.path.join(self.b.H, "w2", cfg))

    def fname(self, cfg, rep, variant):
        return "%s-r%d-%s.bin" % (cfg, rep, variant)

    def run(self, target, cfg, rep, variant):
        f = os.path.join(target, self.fname(cfg, rep, variant))
        dt, _ = run("dd if=/dev/zero of=%s bs=1k count=%d status=none && sync" % (shlex.quote(f), self.b.w2_count),
                    timeout=self.b.timeout)
        return {"s": dt}

    def landed(self, cfg, rep, variant):
        try:
            return os.stat(os.path.join(self.b.H, self.rel(cfg), self.fname(cfg, rep, variant))).st_size == self.b.w2_count * 1024
        except OSError:
            return False

    def after_cycle(self, cfg, rep):
        d = os.path.join(self.b.H, self.rel(cfg))
        for f in os.listdir(d):
            if f.startswith(cfg + "-") and os.path.isfile(os.path.join(d, f)):
                os.remove(os.path.join(d, f))


W3_DIRS, W3_FILES = 200, 100  # 20k files
EXTRAS = ["big", "run", "flush"]  # what a full run reports besides the workloads (extras)


def small_files_tar(cache, dirs, files, lo, hi):
    """A tar of dirs x files files of lo..hi random bytes (made once)."""
    path = os.path.join(cache, "small-%dx%d-%d-%d.tar" % (dirs, files, lo, hi))
    if not os.path.exists(path):
        rnd = random.Random(3)
        tmp = path + ".tmp"
        with tarfile.open(tmp, "w") as t:
            for d in range(dirs):
                for i in range(files):
                    data = rnd.randbytes(rnd.randint(lo, hi))
                    ti = tarfile.TarInfo("d%03d/f%03d.js" % (d, i))
                    ti.size, ti.mtime, ti.mode = len(data), 1700000000, 0o644
                    t.addfile(ti, io.BytesIO(data))
        os.rename(tmp, path)
    return path


class WritesOnce(Workload):
    """A workload that writes, run once per cycle (no cold and hot)."""
    variants = ("",)
    writes = True
    remount_share = False


class W3(WritesOnce):
    name = "W3"

    def prepare(self):
        b = self.b
        self.tar = small_files_tar(b.cache, W3_DIRS, W3_FILES, 100, 4000)
        os.makedirs(os.path.join(b.H, "w3"))

    def rel(self, cfg):
        return "w3/" + cfg

    def prepare_config(self, cfg):
        d = os.path.join(self.b.H, self.rel(cfg))
        os.makedirs(d)
        # BENCH.md: creates in an inode group where many inodes were freed
        # minutes before are slow on ext4; +T (not inherited) spreads each
        # run's directory to another group.
        run(["chattr", "+T", d])

    def dname(self, cfg, rep):
        return "r%d" % rep

    def run(self, target, cfg, rep, variant):
        d = os.path.join(target, self.dname(cfg, rep))
        t_x, _ = run(["bash", "-c", 'mkdir "$1" && tar -xf "$2" -C "$1"', "w3", d, self.tar], timeout=self.b.timeout)
        t_r, _ = run(["bash", "-c", 'find "$1" -type f -print0 | xargs -0 cat > /dev/null', "w3", d],
                     timeout=self.b.timeout)
        return {"s": t_x + t_r, "extract_s": round(t_x, 3), "read_s": round(t_r, 3)}

    def landed(self, cfg, rep, variant):
        return count_files(os.path.join(self.b.H, self.rel(cfg), self.dname(cfg, rep))) == W3_DIRS * W3_FILES


class W3rm(Workload):
    """The delete of W3's files, at teardown: a workload of its own whose
    runs delete the directories W3 left, one per repetition."""
    name = "W3 rm"
    variants = ("",)
    writes = True

    def __init__(self, b, w3):
        super().__init__(b)
        self.w3 = w3

    def rel(self, cfg):
        return self.w3.rel(cfg)

    def run(self, target, cfg, rep, variant):
        d = os.path.join(target, self.w3.dname(cfg, rep))
        if not os.path.isdir(d):
            raise BenchError("no W3 directory %s to delete (W3 failed?)" % d)
        dt, _ = run(["rm", "-rf", d], timeout=self.b.timeout)
        return {"s": dt}

    def landed(self, cfg, rep, variant):
        return not os.path.exists(os.path.join(self.b.H, self.rel(cfg), self.w3.dname(cfg, rep)))


class W4(Workload):
    name = "W4"

    def rel(self, cfg):
        return "w4/" + cfg

    def prepare(self):
        b = self.b
        self.pristine = os.path.join(b.cache, "w4-pristine")
        stamp = os.path.join(self.pristine, ".bench-ok")
        if not os.path.exists(stamp):
            shutil.rmtree(self.pristine, ignore_errors=True)
            os.makedirs(self.pristine)
            run(["cp", "-a", os.path.join(GOROOT_SRC, "src"), self.pristine])
            g = ["git", "-C", self.pristine, "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
            run(g + ["init", "-q"])
            # checkStat=minimal, trustctime=false: the index stays valid seen
            # through sshfs and FUSE (other inode numbers, ctime): git status
            # is then the lstat storm of BENCH.md, not a full re-hash.
            for k, v in (("core.checkStat", "minimal"), ("core.trustctime", "false"),
                         ("core.untrackedCache", "false"), ("core.fsmonitor", "false"), ("gc.auto", "0")):
                run(["git", "-C", self.pristine, "config", k, v])
            run(g + ["add", "-A"], timeout=600)
            run(g + ["commit", "-q", "-m", "go src"], timeout=600)
            open(stamp, "w").close()
        os.makedirs(os.path.join(b.H, "w4"))

    def prepare_config(self, cfg):
        d = os.path.join(self.b.H, "w4", cfg)
        run(["cp", "-a", self.pristine, d], timeout=600)
        run(["git", "-c", "safe.directory=*", "-C", d, "status", "--porcelain"], timeout=600)

    def run(self, target, cfg, rep, variant):
        dt, out = run(["git", "-c", "safe.directory=*", "status", "--porcelain"], cwd=target, capture=True,
                      timeout=self.b.timeout)
        dirty = [l for l in out.splitlines() if ".bench-ok" not in l]
        if dirty:
            raise BenchError("git status shows %d changes, e.g. %s" % (len(dirty), dirty[:3]))
        return {"s": dt}


W5_TXNS, W5_ROWS = 2000, 10  # committed transactions, rows each
W5_PORT = 54329  # names the server's socket file only: no TCP (listen_addresses='')


# A volume's status before each unmount: what may differ from run to run
# (what was left to write back, or failed) is kept per run; what its
# configuration decides (its state, how writers are served, the xattrs it
# takes) once per configuration, in meta["volume_status"]. Kept whole per
# run, the status was most of a results file: the same sentences and the
# run's own mount paths, sample after sample.
STATUS_PER_RUN = ("conflicts", "dirty", "failed", "lag", "last_error")
STATUS_PER_VOLUME = ("rescan", "state", "writers", "xattrs")


def split_status(st):
    """(what of a volume's status is the run's, what is its configuration's)."""
    return ({k: st[k] for k in STATUS_PER_RUN if k in st},
            {k: st[k] for k in STATUS_PER_VOLUME if k in st})


def postgres_bin():
    """The newest PostgreSQL server's bin directory Debian installed, or None."""
    root = "/usr/lib/postgresql"
    try:
        versions = sorted((d for d in os.listdir(root) if d.isdigit()), key=int)
    except OSError:
        return None
    for v in reversed(versions):
        b = os.path.join(root, v, "bin")
        if os.access(os.path.join(b, "postgres"), os.X_OK):
            return b
    return None


class W5(WritesOnce):
    """A database import on the mount (BENCH.md W5; seeds/003: a SQL dump
    imported into a database container whose data directory is a bind
    mount). Each run gets a fresh PostgreSQL data directory on the target
    (initdb --no-sync, as the postgres user; the target's directory is
    chowned to it first, through the mount), a server on a private socket
    directory, the dump through psql and a CHECKPOINT (timed), then the
    server's stop. Every commit fsyncs the WAL (synchronous_commit on):
    what the fsync rules (D2) cost per call."""
    name = "W5"

    def prepare(self):
        b = self.b
        self.bin = postgres_bin()
        if self.bin is None:
            raise BenchError("W5 needs PostgreSQL's server: apt-get install postgresql (contrib/install-deps.sh --bench)")
        pw = pwd.getpwnam("postgres")
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.dump = os.path.join(b.cache, "w5-%dx%d.sql" % (W5_TXNS, W5_ROWS))
        if not os.path.exists(self.dump):
            write_w5_dump(self.dump + ".tmp", W5_TXNS, W5_ROWS)
            os.rename(self.dump + ".tmp", self.dump)
        os.chmod(self.dump, 0o644)
        self.sock = os.path.join(b.work, "w5-sock")
        os.makedirs(self.sock, exist_ok=True)
        os.chown(self.sock, self.uid, self.gid)
        os.makedirs(os.path.join(b.H, "w5"), exist_ok=True)  # diag.py prepares again
        self.expected = {}

    def rel(self, cfg):
        return "w5/" + cfg

    def prepare_config(self, cfg):
        os.makedirs(os.path.join(self.b.H, self.rel(cfg)), exist_ok=True)

    def dname(self, cfg, rep):
        return "r%d" % rep

    def pg(self, *cmd, timeout=None, capture=False):
        tool = os.path.join(self.bin, cmd[0])
        return run(["runuser", "-u", "postgres", "--", tool] + list(cmd[1:]), timeout=timeout or self.b.timeout,
                   capture=capture)

    def psql(self, *args, capture=False):
        return self.pg("psql", "-h", self.sock, "-p", str(W5_PORT), "-d", "postgres", "-X", "-q",
                       "-v", "ON_ERROR_STOP=1", *args, capture=capture)

    def run(self, target, cfg, rep, variant):
        data = os.path.join(target, self.dname(cfg, rep))
        os.chown(target, self.uid, self.gid)  # a sync tool's copy is root's
        self.pg("initdb", "-N", "-A", "trust", "-U", "postgres", "-D", data)
        opts = "-c listen_addresses= -k %s -p %d -c shared_buffers=32MB -c max_wal_size=1GB" % (self.sock, W5_PORT)
        log_file = os.path.join(self.sock, "server-%s-r%d.log" % (cfg, rep))
        self.pg("pg_ctl", "-D", data, "-l", log_file, "-o", opts, "-w", "-t", "120", "start")
        try:
            t_import, _ = self.psql("-f", self.dump)
            t_ckpt, _ = self.psql("-c", "CHECKPOINT")
            _, out = self.psql("-t", "-A", "-c", "SELECT count(*) FROM items", capture=True)
            if out.strip() != str(W5_TXNS * W5_ROWS):
                raise BenchError("the import left %s rows, expected %d" % (out.strip(), W5_TXNS * W5_ROWS))
        finally:
            self.pg("pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "300", "stop")
        # What the host must end up with (for the writeback lag).
        self.expected[(cfg, rep)] = tree_sizes(data)
        return {"s": t_import + t_ckpt, "import_s": round(t_import, 3), "checkpoint_s": round(t_ckpt, 3)}

    def landed(self, cfg, rep, variant):
        want = self.expected.get((cfg, rep))
        return want is not None and tree_sizes(os.path.join(self.b.H, self.rel(cfg), self.dname(cfg, rep))) == want


def write_w5_dump(path, txns, rows):
    """A SQL dump as pg_dump --inserts would make one, but committed in txns
    transactions of rows rows each (an application's import: a commit per
    batch, each a WAL fsync), then an index built."""
    rnd = random.Random(5)
    with open(path, "w") as f:
        f.write("CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, body text NOT NULL);\n")
        for t in range(txns):
            vals = ",".join("(%d,'item-%d','%s')" % (i, i, "".join(rnd.choice("abcdefghij") for _ in range(200)))
                            for i in range(t * rows, (t + 1) * rows))
            f.write("BEGIN;\nINSERT INTO items VALUES %s;\nCOMMIT;\n" % vals)
        f.write("CREATE INDEX items_name ON items (name);\n")


def tree_sizes(top):
    """{path below top: size} of the regular files beneath top."""
    out = {}
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[os.path.relpath(p, top)] = st.st_size
    return out


# ------------------------------------------------------------------- peers

class Peer:
    """What a user would pick instead of bindstate. up() returns the
    directory the workload runs in and what it cost to get there
    ({"initial_sync_s": ...}); down() returns the exit flush time."""
    tool = None
    sync_back = None  # for sync tools: runs a sync to H, returns its seconds
    seq = 0

    def __init__(self, b, w, rel, rep):
        Peer.seq += 1
        self.b, self.w, self.rel, self.rep = b, w, rel, rep
        self.dir = os.path.join(b.work, "peers", "%03d-%s-%s-r%d" % (Peer.seq, self.name, w.name.replace(" ", ""), rep))
        os.makedirs(self.dir)
        self.env = dict(os.environ, HOME=os.path.join(b.work, "peers", "home"))
        os.makedirs(self.env["HOME"], exist_ok=True)

    @classmethod
    def missing(cls):
        """Why this peer cannot run here, or None."""
        if shutil.which(cls.tool) is None:
            return "%s is not installed (apt-get install %s)" % (cls.tool, cls.tool)
        return None


class RclonePeer(Peer):
    """rclone mount --vfs-cache-mode full over sftp to the share's sshd."""
    name = tool = "rclone"

    def up(self):
        e = self.b.share.env()
        conf = os.path.join(self.dir, "rclone.conf")
        with open(conf, "w") as f:
            # md5sum_command = none: else one remote md5sum per opened file (BENCH.md)
            f.write("[share]\ntype = sftp\nhost = 127.0.0.1\nport = %s\nuser = root\nkey_file = %s\n"
                    "md5sum_command = none\nsha1sum_command = none\nshell_type = unix\n"
                    % (e["SHARE_PORT"], os.path.join(e["SHARE_STATE"], "client_key")))
        self.mp = os.path.join(self.dir, "mnt")
        os.makedirs(self.mp)
        self.logf = open(os.path.join(self.dir, "rclone.log"), "wb")
        self.proc = subprocess.Popen(
            ["rclone", "mount", "share:" + os.path.join(self.b.H, self.rel), self.mp, "--config", conf,
             "--vfs-cache-mode", "full", "--cache-dir", os.path.join(self.dir, "cache"), "--allow-other",
             "--log-level", "NOTICE"], env=self.env, stdout=self.logf, stderr=self.logf, start_new_session=True)
        t0 = time.monotonic()
        while not mounted(self.mp):
            if self.proc.poll() is not None or time.monotonic() - t0 > 30:
                raise BenchError("rclone mount failed: %s" % open(os.path.join(self.dir, "rclone.log")).read()[-500:])
            time.sleep(0.05)
        return self.mp, {"mount_s": time.monotonic() - t0}

    def down(self):
        if not getattr(self, "proc", None):
            return None
        t0 = time.monotonic()
        for _ in range(100):
            if not mounted(self.mp):
                break
            subprocess.run(["fusermount3", "-u", self.mp], stderr=subprocess.DEVNULL)
            time.sleep(0.1)
        try:
            self.proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        dt = time.monotonic() - t0
        force_unmount(self.mp)
        self.proc = None
        self.logf.close()
        return dt


class UnisonPeer(Peer):
    """unison between the share (over ssh to the share's sshd) and a local
    directory: the engine of docker-sync. The initial sync and the sync back
    are timed apart from the workload."""
    name = tool = "unison"

    def _sync(self):
        e = self.b.share.env()
        # The server end (over ssh, as root) keeps its archives under its own
        # scratch dir too, never in ~/.unison.
        server = "env UNISON=%s %s" % (os.path.join(self.dir, "unison-server"), shutil.which("unison"))
        cmd = ["unison", self.local, "ssh://share/" + os.path.join(self.b.H, self.rel), "-batch", "-auto",
               "-times", "-confirmbigdel=false", "-silent", "-sshargs", "-F " + e["SHARE_SSH_CONFIG"],
               "-servercmd", server]
        try:
            dt, _ = run(cmd, env=dict(self.env, UNISON=os.path.join(self.dir, "unison-state")), timeout=self.b.timeout)
        except BenchError as err:
            try:
                with open(os.path.join(self.dir, "unison-state", "unison.log")) as f:
                    why = f.read()[-400:]
            except OSError:
                why = ""
            raise BenchError("%s | unison.log: %s" % (err, why))
        return dt

    def up(self):
        self.local = os.path.join(self.dir, "local")
        os.makedirs(self.local)
        return self.local, {"initial_sync_s": self._sync()}

    def sync_back(self):
        return _r(self._sync())

    def down(self):
        return 0.0


class MutagenPeer(Peer):
    """Mutagen v0.18.1 (the engine of Docker Desktop's synchronized file
    shares): a two-way sync session between H, over ssh to the share's
    sshd, and a local directory the workload runs in. Each run has its own
    daemon and state (MUTAGEN_DATA_DIRECTORY). The initial sync and the
    sync back (`mutagen sync flush`, what a user runs to have the host
    caught up) are timed apart from the workload. Built by
    contrib/bench/mutagen.sh (make bench does) at `binary`.

    The other end runs as the ssh user, root: Mutagen installs its agent
    in that user's home (~root/.mutagen, a path fixed in Mutagen). The
    harness removes it at the end (cleanup) if it was not there before."""
    name = tool = "mutagen"
    binary = os.path.join(REPO, "bin", "mutagen", "mutagen")  # --mutagen
    remote_state = os.path.join(os.path.expanduser("~root"), ".mutagen")
    remote_state_ours = None  # True: made by this harness, removed by cleanup

    @classmethod
    def missing(cls):
        bundle = os.path.join(os.path.dirname(cls.binary), "mutagen-agents.tar.gz")
        if not os.access(cls.binary, os.X_OK) or not os.path.isfile(bundle):
            return "Mutagen is not built at %s (make bench builds it: bash contrib/bench/mutagen.sh %s)" % (
                cls.binary, os.path.dirname(cls.binary))
        return None

    @classmethod
    def cleanup(cls):
        if cls.remote_state_ours:
            shutil.rmtree(cls.remote_state, ignore_errors=True)
        cls.remote_state_ours = None

    def _mutagen(self, *args):
        return run([self.binary] + list(args), env=self.menv, capture=True, timeout=self.b.timeout)

    def up(self):
        e = self.b.share.env()
        # Mutagen runs the ssh and scp it finds in MUTAGEN_SSH_PATH: these
        # use the share's own ssh config (its port, key and host alias).
        sshbin = os.path.join(self.dir, "ssh")
        os.makedirs(sshbin)
        for tool in ("ssh", "scp"):
            real = shutil.which(tool)
            if real is None:
                raise BenchError("%s not found (apt-get install openssh-client)" % tool)
            path = os.path.join(sshbin, tool)
            with open(path, "w") as f:
                f.write("#!/bin/sh\nexec %s -F %s \"$@\"\n" % (shlex.quote(real), shlex.quote(e["SHARE_SSH_CONFIG"])))
            os.chmod(path, 0o755)
        self.menv = dict(self.env, MUTAGEN_DATA_DIRECTORY=os.path.join(self.dir, "data"), MUTAGEN_SSH_PATH=sshbin)
        if MutagenPeer.remote_state_ours is None:
            MutagenPeer.remote_state_ours = not os.path.exists(self.remote_state)
        self.local = os.path.join(self.dir, "local")
        os.makedirs(self.local)
        self._mutagen("daemon", "start")
        self.running = True
        t0 = time.monotonic()
        # posix-raw: symbolic links as they are (the default refuses some).
        self._mutagen("sync", "create", "--name", "bench", "--symlink-mode", "posix-raw",
                      "share:" + os.path.join(self.b.H, self.rel), self.local)
        self._mutagen("sync", "flush", "bench")  # returns once a full cycle is done
        dt = time.monotonic() - t0
        self._problems("initial sync")
        return self.local, {"initial_sync_s": dt}

    def _problems(self, when):
        """Notes what Mutagen could not sync (conflicts, problems): the
        timings then cover less than the whole tree."""
        _, out = self._mutagen("sync", "list", "--template", "{{ json . }}", "bench")
        try:
            sessions = json.loads(out)
        except ValueError:
            return
        for sess in sessions if isinstance(sessions, list) else [sessions]:
            found = [k for k in ("conflicts",) if sess.get(k)]
            for side in ("alpha", "beta"):
                for k, v in (sess.get(side) or {}).items():
                    if k.endswith("Problems") and v:
                        found.append("%s %s" % (side, k))
            if found:
                self.b.notes.add("mutagen: %s %s r%d: %s" % (self.w.name, when, self.rep, ", ".join(found)))

    def sync_back(self):
        dt, _ = self._mutagen("sync", "flush", "bench")
        self._problems("sync back")
        return _r(dt)

    def down(self):
        if not getattr(self, "running", False):
            return None
        self.running = False
        try:
            self._mutagen("sync", "terminate", "bench")
        finally:
            run([self.binary, "daemon", "stop"], env=self.menv, timeout=60, check=False)
            for pid in pids_with_env("MUTAGEN_DATA_DIRECTORY", self.menv["MUTAGEN_DATA_DIRECTORY"]):
                try:
                    os.kill(pid, signal.SIGKILL)  # a daemon that did not stop
                except ProcessLookupError:
                    pass
        # Nothing is left to write: the sync back ran before (as for unison).
        return 0.0


def pids_with_env(name, value):
    """The processes whose environment has name=value."""
    want = ("%s=%s" % (name, value)).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if want in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


PEERS = {"rclone": RclonePeer, "unison": UnisonPeer, "mutagen": MutagenPeer}


# ---------------------------------------------------------------- the bench

class Bench:
    def __init__(self, a):
        self.a = a
        self.quick = a.quick
        self.work = os.path.abspath(a.work)
        self.H = os.path.join(self.work, "H")
        self.S = os.path.join(self.work, "S")
        self.cache = os.path.join(self.work, "cache")
        self.reps = a.reps or 3
        self.timeout = a.timeout or (90 if self.quick else 600)
        self.w2_count = a.w2_count or (5000 if self.quick else 100000)
        self.idle_s = 0.5 if self.quick else 3.0
        self.unmount_timeout = 90 if self.quick else 660
        self.cycle_errors = []  # errors outside the timed runs (setup, unmount, teardown)
        self.notes = set()
        self.extra = {}
        self.meta = {}
        self.results = {}  # row -> cfg -> {"samples": [...], ...}
        self.resources = {}  # cfg -> row -> [sampler results]
        self.idle = {}  # cfg -> [idle results]
        self.writeback = {}  # cfg -> row -> {"lag_s": [...], "exit_flush_s": [...]}
        self.errors = {}  # cfg -> row -> error
        self.fatal = set()  # (cfg, row) that failed other than by a timeout: not run again
        self.skipped = {}  # cfg -> reason
        self.plugin_bin = None
        self.consistent_via = "plugin"

    def go_env(self, goroot):
        env = dict(os.environ)
        for k in ("GOFLAGS", "GOPATH", "GO111MODULE", "GOWORK"):
            env.pop(k, None)
        env.update({"GOROOT": goroot, "GOTOOLCHAIN": "local", "GOFLAGS": "", "GOWORK": "off",
                    "GOCACHE": os.path.join(self.work, "gocache"), "GOTELEMETRY": "off",
                    "GOPROXY": "off", "GOENV": "off", "PATH": os.path.join(GOROOT_SRC, "bin") + ":" + env.get("PATH", "")})
        return env

    # ---- setup

    def setup(self):
        a = self.a
        if os.geteuid() != 0:
            raise BenchError("run as root: FUSE mounts, a private sshd, drop_caches")
        os.makedirs(self.work, exist_ok=True)
        os.makedirs(self.cache, exist_ok=True)
        for mp in mounts_under(self.work):
            log("left mounted by an earlier run: %s: unmounting" % mp)
            force_unmount(mp)
        for d in (self.H, os.path.join(self.work, "p"), os.path.join(self.work, "peers")):
            if os.path.exists(d):
                subprocess.run(["chattr", "-R", "-T", d], stderr=subprocess.DEVNULL)
                shutil.rmtree(d)
        os.makedirs(self.H)
        os.makedirs(os.path.join(self.work, "gocache"), exist_ok=True)
        rtt = getattr(a, "share_rtt_ms", 0.0)
        if rtt and not os.access(a.delayline, os.X_OK):
            raise BenchError("--share-rtt needs the delay line %r (make bin/delayline)" % a.delayline)
        self.share = SHARES[a.share](self.H, self.S, rtt, a.delayline)
        self.meta["share"] = SHARE_TEXT[a.share] + (", each round trip %g ms longer (contrib/delayline)" % rtt if rtt else "")
        self.meta["share_rtt_ms"] = rtt

        self.configs = [c for c in a.configs.split(",") if c]
        for c in self.configs:
            if c not in ALL_CONFIGS:
                raise BenchError("unknown configuration %r: valid are %s" % (c, ",".join(ALL_CONFIGS)))
        if "native" not in self.configs:
            self.configs.insert(0, "native")
        for c in self.configs:
            if c in PEERS and a.share != "sshfs":
                self.skipped[c] = "needs the sshfs share"
                log("%s: skipped: needs the sshfs share" % c)
            elif c in PEERS:
                why = PEERS[c].missing()
                if why:
                    self.skipped[c] = why
                    log("%s: skipped: %s" % (c, why))

        names = [w for w in a.workloads.split(",") if w]
        self.workloads = []
        w3 = None
        for n in names:
            if n == "W1":
                self.workloads.append(W1(self))
            elif n == "W2":
                self.workloads.append(W2(self))
            elif n == "W3":
                w3 = W3(self)
                self.workloads.append(w3)
            elif n == "W4":
                self.workloads.append(W4(self))
            elif n == "W5":
                self.workloads.append(W5(self))
            else:
                raise BenchError("unknown workload %r (W1..W5)" % n)
        self.w3rm = W3rm(self, w3) if w3 else None

        if any(c in PLUGIN_CONFIGS for c in self.configs):
            if not a.plugin or not os.access(a.plugin, os.X_OK):
                raise BenchError("plugin binary %r missing (make bin/bindstate)" % a.plugin)
            # our own copy: a rebuild by someone else mid-run changes nothing here
            self.plugin_bin = os.path.join(self.work, "bindstate")
            shutil.copy2(a.plugin, self.plugin_bin)
            _, v = run([self.plugin_bin, "version"], capture=True)
            self.meta["plugin_version"] = v.strip()

        self.meta.update({
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": git_describe(), "quick": self.quick, "reps": self.reps, "host": platform.node(),
            "kernel": platform.release(), "reclaim": proactive_reclaim(), "cpus": os.cpu_count(), "go": run(["go", "version"], capture=True)[1].strip(),
            "sshfs": run(["sshfs", "--version"], capture=True, check=False)[1].splitlines()[0:1],
            "w2": "%d x 1 KiB" % self.w2_count, "w3": "%d files in %d dirs" % (W3_DIRS * W3_FILES, W3_DIRS),
            "workloads": [w.name for w in self.workloads] + (["W3 rm"] if self.w3rm else []),
        })
        t0 = time.monotonic()
        for w in self.workloads:
            w.prepare()
            for c in self.configs:
                if c not in self.skipped and not (c in READONLY_CONFIGS and w.writes):
                    w.prepare_config(c)
        log("prepared H in %.1f s" % (time.monotonic() - t0))
        self.share.up()
        self.meta["share_op_ms"] = share_op_ms(self.S)
        log("share: one request (lstat of a missing name) takes %.3f ms (median; min %.3f)"
            % (self.meta["share_op_ms"]["median"], self.meta["share_op_ms"]["min"]))
        self.probe()

    def probe(self):
        """Checks once that the plugin serves each state before timing it, so
        that a plugin that does not work yet costs seconds, not minutes."""
        want = [c for c in self.configs if c in PLUGIN_CONFIGS]
        if not want:
            return
        rel = self.workloads[0].rel("native") if self.workloads else "."
        p = Plugin(self.plugin_bin, self.work, self.work, "probe")
        try:
            p.start()
            for c in want:
                name = "probe-" + c
                try:
                    mp, _ = p.volume(name, os.path.normpath(os.path.join(self.S, rel)), c)
                    os.listdir(mp)
                    p.unmount(name)
                    p.call("VolumeDriver.Remove", {"Name": name})
                except (OSError, BenchError) as e:
                    if c == "consistent":
                        self.consistent_via = "share (plugin failed: %s)" % str(e)[:200]
                        log("consistent: the plugin cannot serve it (%s): measuring the share directly" % e)
                    else:
                        self.skipped[c] = "plugin cannot serve it: %s" % str(e)[:300]
                        log("%s: skipped: %s" % (c, e))
        except (OSError, BenchError) as e:
            log("plugin does not start: %s" % e)
            for c in want:
                if c == "consistent":
                    self.consistent_via = "share (plugin failed to start)"
                else:
                    self.skipped[c] = "plugin does not start: %s" % str(e)[:300]
        finally:
            p.stop()
        self.meta["consistent_via"] = self.consistent_via

    # ---- recording

    def record(self, row, cfg, res, extra=None):
        r = self.results.setdefault(row, {}).setdefault(cfg, {"samples": []})
        r["samples"].append(round(res["s"], 4))
        for k, v in res.items():
            if k != "s":
                r.setdefault(k, []).append(v)

    def error(self, row, cfg, msg, rep=None, transient=False):
        """Records a failed run. A transient failure (a timeout) counts
        against its repetition only: the row's other repetitions still run,
        and the report gives their median with how many were ok. Any other
        failure (a wrong result) ends the row."""
        per = self.errors.setdefault(cfg, {})
        if rep is not None:
            msg = "r%d: %s" % (rep, msg)
        per[row] = per[row] + "; " + msg if row in per else msg
        if not transient:
            self.fatal.add((cfg, row))
        log("ERROR %s %s: %s" % (cfg, row, msg))

    def failed(self, cfg, row):
        """Whether row in cfg failed for good (not worth running again)."""
        return (cfg, row) in self.fatal

    # ---- cycles

    def cycle(self, w, cfg, rep):
        """One repetition of workload w in configuration cfg: every variant
        (cold first) in one fresh mount, volume or replica."""
        rows = [(w.name + " " + v).strip() for v in w.variants]
        if all(self.failed(cfg, r) for r in rows):
            return  # failed before: do not pay for it again
        rel = w.rel(cfg)
        plugin, vol, peer = None, None, None
        wb = lambda row: self.writeback.setdefault(cfg, {}).setdefault(row, {})  # noqa: E731
        try:
            if cfg == "native":
                target = os.path.join(self.H, rel)
            elif cfg in PLUGIN_CONFIGS:
                if w.remount_share:
                    self.share.remount()
                if cfg == "consistent" and self.consistent_via != "plugin":
                    target = os.path.join(self.S, rel)
                else:
                    plugin = Plugin(self.plugin_bin, self.work, self.work, "%s-%s-r%d" % (cfg, w.name.replace(" ", ""), rep),
                                    fuse_debug=self.a.fuse_debug, cpu_profile=self.a.cpu_profile)
                    plugin.start()
                    vol = "%s-%s-r%d" % (cfg, w.name.replace(" ", "").lower(), rep)
                    target, mount_s = plugin.volume(vol, os.path.join(self.S, rel), cfg)
                    wb(w.name).setdefault("mount_s", []).append(_r(mount_s))
                    if not self.quick or rep == 1:
                        self.idle.setdefault(cfg, []).append(dict(idle(plugin.pid, self.idle_s), when="after mount", workload=w.name))
            else:
                peer = PEERS[cfg](self, w, rel, rep)
                target, info = peer.up()
                for k, v in info.items():
                    wb(w.name).setdefault(k, []).append(_r(v))
            failed_now = set()  # rows whose run failed in this repetition
            for v, row in zip(w.variants, rows):
                if self.failed(cfg, row):
                    continue
                if v in ("cold", ""):
                    drop_caches()
                try:
                    with Sampler(plugin.pid if plugin else None) as s:
                        res = w.run(target, cfg, rep, v)
                except BenchError as e:
                    transient = isinstance(e, Timeout)
                    self.error(row, cfg, str(e), rep=rep, transient=transient)
                    failed_now.add(row)
                    if v == "cold":
                        for r2 in rows[1:]:
                            self.error(r2, cfg, "skipped: the cold run failed", rep=rep, transient=transient)
                            failed_now.add(r2)
                    break
                self.record(row, cfg, res)
                if s.result:
                    self.resources.setdefault(cfg, {}).setdefault(row, []).append(s.result)
                log("%-10s %-8s r%d %7.3f s" % (cfg, row, rep, res["s"]))
                if w.writes and v in ("cold", "") and cfg != "native":
                    if peer and peer.sync_back:
                        lag = peer.sync_back()  # the user runs the sync: that is the lag
                    else:
                        lag = self.wait_landed(w, cfg, rep, v, limit=60 if cfg == "consistent" else 600)
                    wb(row).setdefault("lag_s", []).append(lag)
                    if lag is None or lag > 0.5:
                        log("%-10s %-8s r%d writeback lag %s s" % (cfg, row, rep, lag))
            last = rows[-1]
            if plugin:
                if not self.quick or rep == 1:
                    self.idle.setdefault(cfg, []).append(dict(idle(plugin.pid, self.idle_s), when="after workload", workload=w.name))
                st = plugin.status(vol)
                t = plugin.unmount(vol, timeout=self.unmount_timeout)
                wb(last).setdefault("exit_flush_s", []).append(_r(t))
                if st:
                    per_run, per_volume = split_status(st)
                    wb(last).setdefault("status_before_unmount", []).append(per_run)
                    self.meta.setdefault("volume_status", {}).setdefault(cfg, per_volume)
            elif peer:
                if peer.sync_back and w.writes and len(w.variants) > 1:
                    wb(last).setdefault("lag_s", []).append(peer.sync_back())
                t = peer.down()
                peer = None
                wb(last).setdefault("exit_flush_s", []).append(_r(t))
            # A last run that failed (a timeout: the share stalled) never
            # wrote all its data: that is its error, not a loss to report.
            finished = last not in failed_now
            if (plugin or cfg in PEER_CONFIGS) and w.writes and finished and not w.landed(cfg, rep, w.variants[-1]):
                lag = self.wait_landed(w, cfg, rep, w.variants[-1], limit=30 if peer else 120)
                wb(last).setdefault("after_unmount_lag_s", []).append(lag)
                if lag is None:
                    self.cycle_errors.append({"config": cfg, "workload": w.name, "rep": rep,
                                              "error": "the last run's data never reached H (waited %d s after unmount)" % (30 if peer else 120)})
            if plugin:
                plugin.call("VolumeDriver.Remove", {"Name": vol})
        except (OSError, BenchError) as e:
            msg = "%s%s" % (e, (" | plugin log: " + plugin.log_tail(400)) if plugin else "")
            if not any(r in self.results and cfg in self.results[r] and len(self.results[r][cfg]["samples"]) >= rep
                       for r in rows):
                for r in rows:  # nothing was measured: the rows failed
                    if not self.failed(cfg, r):
                        self.error(r, cfg, msg, rep=rep, transient=isinstance(e, Timeout))
            else:
                self.cycle_errors.append({"config": cfg, "workload": w.name, "rep": rep, "error": msg[:2000]})
                log("ERROR %s %s r%d (after the runs): %s" % (cfg, w.name, rep, msg[:500]))
        finally:
            if plugin:
                plugin.stop()
            if peer:
                try:
                    peer.down()
                except (OSError, BenchError) as e:
                    log("%s: down: %s" % (cfg, e))
            if hasattr(w, "after_cycle"):
                w.after_cycle(cfg, rep)

    def wait_landed(self, w, cfg, rep, v, limit=600):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if w.landed(cfg, rep, v):
                return _r(time.monotonic() - t0)
            time.sleep(0.02)
        return None

    # ---- main loop

    def run_all(self):
        configs = [c for c in self.configs if c not in self.skipped]
        pw = self.a.peer_workloads.split(",")
        for w in self.workloads + ([self.w3rm] if self.w3rm else []):
            for rep in range(1, self.reps + 1):
                for cfg in configs:
                    if cfg in READONLY_CONFIGS and w.writes:
                        self.notes.add("%s: %s not run (it writes; the volume is read-only)" % (cfg, w.name))
                        continue
                    if cfg in PEER_CONFIGS and w.name.split()[0] not in pw:
                        self.notes.add("%s: %s not run (--peer-workloads %s)" % (cfg, w.name, self.a.peer_workloads))
                        continue
                    self.cycle(w, cfg, rep)

    def extras(self):
        """BENCH.md "Also reported": a 100k-file source (mount, first access,
        a full walk with the plugin's RSS, idle CPU while serving it, and
        `docker run` to the first process with it mounted), and the exit
        flush of ~100 MB in small files against `cp -r` to the share."""
        states = [c for c in ("cached", "delegated") if c in self.configs and c not in self.skipped]
        if not states:
            return
        parts = self.a.extras_only.split(",") if self.a.extras_only else EXTRAS
        if "big" in parts:
            self.extra_big(states)
        if "run" in parts:
            self.extra_run(states)
        if "flush" in parts and "delegated" in states:
            self.extra_flush()

    def extra_big(self, states):
        """A 100k-file source: mount and first stat, a full walk, idle CPU."""
        ex = self.extra
        log("extras: 100k-file source")
        big = os.path.join(self.H, "big")
        tar = small_files_tar(self.cache, W3_DIRS, W3_FILES, 100, 4000)
        for i in range(5):
            os.makedirs(os.path.join(big, "p%d" % i))
            run(["tar", "-xf", tar, "-C", os.path.join(big, "p%d" % i)], timeout=600)
        ex["big_files"] = count_files(big)
        drop_caches()
        ex["big_walk_native_s"] = _r(run(["find", big, "-type", "f"], timeout=600)[0])
        for st in states:
            self.share.remount()
            p = Plugin(self.plugin_bin, self.work, self.work, "big-" + st)
            e = ex.setdefault(st, {})
            try:
                p.start()
                with Sampler(p.pid) as smp:
                    t0 = time.monotonic()
                    mp, _ = p.volume("big", os.path.join(self.S, "big"), st)
                    e["mount_s"] = _r(time.monotonic() - t0)
                    os.stat(os.path.join(mp, "p4", "d199", "f099.js"))
                    e["mount_and_first_stat_s"] = _r(time.monotonic() - t0)
                e["mount_plugin"] = smp.result
                drop_caches()
                with Sampler(p.pid) as smp:
                    e["walk_s"] = _r(run(["find", mp, "-type", "f"], timeout=1800)[0])
                e["walk_plugin"] = smp.result
                e["walk_ratio"] = _r(e["walk_s"] / ex["big_walk_native_s"]) if ex["big_walk_native_s"] else None
                e["idle_serving"] = idle(p.pid, 10 if not self.quick else 2)
                p.unmount("big", timeout=self.unmount_timeout)
            except (OSError, BenchError) as err:
                e["error"] = str(err)[:500]
                log("extras %s 100k: %s" % (st, err))
            finally:
                p.stop()
            log("extras %s 100k: %s" % (st, e))

    def extra_run(self, states):
        """`docker run` to the first process for the 100k-file source of
        extra_big: a private dockerd with the managed plugin, made and timed
        by contrib/bench/dockerrun (Go: it reuses the integration harness)."""
        ex = self.extra
        big = os.path.join(self.H, "big")
        if not os.path.isdir(big):
            ex["docker_run"] = {"error": "no 100k-file source: run the big extra first"}
            return
        log("extras: docker run to the first process, 100k-file source")
        helper = os.path.join(self.work, "dockerrun")
        try:
            # It is also the container's first process: static.
            run([os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go", "build", "-mod=vendor",
                 "-trimpath", "-o", helper, "./contrib/bench/dockerrun"],
                cwd=REPO, env=dict(os.environ, CGO_ENABLED="0"), timeout=600)
            _, out = run([helper, "-source", os.path.join(self.S, "big"), "-native", big, "-states", ",".join(states),
                          "-runs", str(3 if not self.quick else 1)], cwd=REPO, timeout=1200, capture=True)
            ex["docker_run"] = json.loads(out)
        except (OSError, BenchError, ValueError) as err:
            ex["docker_run"] = {"error": str(err)[:500]}
        log("extras docker run: %s" % json.dumps(ex["docker_run"])[:400])

    def extra_flush(self):
        """The exit flush of ~100 MB in small files against `cp -r` to the share."""
        ex = self.extra
        log("extras: exit flush of 100 MB in small files")
        ftar = small_files_tar(self.cache, 200, 100, 2000, 8000)  # ~100 MB
        src = os.path.join(self.work, "flush-src")
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        run(["tar", "-xf", ftar, "-C", src], timeout=600)
        nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs)
        e = ex.setdefault("exit_flush", {"bytes": nbytes, "files": count_files(src)})
        os.makedirs(os.path.join(self.H, "flush", "cp"))
        os.makedirs(os.path.join(self.H, "flush", "delegated"))
        self.share.remount()
        t0 = time.monotonic()
        run(["cp", "-r", src, os.path.join(self.S, "flush", "cp", "t")], timeout=3600)
        run(["sync"], timeout=600)
        e["cp_r_to_share_s"] = _r(time.monotonic() - t0)
        p = Plugin(self.plugin_bin, self.work, self.work, "flush-delegated")
        try:
            p.start()
            mp, _ = p.volume("flush", os.path.join(self.S, "flush", "delegated"), "delegated")
            e["cp_r_into_delegated_s"] = _r(run(["cp", "-r", src, os.path.join(mp, "t")], timeout=3600)[0])
            with Sampler(p.pid) as smp:
                e["exit_flush_s"] = _r(p.unmount("flush", timeout=3600))
            e["exit_flush_plugin"] = smp.result
            t0 = time.monotonic()
            while count_files(os.path.join(self.H, "flush", "delegated", "t")) < e["files"] and time.monotonic() - t0 < 120:
                time.sleep(0.5)
            e["on_host_after_unmount"] = count_files(os.path.join(self.H, "flush", "delegated", "t"))
            e["throughput_vs_cp"] = _r(e["cp_r_to_share_s"] / e["exit_flush_s"]) if e["exit_flush_s"] else None
        except (OSError, BenchError) as err:
            e["error"] = str(err)[:500]
        finally:
            p.stop()
        log("extras exit flush: %s" % e)

    def teardown(self):
        for peer in PEERS.values():
            if hasattr(peer, "cleanup"):
                peer.cleanup()
        if getattr(self, "share", None):
            try:
                self.share.down()
            except Exception as e:  # noqa: BLE001
                log("share down: %s" % e)
        for mp in mounts_under(self.work):
            force_unmount(mp)

    def result(self):
        return {"meta": self.meta, "configs": self.configs, "skipped": self.skipped, "results": self.results,
                "resources": self.resources, "idle": self.idle, "writeback": self.writeback, "errors": self.errors,
                "cycle_errors": self.cycle_errors, "notes": sorted(self.notes), "extra": self.extra}


def proactive_reclaim(root="/sys/kernel/mm/damon/admin/kdamonds"):
    """Says whether the kernel reclaims cold page cache on its own (a DAMON
    "pageout" scheme, as some VM platforms run to hand memory back), which
    makes "hot" less hot: files not read for a few seconds go back to disk,
    and so do the store's and the share's. Results on such a host vary more,
    and creates that need inode tables from disk cost up to ~1 ms each."""
    found = []
    try:
        for k in sorted(os.listdir(root)):
            kd = os.path.join(root, k)
            if not os.path.isdir(kd):
                continue
            with open(os.path.join(kd, "state")) as f:
                if f.read().strip() != "on":
                    continue
            for dirpath, _, files in os.walk(os.path.join(kd, "contexts")):
                if os.path.basename(os.path.dirname(dirpath)) == "schemes" and "action" in files:
                    with open(os.path.join(dirpath, "action")) as f:
                        if f.read().strip() == "pageout":
                            found.append("DAMON pageout (kdamond %s)" % k)
    except OSError:
        pass
    return ", ".join(found) or "none"


def git_describe():
    try:
        _, out = run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture=True)
        return out.strip()
    except BenchError:
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="W1 and W2 only, small tree, under 3 min")
    ap.add_argument("--work", default=os.path.join(REPO, "_build", "bench"), help="scratch dir (ext4)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench-results"), help="results dir")
    ap.add_argument("--plugin", default=os.path.join(REPO, "bin", "bindstate"), help="plugin binary")
    ap.add_argument("--mutagen", default=MutagenPeer.binary, help="Mutagen binary, the agents' bundle beside it "
                    "(contrib/bench/mutagen.sh builds both)")
    ap.add_argument("--configs", default=None, help="comma-separated, default: all (%s); quick: %s" % (",".join(ALL_CONFIGS), ",".join(CORE_CONFIGS)))
    ap.add_argument("--workloads", default=None, help="comma-separated, default W1,W2,W3,W4,W5 (quick: W1,W2)")
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 3)")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per workload run")
    ap.add_argument("--w2-count", type=int, default=0, help="W2 size in KiB (default 100000, quick 5000)")
    ap.add_argument("--peer-workloads", default="W1,W2,W3,W4,W5", help="workloads the peers run (default all)")
    ap.add_argument("--extras", action="store_true", default=None,
                    help="also the 100k-file source and the exit flush of 100 MB (default: on in a full run)")
    ap.add_argument("--no-extras", dest="extras", action="store_false")
    ap.add_argument("--extras-only", default="", metavar="PARTS",
                    help="run no workload, only these extras: big (100k-file source), run (docker run to the "
                         "first process on it, after big), flush (exit flush); comma-separated")
    ap.add_argument("--cpu-profile", action="store_true",
                    help="have each plugin write a Go CPU profile, WORK/p/NNN-TAG/cpu.pprof (go tool pprof)")
    ap.add_argument("--fuse-debug", action="store_true", help="run the plugin with FUSE_DEBUG=true (slow)")
    ap.add_argument("--share", choices=sorted(SHARES), default="sshfs",
                    help="the source: sshfs (the slow share, default) or local (a kernel file system; no peers)")
    ap.add_argument("--share-rtt", default="0", metavar="MS[,MS...]",
                    help="milliseconds added to every round trip to the share (contrib/delayline); several values: "
                         "one run per value and a combined report of how each state scales (default stem bench-rtt)")
    ap.add_argument("--delayline", default=os.path.join(REPO, "bin", "delayline"),
                    help="the delay line binary for --share-rtt (make bin/delayline)")
    ap.add_argument("--name", default=None, help="results file stem (default bench or bench-quick)")
    a = ap.parse_args(argv)
    try:
        rtts = [float(x) for x in a.share_rtt.split(",") if x.strip()]
    except ValueError:
        raise BenchError("--share-rtt %r: want milliseconds, comma separated, e.g. 0,0.5,2" % a.share_rtt)
    if not rtts or any(r < 0 for r in rtts):
        raise BenchError("--share-rtt %r: want milliseconds >= 0, comma separated, e.g. 0,0.5,2" % a.share_rtt)
    if a.configs is None:
        # quick: bindstate against native and the share only; the peers
        # (rclone waits out its writeback, unison its initial sync) are in
        # the full run
        a.configs = ",".join(CORE_CONFIGS if a.quick else ALL_CONFIGS)
    if a.workloads is None:
        a.workloads = "W1,W2" if a.quick else "W1,W2,W4,W5,W3"
    MutagenPeer.binary = os.path.abspath(a.mutagen)
    if len(rtts) > 1:
        return sweep_rtt(a, rtts)
    a.share_rtt_ms = rtts[0]
    stem = a.name or ("bench-quick" if a.quick else "bench")
    res = run_bench(a)
    os.makedirs(a.out, exist_ok=True)
    paths = report.write_all(res, a.out, stem)
    print(report.markdown(res))
    log("wrote %s" % ", ".join(paths))
    return 0


def sweep_rtt(a, rtts):
    """One run per added round trip (BENCH.md: how each state scales with
    the share's latency), then one report of them all."""
    if a.extras_only:
        raise BenchError("--extras-only measures no workload: give it one --share-rtt value")
    if a.extras is None:
        a.extras = False  # the extras do not depend on the latency: not repeated per value
    runs = []
    t0 = time.monotonic()
    for rtt in rtts:
        log("=== share round trips %g ms longer" % rtt)
        a.share_rtt_ms = rtt
        runs.append(run_bench(a))
        if getattr(a, "interrupted", False):
            break
    res = {"sweep": "share_rtt_ms", "runs": runs, "wall_s": round(time.monotonic() - t0, 1)}
    os.makedirs(a.out, exist_ok=True)
    paths = report.write_sweep(res, a.out, a.name or "bench-rtt")
    print(report.sweep_markdown(res))
    log("wrote %s" % ", ".join(paths))
    return 0


def run_bench(a):
    """One whole run (setup, workloads, extras, teardown): its result."""
    b = Bench(a)
    t0 = time.monotonic()
    try:
        b.setup()
        if a.extras_only:
            bad = set(a.extras_only.split(",")) - set(EXTRAS)
            if bad:
                raise BenchError("unknown extras %s: valid are %s" % (",".join(sorted(bad)), ", ".join(EXTRAS)))
        else:
            b.run_all()
        if a.extras_only or a.extras or (a.extras is None and not a.quick and "W3" in a.workloads):
            b.extras()
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
        a.interrupted = True  # a sweep stops here too
    finally:
        b.teardown()
    res = b.result()
    res["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
    return res


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log("error: %s" % e)
        sys.exit(1)
