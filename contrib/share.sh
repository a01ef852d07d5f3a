#!/usr/bin/env bash
# share.sh: a real slow share over loopback, for tests and benchmarks.
#
# A local directory HOSTDIR is served by a private sshd on 127.0.0.1 (random
# free port, its own host key, client key, config and pid file; no PAM; root
# may log in by key only) and mounted back at MOUNTPOINT with sshfs. This is
# the "slow share" of ../shared/BENCH.md: edits made directly in HOSTDIR are
# what a user editing on the Mac side does; the plugin only sees MOUNTPOINT.
#
# usage:
#   share.sh up HOSTDIR MOUNTPOINT   start the sshd and mount HOSTDIR at MOUNTPOINT
#   share.sh down MOUNTPOINT         unmount, stop that sshd (by PID), remove the state
#   share.sh stop-sshd MOUNTPOINT    kill the sshd and its sessions: the share vanishes
#                                    (the mount stays; accesses fail or hang until
#                                    start-sshd, then sshfs reconnects)
#   share.sh start-sshd MOUNTPOINT   start the sshd again, on the same port and keys
#   share.sh status MOUNTPOINT       print what is known about the share
#   share.sh env MOUNTPOINT          print SHARE_* variables (port, pid, dirs) for eval
#
# environment:
#   SHARE_STATE       state dir (default: .share-<name> next to MOUNTPOINT)
#   SHARE_SSHFS_OPTS  extra -o options for sshfs, comma separated (default none:
#                     only sshfs's own defaults for caching)
#   SHARE_RTT         milliseconds added to every round trip to the share (e.g. 0.5;
#                     default 0, none): clients connect through a delay line
#                     (contrib/delayline, built as bin/delayline by `make bin/delayline`;
#                     DELAYLINE names another) that holds each direction back by half
#                     of it, as a network or a VM's file share would
#   SHARE_DEBUG=1     trace the script
#
# Needs root, Debian openssh-server and sshfs (contrib/install-deps.sh installs them).
set -euo pipefail
[[ ${SHARE_DEBUG:-} == 1 ]] && set -x

SSHD=${SSHD:-/usr/sbin/sshd}
SSHFS=${SSHFS:-sshfs}
DELAYLINE=${DELAYLINE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bin/delayline}

die() { echo "share.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^# Needs root/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need() {
	[[ $(id -u) == 0 ]] || die "must run as root (sshd with its own host key, sshfs allow_other)"
	[[ -x $SSHD ]] || die "$SSHD missing: apt-get install openssh-server"
	command -v "$SSHFS" >/dev/null || die "sshfs missing: apt-get install sshfs"
	command -v ssh-keygen >/dev/null || die "ssh-keygen missing: apt-get install openssh-client"
	[[ -e /dev/fuse ]] || die "/dev/fuse missing"
}

