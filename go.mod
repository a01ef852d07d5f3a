module github.com/bindstate/bindstate

go 1.26.8

require (
	github.com/docker/go-plugins-helpers v0.0.0-20240701071450-45e2431495c8
	github.com/hanwen/go-fuse/v2 v2.12.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/Microsoft/go-winio v0.6.2 // indirect
	github.com/coreos/go-systemd v0.0.0-20191104093116-d3cd4ed1dbcf // indirect
	github.com/docker/go-connections v0.8.2 // indirect
)
