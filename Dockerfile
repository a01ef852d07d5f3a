# The managed plugin's root file system, for those who can pull base images.
# (Without a registry, `make plugin-rootfs` makes the same tree.)
#
#   docker build -t bindstate-rootfs .
#   mkdir -p _build/plugin/rootfs
#   id=$(docker create bindstate-rootfs)
#   docker export "$id" | tar -x -C _build/plugin/rootfs
#   docker rm "$id"
#   cp config.json _build/plugin/
#   docker plugin create bindstate _build/plugin && docker plugin enable bindstate

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
# vendor/ when it is there (as in the repository), the module proxy otherwise.
RUN mod=; [ -f vendor/modules.txt ] && mod=-mod=vendor; \
    CGO_ENABLED=0 go build $mod -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/bindstate ./plugin && \
    mkdir -p /rootfs/run/docker/plugins /rootfs/mnt/volumes /rootfs/host /rootfs/var/lib/bindstate \
             /rootfs/tmp /rootfs/dev /rootfs/proc /rootfs/sys /rootfs/etc && \
    chmod 1777 /rootfs/tmp && chmod 700 /rootfs/var/lib/bindstate && \
    printf 'root:x:0:0:root:/:/bindstate\nnobody:x:65534:65534:nobody:/:/bindstate\n' >/rootfs/etc/passwd && \
    printf 'root:x:0:\nnogroup:x:65534:\n' >/rootfs/etc/group && \
    cp /out/bindstate /rootfs/bindstate

FROM scratch
COPY --from=build /rootfs/ /
ENTRYPOINT ["/bindstate"]
