#!/usr/bin/env bash
# Build the patched Docker engine, CLI and Compose that understand
# `state=`/`consistency=` on binds (see docs/engine.md). Nothing upstream is
# committed: the pinned modules (contrib/versions.env) are fetched through
# the Go module proxy, copied out of the module cache, patched with the
# series in engine-patch/ and cli-patch/{cli,compose}/, and built.
#
#   contrib/engine.sh engine   patched dockerd + runc     -> _build/engine/bin/{dockerd,runc}
#   contrib/engine.sh cli      patched docker + compose   -> _build/engine/bin/{docker,docker-compose}
#                              (and _build/engine/cli-plugins/docker-compose)
#   contrib/engine.sh unit     upstream unit tests of the packages the patches touch
#   contrib/engine.sh status   say what is built and whether it is up to date
#
# Cached: each build writes a stamp holding the sha256 of its patches, its
# pins and this script; it rebuilds only when that changes (FORCE=1 rebuilds
# anyway). ENGINE_OUT overrides the output directory.
#
# Upstream builds run with GOFLAGS=-mod=mod, GOWORK=off and no vendor
# directory, whatever GOFLAGS the caller exported (the repository's own
# builds use -mod=vendor); nothing set here leaks back.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

out=${ENGINE_OUT:-$repo/_build/engine}
case "$out" in /*) ;; *) out=$repo/$out ;; esac
bin=$out/bin
src=$out/src
GO=${GO:-go}

export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
unset GOOS GOARCH 2>/dev/null || true

log() { printf 'engine.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# stamp_of NAME FILES... prints the sha256 of the pins named by PIN_VARS,
# this script and FILES.
stamp_of() {
	local name=$1; shift
	{
		echo "$name"
		for v in $PIN_VARS; do echo "$v=${!v:-}"; done
		"$GO" env GOVERSION
		sha256sum "$here/engine.sh" "$@" | awk '{print $1}'
	} | sha256sum | awk '{print $1}'
}

patches_of() { # dir: the series, in order
	local d=$1
	[ -d "$d" ] || return 0
	find "$d" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]-*.patch' | LC_ALL=C sort
}

# fresh NAME STAMP FILES...: whether the stamp of NAME matches and the files exist.
fresh() {
	local name=$1 want=$2; shift 2
	[ "${FORCE:-0}" != 1 ] || return 1
	[ -f "$out/stamp.$name" ] && [ "$(cat "$out/stamp.$name")" = "$want" ] || return 1
	local f
	for f in "$@"; do [ -e "$f" ] || return 1; done
}

# moddir MODULE@VERSION: download through the module proxy, print its Dir.
moddir() {
	local json dir
	json=$(cd / && "$GO" mod download -json "$1") || die "go mod download $1 failed: $json"
	dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $1: no Dir in: $json"
	printf '%s\n' "$dir"
}

# unpack MODULE@VERSION DEST PATCHDIR: a writable, patched copy of the module.
unpack() {
	local mod=$1 dest=$2 pdir=$3 from p
	from=$(moddir "$mod")
	rm -rf "$dest" "$dest.tmp"
	mkdir -p "$(dirname "$dest")"
	cp -r "$from" "$dest.tmp"
	chmod -R u+w "$dest.tmp"
	for p in $(patches_of "$pdir"); do
		log "  apply $(basename "$p")"
		patch -d "$dest.tmp" -p1 --forward --batch --quiet --no-backup-if-mismatch <"$p" ||
			die "patch $p does not apply to $mod"
	done
	mv "$dest.tmp" "$dest"
}

timed() { # what cmd...: run, log the time taken
	local what=$1 t0=$SECONDS; shift
	"$@"
	log "$what: $((SECONDS - t0))s"
}

ENGINE_PINS="MOBY_VERSION RUNC_VERSION"
CLI_PINS="DOCKER_CLI_VERSION SWARMKIT_PSEUDO COMPOSE_VERSION"

engine_stamp() { PIN_VARS=$ENGINE_PINS stamp_of engine $(patches_of "$repo/engine-patch"); }
cli_stamp() { PIN_VARS=$CLI_PINS stamp_of cli $(patches_of "$repo/cli-patch/cli") $(patches_of "$repo/cli-patch/compose"); }

# The source trees, patched (also used by `unit`).
prepare_moby() {
	log "moby/moby/v2 $MOBY_VERSION + engine-patch/"
	unpack "github.com/moby/moby/v2@$MOBY_VERSION" "$src/moby" "$repo/engine-patch"
}

prepare_cli() {
	log "docker/cli $DOCKER_CLI_VERSION + cli-patch/cli/"
	unpack "github.com/docker/cli@$DOCKER_CLI_VERSION" "$src/cli" "$repo/cli-patch/cli"
	# The CLI is a main module only through vendor.mod (CalVer); build it in
	# module mode, with the swarmkit pseudo-version moby uses (plain v2.1.3
	# is refused by the proxy).
	(
		cd "$src/cli"
		cp vendor.mod go.mod
		cp vendor.sum go.sum
		rm -rf vendor
		"$GO" mod edit -require="github.com/moby/swarmkit/v2@$SWARMKIT_PSEUDO"
	)
	log "docker/compose $COMPOSE_VERSION + cli-patch/compose/"
	unpack "github.com/docker/compose/v5@$COMPOSE_VERSION" "$src/compose" "$repo/cli-patch/compose"
}

build_engine() {
	local want
	want=$(engine_stamp)
	if fresh engine "$want" "$bin/dockerd" "$bin/runc" "$src/moby/go.mod"; then
		log "engine up to date ($bin/dockerd, $bin/runc)"
		return 0
	fi
	command -v pkg-config >/dev/null && pkg-config --exists libseccomp ||
		die "runc needs libseccomp-dev and pkg-config (contrib/install-deps.sh installs them)"
	local t0=$SECONDS
	rm -f "$out/stamp.engine"
	mkdir -p "$bin"
	timed "unpack+patch moby" prepare_moby
	local ver="${MOBY_VERSION#v}+bindstate"
	timed "build dockerd" bash -c 'cd "$1" && CGO_ENABLED=0 "$2" build -trimpath \
		-ldflags "-X github.com/moby/moby/v2/dockerversion.Version=$3 -X github.com/moby/moby/v2/dockerversion.GitCommit=bindstate-$4 -X github.com/moby/moby/v2/dockerversion.PlatformName=bindstate" \
		-o "$5/dockerd" ./cmd/dockerd' _ "$src/moby" "$GO" "$ver" "${want:0:12}" "$bin"
	timed "build runc $RUNC_VERSION" env GOBIN="$bin" CGO_ENABLED=1 \
		"$GO" install -trimpath -tags "seccomp urfave_cli_no_docs" "github.com/opencontainers/runc@$RUNC_VERSION"
	echo "$want" >"$out/stamp.engine"
	log "engine built in $((SECONDS - t0))s: $("$bin/dockerd" --version)"
}

build_cli() {
	local want
	want=$(cli_stamp)
	if fresh cli "$want" "$bin/docker" "$bin/docker-compose" "$out/cli-plugins/docker-compose" "$src/cli/go.mod" "$src/compose/go.mod"; then
		log "cli up to date ($bin/docker, $bin/docker-compose)"
		return 0
	fi
	local t0=$SECONDS
	rm -f "$out/stamp.cli"
	mkdir -p "$bin" "$out/cli-plugins"
	timed "unpack+patch cli, compose" prepare_cli
	local cliver="${DOCKER_CLI_VERSION#v}" composever="$COMPOSE_VERSION"
	cliver="${cliver%+incompatible}+bindstate"
	timed "build docker" bash -c 'cd "$1" && CGO_ENABLED=0 "$2" build -trimpath \
		-ldflags "-X github.com/docker/cli/cli/version.Version=$3 -X github.com/docker/cli/cli/version.GitCommit=bindstate-$4 -X github.com/docker/cli/cli/version.PlatformName=bindstate" \
		-o "$5/docker" ./cmd/docker' _ "$src/cli" "$GO" "$cliver" "${want:0:12}" "$bin"
	timed "build docker-compose" bash -c 'cd "$1" && CGO_ENABLED=0 "$2" build -trimpath \
		-ldflags "-X github.com/docker/compose/v5/internal.Version=$3" \
		-o "$4/docker-compose" ./cmd' _ "$src/compose" "$GO" "$composever+bindstate" "$bin"
	# `docker compose` finds it through DOCKER_CONFIG/cli-plugins or
	# cliPluginsExtraDirs (docs/engine.md).
	ln -sf ../bin/docker-compose "$out/cli-plugins/docker-compose"
	echo "$want" >"$out/stamp.cli"
	log "cli built in $((SECONDS - t0))s: $("$bin/docker" --version); $("$bin/docker-compose" version)"
}

# Upstream unit tests of every package the patches touch (and ship tests
# for), whole: daemon (monitor.go, volumes.go, mounts.go, daemon.go,
# bindstate.go), its volume packages (mounts parsing, driver proxy, the
# volume service they go through), the container package the exit path
# uses, and the plugin client (a retried request's body). Run with the builds' flags
# (-trimpath, CGO_ENABLED=0) so that the packages compiled for the binaries
# are reused from the build cache; vet is left to upstream.
ENGINE_UNIT_PKGS="./daemon/ ./daemon/container/ ./daemon/volume/mounts/ ./daemon/volume/drivers/ ./daemon/volume/service/ ./pkg/plugins/"
CLI_UNIT_PKGS="./opts/"
COMPOSE_UNIT_PKGS="./pkg/compose/"

run_unit() {
	local rc=0
	[ -f "$src/moby/go.mod" ] && [ "$(cat "$out/stamp.engine" 2>/dev/null)" = "$(engine_stamp)" ] || prepare_moby
	[ -f "$src/cli/go.mod" ] && [ -f "$src/compose/go.mod" ] && [ "$(cat "$out/stamp.cli" 2>/dev/null)" = "$(cli_stamp)" ] || prepare_cli
	log "unit: moby $ENGINE_UNIT_PKGS"
	(cd "$src/moby" && CGO_ENABLED=0 "$GO" test -trimpath -vet=off ${GOTEST_FLAGS:-} -count=1 $ENGINE_UNIT_PKGS) || rc=1
	log "unit: docker/cli $CLI_UNIT_PKGS"
	(cd "$src/cli" && CGO_ENABLED=0 "$GO" test -trimpath -vet=off ${GOTEST_FLAGS:-} -count=1 $CLI_UNIT_PKGS) || rc=1
	log "unit: docker/compose $COMPOSE_UNIT_PKGS"
	(cd "$src/compose" && CGO_ENABLED=0 "$GO" test -trimpath -vet=off ${GOTEST_FLAGS:-} -count=1 $COMPOSE_UNIT_PKGS) || rc=1
	return $rc
}

status() {
	local s
	s=$(cat "$out/stamp.engine" 2>/dev/null || true)
	if [ "$s" = "$(engine_stamp)" ]; then echo "engine: up to date ($bin/dockerd, $bin/runc)"; else echo "engine: needs a build"; fi
	s=$(cat "$out/stamp.cli" 2>/dev/null || true)
	if [ "$s" = "$(cli_stamp)" ]; then echo "cli: up to date ($bin/docker, $bin/docker-compose)"; else echo "cli: needs a build"; fi
}

case "${1:-}" in
engine) build_engine ;;
cli) build_cli ;;
unit) run_unit ;;
status) status ;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
