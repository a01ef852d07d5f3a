#!/usr/bin/env bash
# Install the Debian packages bindstate needs to build, test, demo and
# benchmark. Idempotent: checks first, runs `apt-get update` once and only if
# something is missing, and says nothing when everything is there.
#
#   contrib/install-deps.sh            install what is missing (as root)
#   contrib/install-deps.sh --check    list what is missing; exit 1 if anything is
#   contrib/install-deps.sh --bench    also the benchmark's peers (make bench)
#
# Go itself is not installed here: it is expected at /usr/local/go (or on PATH).
set -euo pipefail

# package            what for
PACKAGES=(
  fuse3              # fusermount3, /etc/fuse.conf: the FUSE states
  sshfs              # the slow share of the tests and the benchmark
  openssh-server     # sshd on loopback behind that share
  openssh-client     # ssh, ssh-keygen
  busybox-static     # the demo's and the tests' container image (docker import)
  docker.io          # dockerd + docker CLI (skipped if a Docker engine is already installed)
  containerd         # (idem)
  runc               # (idem)
  libseccomp-dev     # building a newer runc for the patched engine
  pkg-config         # (idem)
  attr               # getfattr/setfattr in tests
  e2fsprogs          # mkfs.ext4 for small loop file systems (disk-full tests)
  util-linux         # mount, losetup, nsenter, findmnt
  iproute2           # ip netns for test hosts
  rsync              # benchmark peer
  git                # VERSION, benchmark workloads
  jq                 # scripts reading `docker ... inspect`
  python3-matplotlib # the benchmark chart
)

# what a user would pick instead, measured side by side by `make bench`
BENCH_PACKAGES=(
  rclone             # rclone mount --vfs-cache-mode full
  unison             # two-way sync
  postgresql         # W5, the import into a database on the mount (Debian may
                     # make and start its own main cluster; the benchmark uses
                     # data directories, a socket directory and a port of its own)
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  --bench) PACKAGES+=("${BENCH_PACKAGES[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--check|--bench]" >&2; exit 2 ;;
esac

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

# A Docker engine from another source (docker-ce, containerd.io) conflicts
# with Debian's docker.io: if the commands are there, keep what the user has.
have_engine() {
  case "$1" in
    docker.io)  command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 ;;
    containerd) command -v containerd >/dev/null 2>&1 ;;
    runc)       command -v runc >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || have_engine "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$check_only" = 1 ]; then
  echo "missing: ${missing[*]}"
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get here; install these by hand: ${missing[*]}" >&2
  exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: run as root (or install sudo); missing: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Another apt run (a colleague's, unattended-upgrades) may hold the locks:
# dpkg's lock is waited for; the lists' lock is retried.
for try in 1 2 3 4 5; do
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq && break
  [ "$try" = 5 ] && { echo "install-deps: apt-get update failed" >&2; exit 1; }
  sleep 10
done
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

still=()
for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
if [ "${#still[@]}" -ne 0 ]; then
  echo "install-deps: still missing after apt-get install: ${still[*]}" >&2
  exit 1
fi
echo "install-deps: done"
