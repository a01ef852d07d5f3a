#!/usr/bin/env bash
# Build Mutagen, a benchmark peer (the engine of Docker Desktop's synchronized
# file shares), from its pinned module through the Go module proxy:
#
#   contrib/bench/mutagen.sh OUTDIR    (make bench runs it for bin/mutagen)
#
# leaves OUTDIR/mutagen and, beside it, OUTDIR/mutagen-agents.tar.gz: the
# agent Mutagen copies to the other end of an ssh URL, found by that name
# next to the executable, holding one file per platform (linux_amd64 here).
# `go install ...@latest` is refused by the proxy; the pinned release, built
# as a main module with the mutagencli and mutagenagent tags, works
# (../shared/BENCH.md). Idempotent: a build of this version is kept.
set -euo pipefail

VERSION=v0.18.1
MODULE=github.com/mutagen-io/mutagen

out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -x "$out/mutagen" ] && [ -f "$out/mutagen-agents.tar.gz" ] &&
	[ "$("$out/mutagen" version 2>/dev/null)" = "${VERSION#v}" ]; then
	exit 0
fi

export PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "mutagen.sh: go not found (expected at /usr/local/go)" >&2; exit 1; }

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# The module proxy checks the zip against the checksum database.
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "mutagen.sh: go mod download $MODULE@$VERSION gave no directory" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
echo "mutagen.sh: building $MODULE@$VERSION into $out"
(
	cd "$work/src"
	CGO_ENABLED=0 go build -trimpath -tags mutagencli -o "$work/mutagen" ./cmd/mutagen
	CGO_ENABLED=0 go build -trimpath -tags mutagenagent -o "$work/agent/linux_amd64" ./cmd/mutagen-agent
)
tar -C "$work/agent" -czf "$work/mutagen-agents.tar.gz" linux_amd64
mv "$work/mutagen-agents.tar.gz" "$out/mutagen-agents.tar.gz"
mv "$work/mutagen" "$out/mutagen"
