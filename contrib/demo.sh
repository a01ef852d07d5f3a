#!/usr/bin/env bash
# The bindstate tour: `make demo` (this script) and `make demo-clean`
# (this script with the argument `clean`).
#
# It builds the plugin, installs what is missing, installs the plugin into a
# Docker daemon, serves one sample folder per state (consistent, cached,
# delegated) to a running container, and shows where each write lands.
#
# Daemon: the one DOCKER_HOST names (or the default socket) if it answers;
# otherwise, or with DEMO_PRIVATE_DAEMON=1, a private dockerd of its own
# (own data root, exec root, socket, pidfile and config file; no bridge, no
# iptables, vfs storage) that is left running for you to explore and that
# `make demo-clean` stops.
#
# Everything made is recorded in $DEMO_HOME/demo.env; `clean` removes exactly
# that (and only what the demo itself created).
#
# Settings (environment):
#   DEMO_PRIVATE_DAEMON=1   always start a private daemon
#   DEMO_HOME               sample folders, private daemon data (default /var/tmp/bindstate-demo)
#   DEMO_RUN                private daemon socket, pidfile, exec root (default /run/bindstate-demo)
#   PLUGIN                  plugin name (default bindstate)
#   NO_COLOR=1              plain output
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEMO_HOME=${DEMO_HOME:-/var/tmp/bindstate-demo}
DEMO_RUN=${DEMO_RUN:-/run/bindstate-demo}
RECORD=$DEMO_HOME/demo.env
PLUGIN=${PLUGIN:-bindstate}
IMAGE=bindstate-demo-busybox
LABEL=io.bindstate.demo
SHARE=$DEMO_HOME/share
STATES=(consistent cached delegated readonly)
PRIVATE_SOCK=$DEMO_RUN/docker.sock
PRIVATE_PID=$DEMO_RUN/dockerd.pid
PRIVATE_DATA=$DEMO_HOME/daemon
PRIVATE_EXEC=$DEMO_RUN/exec
PRIVATE_LOG=$DEMO_HOME/dockerd.log
PRIVATE_CONF=$DEMO_HOME/daemon.json

case ":$PATH:" in *:/usr/local/go/bin:*) ;; *) PATH=$PATH:/usr/local/go/bin ;; esac
export PATH

# ---------------------------------------------------------------- output
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  B=$'\e[1m' D=$'\e[2m' G=$'\e[32m' Y=$'\e[33m' R=$'\e[31m' C=$'\e[36m' N=$'\e[0m'
else
  B='' D='' G='' Y='' R='' C='' N=''
