module github.com/bindstate/bindstate

go 1.26.8

require (
	github.com/docker/go-plugins-helpers v0.0.0-20240701071450-45e2431495c8 // indirect
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