abspath() { # abspath PATH: absolute, cleaned, without resolving the last component
	local p=$1
	[[ $p == /* ]] || p=$PWD/$p
	local d b
	d=$(dirname "$p") b=$(basename "$p")
	[[ -d $d ]] || die "$d: no such directory"
	d=$(cd "$d" && pwd -P)
	if [[ $d == / ]]; then echo "/$b"; else echo "$d/$b"; fi
}

state_dir() { # state_dir MOUNTPOINT(abs)
	if [[ -n ${SHARE_STATE:-} ]]; then
		abspath "$SHARE_STATE"
	else
		echo "$(dirname "$1")/.share-$(basename "$1")"
	fi
}

is_mounted() { # is_mounted ABSPATH
	awk -v m="$1" '{gsub(/\\040/, " ", $5); if ($5 == m) f=1} END {exit !f}' /proc/self/mountinfo
}

port_in_use() { # port_in_use PORT
	local hex
	hex=$(printf '%04X' "$1")
	awk -v h=":$hex" 'NR>1 && $4=="0A" && substr($2, length($2)-4)==h {f=1} END {exit !f}' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# pick_port: a free port outside the kernel's ephemeral range. While the
# sshd is stopped (stop-sshd), its port must stay free for start-sshd, yet
# every outgoing connection takes a port from that range, sshfs's own
# reconnect attempts to this very port included (a connect to a free local
# port in the range can even connect to itself); a port in the range was
# taken that way in CI, and start-sshd then failed.
pick_port() {
	local p i lo hi base span
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768 hi=60999; }
	if ((lo > 11024)); then
		base=10000 span=$((lo - 10000)) # below the range
	elif ((hi < 64511)); then
		base=$((hi + 1)) span=$((65535 - hi)) # above it
	else
		base=1024 span=64511 # the range is nearly everything: take what is free
	fi
	for i in $(seq 200); do
		p=$((base + (RANDOM * 32768 + RANDOM) % span))
		port_in_use "$p" || { echo "$p"; return; }
	done
	die "no free port found"
}

sshd_pid() { # sshd_pid STATE: pid of our listening sshd, if alive
	local pid
	[[ -s $1/sshd.pid ]] || return 1
	pid=$(<"$1/sshd.pid")
	[[ -r /proc/$pid/cmdline ]] || return 1
	# Make sure the pid is still our sshd (same config file), not a reused pid.
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$1/sshd_config" || return 1
	echo "$pid"
}

descendants() { # descendants PID: all descendant pids, deepest first
	local c
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		descendants "$c"
		echo "$c"
	done
}

write_config() { # write_config STATE PORT HOSTDIR
	local s=$1 port=$2 client_port
	# Clients connect to the delay line when there is one (SHARE_RTT).
	client_port=$(cat "$s/client_port" 2>/dev/null || echo "$port")
	cat >"$s/sshd_config" <<EOF
# private sshd of contrib/share.sh; never the system's
Port $port
ListenAddress 127.0.0.1
AddressFamily inet
HostKey $s/host_key
PidFile $s/sshd.pid
AuthorizedKeysFile $s/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
AllowUsers root
UseDNS no
PrintMotd no
PermitUserEnvironment no
AllowTcpForwarding no
X11Forwarding no
ClientAliveInterval 5
ClientAliveCountMax 3
MaxStartups 100
MaxSessions 100
LogLevel INFO
Subsystem sftp internal-sftp
EOF
	cat >"$s/ssh_config" <<EOF
Host share
	HostName 127.0.0.1
	Port $client_port
	User root
	IdentityFile $s/client_key
	IdentitiesOnly yes
	UserKnownHostsFile $s/known_hosts
	GlobalKnownHostsFile /dev/null
	StrictHostKeyChecking yes
	HostKeyAlias bindstate-share
	BatchMode yes
	PasswordAuthentication no
	ServerAliveInterval 5
	ServerAliveCountMax 3
	ConnectTimeout 10
	Compression no
	LogLevel ERROR
EOF
	echo "bindstate-share $(cat "$s/host_key.pub")" >"$s/known_hosts"
}

start_sshd() { # start_sshd STATE: start (or restart) our sshd, on the saved port if any
	local s=$1 port pid i try
	mkdir -p /run/sshd && chmod 0755 /run/sshd # privilege separation dir
	for try in 1 2 3 4 5; do
		if [[ -s $s/port ]]; then port=$(<"$s/port"); else port=$(pick_port); fi
		write_config "$s" "$port" "$(<"$s/hostdir")"
		"$SSHD" -t -f "$s/sshd_config" || die "sshd refuses $s/sshd_config"
		rm -f "$s/sshd.pid"
		"$SSHD" -f "$s/sshd_config" -E "$s/sshd.log"
		for i in $(seq 100); do
			if pid=$(sshd_pid "$s") && port_in_use "$port"; then
				echo "$port" >"$s/port"
				return 0
			fi
			sleep 0.05
		done
		# did not come up: most likely the port was taken between pick and bind
		pid=$(sshd_pid "$s") && kill "$pid" 2>/dev/null || true
		[[ -n ${keep_port:-} ]] && die "sshd did not start on port $port; $s/sshd.log ends: $(tail -n 5 "$s/sshd.log" 2>/dev/null)"
		rm -f "$s/port"
	done
	die "sshd did not start; see $s/sshd.log"
}

stop_sshd() { # stop_sshd STATE: kill our sshd and every session it forked
	local s=$1 pid kids i
	pid=$(sshd_pid "$s") || return 0
	kids=$(descendants "$pid")
	kill -TERM "$pid" 2>/dev/null || true
	# sessions (and their sftp) keep running after the listener goes: end them too
	[[ -n $kids ]] && kill -TERM $kids 2>/dev/null || true
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$pid" $kids 2>/dev/null || true
	rm -f "$s/sshd.pid"
}

delayline_pid() { # delayline_pid STATE: pid of our delay line, if alive
	local pid
	[[ -s $1/delayline.pid ]] || return 1
	pid=$(<"$1/delayline.pid")
	[[ -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "-listen 127.0.0.1:$(cat "$1/client_port" 2>/dev/null) " || return 1
	echo "$pid"
}

start_delayline() { # start_delayline STATE RTT_MS: clients reach the sshd through a delay line
	local s=$1 rtt=$2 lport half i
	[[ -x $DELAYLINE ]] || { echo "share.sh: SHARE_RTT needs the delay line: $DELAYLINE missing (make bin/delayline)" >&2; return 1; }
	half=$(awk -v r="$rtt" 'BEGIN { printf "%dus", r * 500 }')
	lport=$(pick_port)
	echo "$lport" >"$s/client_port"
	echo "$rtt" >"$s/rtt_ms"
	setsid "$DELAYLINE" -delay "$half" -listen "127.0.0.1:$lport" 127.0.0.1 "$(<"$s/port")" \
		</dev/null >>"$s/delayline.log" 2>&1 &
	echo $! >"$s/delayline.pid"
	for i in $(seq 100); do
		port_in_use "$lport" && return 0
		kill -0 "$(<"$s/delayline.pid")" 2>/dev/null || break
		sleep 0.05
	done
	echo "share.sh: the delay line did not start on port $lport; $s/delayline.log ends: $(tail -n 5 "$s/delayline.log" 2>/dev/null)" >&2
	stop_delayline "$s"
	return 1
}

stop_delayline() { # stop_delayline STATE
	local pid
	pid=$(delayline_pid "$1") || return 0
	kill -TERM "$pid" 2>/dev/null || true
	rm -f "$1/delayline.pid"
}

cmd_up() {
	[[ $# == 2 ]] || usage
	local rtt=${SHARE_RTT:-0}
	[[ $rtt =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SHARE_RTT=$rtt: want milliseconds, e.g. 0.5 (0: no delay)"
	need
	local hostdir mp s
	hostdir=$(abspath "$1") mp=$(abspath "$2")
	[[ -d $hostdir ]] || die "$hostdir: not a directory"
	mkdir -p "$mp"
	is_mounted "$mp" && die "$mp is already a mount point (share.sh down $mp first)"
	s=$(state_dir "$mp")
	if pid=$(sshd_pid "$s" 2>/dev/null); then die "an sshd ($pid) of $s is running: share.sh down $mp first"; fi
	rm -rf "$s"
	mkdir -p "$s" && chmod 0700 "$s"
	echo "$hostdir" >"$s/hostdir"
	echo "$mp" >"$s/mountpoint"
	ssh-keygen -q -t ed25519 -N '' -C bindstate-share-host -f "$s/host_key"
	ssh-keygen -q -t ed25519 -N '' -C bindstate-share-client -f "$s/client_key"
	cp "$s/client_key.pub" "$s/authorized_keys"
	start_sshd "$s"
	local port
	port=$(<"$s/port")
	if [[ $(awk -v r="$rtt" 'BEGIN { print (r > 0) }') == 1 ]]; then
		start_delayline "$s" "$rtt" || { stop_sshd "$s"; die "no share"; }
		write_config "$s" "$port" "$hostdir" # the client's port is the delay line's
	fi
	# sshfs: allow_other (the plugin and containers are other processes),
	# reconnect (survive stop-sshd/start-sshd); caching left at sshfs defaults.
	local opts="allow_other,reconnect,ServerAliveInterval=5,ServerAliveCountMax=3"
	[[ -n ${SHARE_SSHFS_OPTS:-} ]] && opts+=",$SHARE_SSHFS_OPTS"
	if ! "$SSHFS" -F "$s/ssh_config" -o "$opts" "share:$hostdir" "$mp" 2>"$s/sshfs.err"; then
		cat "$s/sshfs.err" >&2
		stop_sshd "$s"
		stop_delayline "$s"
		die "sshfs failed; sshd log: $s/sshd.log"
	fi
	is_mounted "$mp" || { stop_sshd "$s"; stop_delayline "$s"; die "sshfs returned but $mp is not mounted"; }
	echo "share: $hostdir -> $mp (sshd pid $(<"$s/sshd.pid") on 127.0.0.1:$port, state $s)"
	[[ -s $s/rtt_ms ]] && echo "share: round trips $(<"$s/rtt_ms") ms longer (delay line pid $(<"$s/delayline.pid") on 127.0.0.1:$(<"$s/client_port"))"
	return 0
}

state_of() { # state_of MOUNTPOINT: the state dir, which must exist
	local mp s
	mp=$(abspath "$1")
	s=$(state_dir "$mp")
	[[ -d $s && -f $s/hostdir ]] || die "no share state for $mp in $s"
	echo "$s"
}

cmd_down() {
	[[ $# == 1 ]] || usage
	local mp s i
	mp=$(abspath "$1")
	s=$(state_dir "$mp")
	if is_mounted "$mp"; then
		for i in $(seq 50); do
			fusermount3 -u "$mp" 2>/dev/null || fusermount -u "$mp" 2>/dev/null || umount "$mp" 2>/dev/null || true
			is_mounted "$mp" || break
			sleep 0.1
		done
		if is_mounted "$mp"; then
			echo "share.sh: $mp busy; detaching it (umount -l)" >&2
			umount -l "$mp" || true
		fi
	fi
	if [[ -d $s ]]; then
		stop_sshd "$s"
		stop_delayline "$s"
	fi
	if [[ -d $s ]]; then
		# only remove what we made
		rm -f "$s"/{host_key,host_key.pub,client_key,client_key.pub,authorized_keys,known_hosts} \
			"$s"/{sshd_config,ssh_config,sshd.pid,sshd.log,sshfs.err,port,hostdir,mountpoint} \
			"$s"/{client_port,rtt_ms,delayline.pid,delayline.log}
		rmdir "$s" 2>/dev/null || true
	fi
	rmdir "$mp" 2>/dev/null || true
}

cmd_stop_sshd() {
	[[ $# == 1 ]] || usage
	local s
	s=$(state_of "$1")
	stop_sshd "$s"
}

cmd_start_sshd() {
	[[ $# == 1 ]] || usage
	need
	local s
	s=$(state_of "$1")
	if sshd_pid "$s" >/dev/null; then return 0; fi
	keep_port=1 start_sshd "$s"
}

cmd_env() {
	[[ $# == 1 ]] || usage
	local s pid=""
	s=$(state_of "$1")
	pid=$(sshd_pid "$s" || true)
	# SHARE_PORT is where clients connect: the delay line's port when the
	# share has one (SHARE_RTT_MS), else the sshd's (SHARE_SSHD_PORT).
	printf 'SHARE_STATE=%q\nSHARE_HOSTDIR=%q\nSHARE_MOUNTPOINT=%q\nSHARE_PORT=%q\nSHARE_SSHD_PORT=%q\nSHARE_SSHD_PID=%q\nSHARE_SSH_CONFIG=%q\nSHARE_RTT_MS=%q\n' \
		"$s" "$(<"$s/hostdir")" "$(<"$s/mountpoint")" "$(cat "$s/client_port" 2>/dev/null || cat "$s/port" 2>/dev/null)" \
		"$(cat "$s/port" 2>/dev/null)" "$pid" "$s/ssh_config" "$(cat "$s/rtt_ms" 2>/dev/null || echo 0)"
}

cmd_status() {
	[[ $# == 1 ]] || usage
	local s mp
	s=$(state_of "$1")
	mp=$(<"$s/mountpoint")
	cmd_env "$1"
	if is_mounted "$mp"; then echo "mounted: yes"; else echo "mounted: no"; fi
	if sshd_pid "$s" >/dev/null; then echo "sshd: running"; else echo "sshd: stopped"; fi
}

[[ $# -ge 1 ]] || usage
cmd=$1
shift
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
stop-sshd) cmd_stop_sshd "$@" ;;
start-sshd) cmd_start_sshd "$@" ;;
env) cmd_env "$@" ;;
status) cmd_status "$@" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
