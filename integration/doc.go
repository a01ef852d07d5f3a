// Package integration holds the integration tests of bindstate: a private
// dockerd (Debian's docker.io by default, or a patched one), the managed
// plugin installed into it, real containers (a busybox image made with
// docker import) and a real slow share (sshd + sshfs over loopback, made by
// contrib/share.sh). Tests are named after the rule they check
// (../shared/SEMANTICS.md): TestK2_..., TestC3_..., TestD4_...
//
// Run as root: go test -count=1 -timeout 30m ./integration/... (or make
// test-integration). Environment:
//
//	BINDSTATE_DOCKERD       daemon binary (default /usr/sbin/dockerd)
//	BINDSTATE_DAEMON_PATH   directories put in front of the daemon's PATH (newer runc)
//	BINDSTATE_DOCKER        docker CLI (default docker on PATH)
//	BINDSTATE_PLUGIN_DIR    plugin dir for docker plugin create (default: _build/plugin
//	                        when fresh, else built from ./plugin)
//	BINDSTATE_PLUGIN_SETTINGS  extra plugin settings, e.g. FUSE_DEBUG=true
//	BINDSTATE_KEEP=1        keep /tmp/bs-XXXX (daemon log, shares) after the run
//	CI=true                 a missing prerequisite fails instead of skipping
package integration