fi
STEP=0
step() { STEP=$((STEP + 1)); printf '\n%s== %d. %s%s\n' "$B" "$STEP" "$*" "$N"; }
say() { printf '%s\n' "$*"; }
look() { printf '%s   look: %s%s\n' "$C" "$*" "$N"; }
ok() { printf '%s   ok: %s%s\n' "$G" "$*" "$N"; }
warn() { printf '%s   !! %s%s\n' "$Y" "$*" "$N"; }
bad() { printf '%s   FAILED: %s%s\n' "$R" "$*" "$N"; }
die() { printf '%sdemo: %s%s\n' "$R" "$*" "$N" >&2; exit 1; }
# shown CMD...: the command as one would type it (dk is shown as docker).
shown() {
  local out='' a
  for a in "$@"; do
    [ "$a" = dk ] && [ -z "$out" ] && a=docker
    if [[ $a =~ ^[A-Za-z0-9_./:=,@+%{}-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
  done
  printf '%s' "${out# }"
}
# run CMD...: show the command, then run it with its output indented.
# (pipefail: the command's status, not sed's)
run() {
  printf '%s   $ %s%s\n' "$D" "$(shown "$@")" "$N"
  "$@" 2>&1 | sed 's/^/     /'
}
# hostshow SHELL-CMD: a command on the host (not in a container).
hostshow() { printf '%s   host$ %s%s\n' "$D" "$1" "$N"; sh -c "$1" 2>&1 | sed 's/^/     /'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

record() { mkdir -p "$DEMO_HOME"; printf '%s=%q\n' "$1" "$2" >>"$RECORD"; }

need_root() {
  [ "$(id -u)" = 0 ] || die "run as root (the plugin install, FUSE and a private daemon need it): sudo make ${1:-demo}"
}

dk() { timeout 120 docker "$@"; }

# ---------------------------------------------------------------- daemon
daemon_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

start_private_daemon() {
  say "Starting a private dockerd: it has its own data root, exec root, socket and"
  say "config file, so whatever daemon this machine runs is left alone."
  command -v dockerd >/dev/null || die "dockerd not found (contrib/install-deps.sh installs docker.io)"
  mkdir -p "$PRIVATE_DATA" "$PRIVATE_EXEC"
  chmod 700 "$DEMO_RUN"
  # An empty config file of its own: the system's /etc/docker/daemon.json
  # (data root, storage driver) must not be read.
  echo '{}' >"$PRIVATE_CONF"
  local args=(--config-file "$PRIVATE_CONF" --data-root "$PRIVATE_DATA" --exec-root "$PRIVATE_EXEC"
    -H "unix://$PRIVATE_SOCK" --pidfile "$PRIVATE_PID"
    --bridge=none --iptables=false --ip6tables=false --storage-driver vfs)
  printf '%s   $ dockerd %s &%s\n' "$D" "${args[*]}" "$N"
  setsid dockerd "${args[@]}" </dev/null >"$PRIVATE_LOG" 2>&1 &
  local pid=$!
  record PRIVATE_DAEMON 1
  PRIVATE_LOG_HINT=" ($PRIVATE_LOG)"
  record DAEMON_PID "$pid"
  record DEMO_DOCKER_HOST "unix://$PRIVATE_SOCK"
  export DOCKER_HOST=unix://$PRIVATE_SOCK
  local i
  for ((i = 0; i < 120; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$PRIVATE_LOG" | sed 's/^/     /'
      die "the private dockerd exited (log: $PRIVATE_LOG)"
    fi
    daemon_answers && break
    sleep 0.5
  done
  daemon_answers || die "the private dockerd did not answer within 60 s (log: $PRIVATE_LOG)"
  if [ -s "$PRIVATE_PID" ] && [ "$(cat "$PRIVATE_PID")" != "$pid" ]; then
    pid=$(cat "$PRIVATE_PID")
    record DAEMON_PID "$pid"
  fi
  ok "private dockerd $(docker version --format '{{.Server.Version}}') running, PID $pid, log $PRIVATE_LOG"
}

choose_daemon() {
  if [ "${DEMO_PRIVATE_DAEMON:-0}" = 1 ]; then
    say "DEMO_PRIVATE_DAEMON=1: not looking for another daemon."
    start_private_daemon
  elif daemon_answers; then
    local v
    v=$(docker version --format '{{.Server.Version}}')
    ok "using the daemon at ${DOCKER_HOST:-the default socket} (Docker $v)"
    say "(DEMO_PRIVATE_DAEMON=1 would start a private one instead.)"
    record PRIVATE_DAEMON 0
    record DEMO_DOCKER_HOST "${DOCKER_HOST:-}"
  else
    say "No daemon answers at ${DOCKER_HOST:-the default socket}."
    start_private_daemon
  fi
}

# ---------------------------------------------------------------- image
make_image() {
  if dk image inspect "$IMAGE" >/dev/null 2>&1; then
    ok "image $IMAGE is already there"
    return
  fi
  say "No registry is needed: the image is busybox-static's one binary, imported"
  say "from a tar stream."
  local rootfs=$DEMO_HOME/image-rootfs bb
  bb=$(command -v busybox || true)
  [ -n "$bb" ] || die "busybox not found (contrib/install-deps.sh installs busybox-static)"
  rm -rf "$rootfs"
  mkdir -p "$rootfs"/{bin,etc,tmp,data}
  cp "$bb" "$rootfs/bin/busybox"
  for a in $("$rootfs/bin/busybox" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$rootfs/bin/$a"
  done
  printf 'root:x:0:0:root:/:/bin/sh\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\n' >"$rootfs/etc/group"
  printf '%s   $ tar -C %s -c . | docker import -c "ENV PATH=/bin" - %s%s\n' "$D" "$rootfs" "$IMAGE" "$N"
  tar -C "$rootfs" -c . | dk import -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null
  record IMAGE_CREATED 1
  rm -rf "$rootfs"
  ok "image $IMAGE made"
}

# ---------------------------------------------------------------- plugin
install_plugin() {
  if dk plugin inspect "$PLUGIN" >/dev/null 2>&1; then
    warn "a plugin named $PLUGIN is already installed in this daemon: using it as it is"
    say "(the demo will not replace or remove it; \`make plugin\` replaces it with this build)"
    if [ "$(docker plugin inspect -f '{{.Enabled}}' "$PLUGIN")" != true ]; then
      run dk plugin enable "$PLUGIN" || die "could not enable $PLUGIN"
    fi
    return
  fi
  say "A managed plugin is a config.json plus a root file system. Ours holds one"
  say "static binary (/bindstate); config.json asks for CAP_SYS_ADMIN, /dev/fuse,"
  say "the host's / at /host (to reach your folders) and a propagated mount"
  say "/mnt/volumes (where it mounts volumes, visible to containers)."
  run dk plugin create "$PLUGIN" "$ROOT/_build/plugin" || die "docker plugin create failed"
  record PLUGIN_CREATED 1
  if ! run dk plugin enable --timeout 60 "$PLUGIN"; then
    die "docker plugin enable failed: the plugin's own messages are in the daemon's log${PRIVATE_LOG_HINT:-}"
  fi
  run docker plugin ls
  look "docker plugin inspect $PLUGIN   shows its settings (docker plugin set $PLUGIN ALLOWED_ROOTS=...)"
}

# ---------------------------------------------------------------- helpers
ctr() { echo "bindstate-demo-$1"; }
vol() { echo "demo-$1"; }
# inside STATE CMD: run a shell command in that state's container.
inside() {
  local st=$1
  shift
  printf '%s   container$ %s%s\n' "$D" "$*" "$N"
  timeout 60 docker exec "$(ctr "$st")" sh -c "$*" 2>&1 | sed 's/^/     /'
}
# wait_for SECONDS TEST...: poll until TEST succeeds; prints how long it took.
wait_for() {
  local limit=$1 t0 t
  shift
  t0=$(now_ms)
  while :; do
    if "$@" >/dev/null 2>&1; then
      t=$(($(now_ms) - t0))
      WAITED="${t} ms"
      return 0
    fi
    if (($(now_ms) - t0 > limit * 1000)); then
      WAITED="more than ${limit} s"
      return 1
    fi
    sleep 0.1
  done
}
host_has() { [ -f "$1" ] && grep -qF "$2" "$1"; }
ctr_has() { timeout 10 docker exec "$(ctr "$1")" grep -qF "$3" "/data/$2"; }
# host_edit_arrives NAME SECONDS: an edit on the host, and the time it took
# to reach NAME's container (at most SECONDS).
host_edit_arrives() {
  local st=$1 limit=$2
  hostshow "echo 'edited on the host' > $SHARE/$st/from-host.txt"
  if wait_for "$limit" ctr_has "$st" from-host.txt 'edited on the host'; then
    inside "$st" 'cat /data/from-host.txt'
    ok "the host's edit reached the container after $WAITED"
  else
    bad "the host's edit did not reach the container within $limit s"; return 1
  fi
}

# make_volume_and_container NAME [OPTION...]: a sample folder, a volume of it
# (state NAME, or the -o options given) and a container using it.
make_volume_and_container() {
  local st=$1 src=$SHARE/$1
  shift
  local opts=("$@")
  [ "${#opts[@]}" -ne 0 ] || opts=(-o state="$st")
  mkdir -p "$src/src"
  printf 'This folder is served to a container by the %s volume.\n' "$st" >"$src/README.txt"
  printf 'package main\n\nfunc main() {}\n' >"$src/src/main.go"
  run dk volume create -d "$PLUGIN" -o source="$src" "${opts[@]}" "$(vol "$st")" || return 1
  record VOLUME "$(vol "$st")"
  run dk run -d --name "$(ctr "$st")" --label "$LABEL=1" --network none -v "$(vol "$st")":/data -w /data \
    "$IMAGE" sh -c 'trap "exit 0" TERM; while :; do sleep 1; done' || return 1
  inside "$st" 'ls -l /data /data/src' || return 1
}

# ---------------------------------------------------------------- the story
tour_consistent() {
  step "consistent: a plain bind mount"
  say "The container sees the host folder itself: no copy, no FUSE, no plugin code"
  say "on the data path. Every write is on the host the moment it is made."
  make_volume_and_container consistent || return 1
  local f=$SHARE/consistent
  inside consistent 'echo "written in the container" > /data/hello.txt' || return 1
  hostshow "cat $f/hello.txt"
  host_has "$f/hello.txt" "written in the container" || { bad "the write is not on the host"; return 1; }
  ok "the container's write is on the host at once"
  host_edit_arrives consistent 5 || return 1
}

tour_cached() {
  step "cached: the host is the authority, reads come from a local copy"
  say "The plugin serves this folder through FUSE from a store on local disk: reads"
  say "after the first never go back to the (possibly slow) share. Writes go to"
  say "the host before the syscall returns (rule C3)."
  make_volume_and_container cached || return 1
  local f=$SHARE/cached
  inside cached 'echo "written in the container" > /data/hello.txt' || return 1
  hostshow "cat $f/hello.txt"
  host_has "$f/hello.txt" "written in the container" || { bad "the write is not on the host when echo returned"; return 1; }
  ok "the container's write was on the host when the write returned"
  say "Now an edit on the host. A network share sends no change notifications, so"
  say "the plugin rescans the folders the container has looked at (every 1 s by"
  say "default, -o rescan=...) and applies changes through the mount, so that"
  say "inotify watchers in the container see them."
  host_edit_arrives cached 15 || return 1
}

tour_delegated() {
  step "delegated: the container is the authority, writes come home later"
  say "Writes land in the local store at local-disk speed and are journaled; a"
  say "background worker writes them back to the host about a second later. fsync"
  say "on a file returns only once that file is on the host (D2), and stopping the"
  say "container writes back everything before the stop returns (D4)."
  make_volume_and_container delegated || return 1
  local f=$SHARE/delegated
  inside delegated 'echo "written in the container" > /data/build.log' || return 1
  if host_has "$f/build.log" "written in the container"; then
    say "   on the host right away: yes (the worker was quick)"
  else
    say "   on the host right away: not yet: it is in the local store and the journal"
  fi
  look "docker volume inspect $(vol delegated)   (Status: dirty, lag, last_error)"
  say "\`sync FILE\` in the container fsyncs that file: when it returns, the file is"
  say "on the host. (A bare \`sync\` is not passed to FUSE file systems by Linux.)"
  inside delegated 'echo "second line" >> /data/build.log && sync /data/build.log' || return 1
  hostshow "cat $f/build.log"
  host_has "$f/build.log" "second line" || { bad "after fsync the file is not on the host"; return 1; }
  ok "after fsync the file is on the host"

  say "Now 300 small files, as a build would write them, then the host count at once:"
  inside delegated 'mkdir -p /data/out && i=0; while [ $i -lt 300 ]; do echo "object $i" > /data/out/obj$i.o; i=$((i+1)); done' || return 1
  hostshow "ls $f/out 2>/dev/null | wc -l"
  say "A host edit to a path the container has not touched still reaches it (D6):"
  host_edit_arrives delegated 15 || return 1
  run dk volume inspect --format '{{json .Status}}' "$(vol delegated)"
  say "Stopping the container: the plugin's Unmount writes back what is left, and"
  say "only then does \`docker stop\` return."
  local t0
  t0=$(now_ms)
  run dk stop "$(ctr delegated)" || return 1
  say "   docker stop took $(($(now_ms) - t0)) ms"
  local n
  n=$(find "$f/out" -name 'obj*.o' 2>/dev/null | wc -l)
  hostshow "ls $f/out/*.o | wc -l"
  [ "$n" = 300 ] || { bad "after the stop the host has $n of 300 files"; return 1; }
  ok "all 300 files are on the host once the container has stopped"
  local c
  c=$(find "$f" -name '*.bindstate-conflict-*' | wc -l)
  if [ "$c" != 0 ]; then
    hostshow "find $f -name '*.bindstate-conflict-*'"
    bad "$c conflict copies, though only the container wrote these files (a plugin bug: please report it)"
    return 1
  fi
  run dk volume inspect --format '{{json .Status}}' "$(vol delegated)"
  run dk start "$(ctr delegated)" >/dev/null || true
}

tour_readonly() {
  step "read-only: a tree the containers only read, served without OPEN"
  say "A volume made with -o readonly=true (with the engine patch: any :ro bind in"
  say "the cached or delegated state) is served as cached is, but nothing can write"
  say "through it. So the plugin has the kernel open files itself: a file opened"
  say "again costs no round trip to the plugin (a hot \`go list\` runs at 1.1-1.2x"
  say "native, where a writable volume costs 2x). Host edits still arrive."
  make_volume_and_container readonly -o state=cached -o readonly=true || return 1
  local f=$SHARE/readonly
  printf '%s   container$ %s%s\n' "$D" "echo nope > /data/hello.txt" "$N"
  if timeout 60 docker exec "$(ctr readonly)" sh -c 'echo nope > /data/hello.txt' 2>&1 | sed 's/^/     /'; then
    bad "the container could write to a read-only volume"; return 1
  fi
  [ ! -e "$f/hello.txt" ] || { bad "a write from the container reached the host"; return 1; }
  ok "the write is refused (Read-only file system), and the host is unchanged"
  host_edit_arrives readonly 15 || return 1
  run dk volume inspect --format '{{json .Status}}' "$(vol readonly)"
}

tour_status() {
  step "what the daemon knows: docker volume ls / inspect"
  run dk volume ls --filter name=demo-
  local st
  for st in "${STATES[@]}"; do
    dk volume inspect "$(vol "$st")" >/dev/null 2>&1 || continue
    run dk volume inspect --format "{{.Name}}: {{json .Status}}" "$(vol "$st")"
  done
  say "Status: state and source as created, mounts = containers using it now;"
  say "for cached/delegated: dirty (paths not yet on the host), failed, lag,"
  say "last_error, conflicts (host copies kept aside, rule D7)."
  # The plugin's own view, over its control socket (managed plugins keep
  # their sockets in /run/docker/plugins/ID on the daemon's host).
  local id sock bin=$ROOT/bin/bindstate
  id=$(dk plugin inspect -f '{{.Id}}' "$PLUGIN" 2>/dev/null || true)
  sock=/run/docker/plugins/$id/bindstate-control/control.sock
  if [ -n "$id" ] && [ -S "$sock" ] && [ -x "$bin" ] && "$bin" status --socket "$sock" >/dev/null 2>&1; then
    say ""
    say "The same binary is also a client of the running plugin (ls, status, flush,"
    say "logs, metrics), over its control socket:"
    printf '%s   $ sock=%s%s\n' "$D" "$sock" "$N"
    local c arg
    for c in ls status flush; do
      arg=''
      [ "$c" = flush ] && arg=$(vol delegated)
      printf '%s   $ bin/bindstate %s --socket $sock %s%s\n' "$D" "$c" "$arg" "$N"
      # shellcheck disable=SC2086
      "$bin" "$c" --socket "$sock" $arg 2>&1 | sed 's/^/     /' || true
    done
  fi
}

demo() {
  need_root demo
  if [ -f "$RECORD" ]; then
    say "An earlier demo's things are still here ($RECORD): removing them first."
    clean
  fi
  printf '%sbindstate demo%s: one host folder per state, served to a running container.\n' "$B" "$N"
  say "Each step prints the commands it runs ($ ...) and what to look at."

  step "packages"
  if bash "$ROOT/contrib/install-deps.sh" --check >/dev/null 2>&1; then
    ok "everything needed is installed"
  else
    bash "$ROOT/contrib/install-deps.sh"
  fi

  step "build the plugin (a static Go binary in a plugin bundle)"
  run make -s -C "$ROOT" plugin-rootfs || die "build failed"
  say "   _build/plugin/config.json      the manifest (docker plugin inspect shows it)"
  say "   _build/plugin/rootfs/bindstate $(du -h "$ROOT/_build/plugin/rootfs/bindstate" | cut -f1), static; plus the empty dirs the runtime mounts on"

  step "a Docker daemon"
  mkdir -p "$DEMO_HOME"
  : >"$RECORD"
  trap 'rc=$?; [ $rc = 0 ] || [ -n "${DEMO_DONE:-}" ] || printf "\n%s\n" "The demo stopped early; \`make demo-clean\` removes what it made so far."' EXIT
  choose_daemon

  step "a test image without a registry"
  make_image

  step "install the plugin"
  install_plugin

  step "sample folders"
  mkdir -p "$SHARE"
  record SHARE "$SHARE"
  say "One folder per state under $SHARE, as a project"
  say "folder on the host. Sources must be inside the plugin's ALLOWED_ROOTS"
  say "(/home, /srv, /tmp, /var/tmp, ... by default). Separate folders, because"
  say "where two sources overlap, the stronger state wins."

  local failed=() st
  for st in "${STATES[@]}"; do
    if ! "tour_$st"; then failed+=("$st"); fi
  done
  tour_status

  DEMO_DONE=1
  step "what you have now"
  hint() { printf '   %-58s # %s\n' "$1" "$2"; }
  [ -n "${DOCKER_HOST:-}" ] && hint "export DOCKER_HOST=$DOCKER_HOST" "the daemon used"
  hint "docker ps --filter label=$LABEL" "one container per state"
  hint "docker exec -it $(ctr delegated) sh" "look around in /data"
  hint "ls $SHARE/*" "the host side"
  if [ "$(cat_record PRIVATE_DAEMON)" = 1 ]; then
    say "   the private daemon's log: $PRIVATE_LOG"
  fi
  say "Plugin logs go to the daemon's log (journalctl -u docker, or the file above)."
  say ""
  say "Clean up with:  make demo-clean   (removes exactly what this demo made)"
  if [ "${#failed[@]}" -ne 0 ]; then
    printf '\n%sdemo: these states did not behave as described: %s%s\n' "$R" "${failed[*]}" "$N"
    exit 1
  fi
  printf '\n%sdemo: all three states, and the read-only volume, behaved as described.%s\n' "$G" "$N"
}

# ---------------------------------------------------------------- clean
# cat_record NAME: the last value recorded for NAME, unquoted (record writes
# it with %q: an empty value is '', which is no daemon address).
cat_record() {
  local raw
  [ -f "$RECORD" ] || return 0
  raw=$(sed -n "s/^$1=//p" "$RECORD" | tail -1)
  [ -n "$raw" ] || return 0
  eval "printf '%s' $raw"
}

# mounts_under DIR: mount points at or beneath DIR, deepest first.
mounts_under() {
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
    awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-
}

# remove_tree DIR: unmount what is beneath DIR, then delete it, never
# deleting through a mount.
remove_tree() {
  local d=$1 m
  [ -e "$d" ] || return 0
  for m in $(mounts_under "$d"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  if [ -n "$(mounts_under "$d")" ]; then
    warn "still mounted beneath $d, not deleting it:"; mounts_under "$d" | sed 's/^/     /'
    return 1
  fi
  rm -rf "$d"
}

# is_our_dockerd PID: the process is a dockerd with our socket.
is_our_dockerd() {
  local pid=$1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "dockerd .*unix://$PRIVATE_SOCK"
}

clean() {
  need_root demo-clean
  if [ ! -f "$RECORD" ]; then
    say "Nothing to clean: no record of a demo ($RECORD)."
    return 0
  fi
  local private pid host rc=0
  private=$(cat_record PRIVATE_DAEMON)
  pid=$(cat_record DAEMON_PID)
  host=$(cat_record DEMO_DOCKER_HOST)
  if [ -n "$host" ]; then export DOCKER_HOST=$host; else unset DOCKER_HOST; fi
  say "Cleaning up the demo (daemon: ${host:-default socket})"
  if [ "$private" = 1 ] && { [ -z "$pid" ] || ! is_our_dockerd "$pid"; }; then
    say "   the private daemon is not running"
  elif daemon_answers; then
    local ids v
    ids=$(docker ps -aq --filter "label=$LABEL" || true)
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086
      run docker rm -f $ids || true
    fi
    for v in $(sed -n 's/^VOLUME=//p' "$RECORD"); do # volume names need no quoting
      if docker volume inspect "$v" >/dev/null 2>&1; then run docker volume rm -f "$v" || true; fi
    done
    if [ "$(cat_record PLUGIN_CREATED)" = 1 ] && docker plugin inspect "$PLUGIN" >/dev/null 2>&1; then
      run docker plugin disable -f "$PLUGIN" || true
      run docker plugin rm -f "$PLUGIN" || true
    fi
    if [ "$(cat_record IMAGE_CREATED)" = 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
      run docker image rm -f "$IMAGE" || true
    fi
  else
    warn "the daemon at ${host:-the default socket} does not answer: containers, volumes, plugin and image left as they are"
    rc=1 # the record stays, for a clean once it answers
  fi

  if [ "$private" = 1 ]; then
    if [ -n "$pid" ] && ! is_our_dockerd "$pid" && [ -s "$PRIVATE_LOG" ]; then
      warn "the private dockerd (PID $pid) had already exited; the end of its log:"
      tail -20 "$PRIVATE_LOG" | sed 's/^/     /'
    elif [ -n "$pid" ] && is_our_dockerd "$pid"; then
      say "   stopping the private dockerd (PID $pid)"
      kill -TERM "$pid"
      local i
      for ((i = 0; i < 60; i++)); do is_our_dockerd "$pid" || break; sleep 0.5; done
      if is_our_dockerd "$pid"; then
        warn "dockerd $pid still running after 30 s: killing it"
        kill -KILL "$pid" || true
        sleep 1
      fi
    fi
    # Shims of our daemon's containerd, if any outlived it (matched by our exec root).
    local p
    for p in $(pgrep -f "containerd-shim.*$PRIVATE_EXEC" || true); do
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$PRIVATE_EXEC" && kill -KILL "$p" 2>/dev/null || true
    done
    remove_tree "$PRIVATE_DATA" || rc=1
    remove_tree "$DEMO_RUN" || rc=1
    rm -f "$PRIVATE_LOG" "$PRIVATE_CONF"
  fi
  remove_tree "$SHARE" || rc=1
  remove_tree "$DEMO_HOME/image-rootfs" || rc=1
  if [ "$rc" = 0 ]; then
    rm -f "$RECORD"
    rmdir "$DEMO_HOME" 2>/dev/null || true
    ok "demo removed"
  else
    warn "some of the demo is left (see above); $RECORD kept"
    return 1
  fi
}

case "${1:-demo}" in
  demo) demo ;;
  clean) clean ;;
  *) echo "usage: $0 [demo|clean]" >&2; exit 2 ;;
esac
