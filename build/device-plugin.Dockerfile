# The device plugin (cmd/dynmig-device-plugin): built with cgo, because its nvml
# backend (package nvmlhal, through go-nvml) loads libnvidia-ml.so.1 with
# dlopen at run time. That needs glibc's dynamic loader, so the image is
# distroless/base (glibc, no shell). The library itself is not in the image:
# it must match the node's driver, and the NVIDIA container toolkit mounts it
# from the host (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility
# in the pod, or the toolkit's RuntimeClass). Build from the repository root
# with hack/build-images.sh.
ARG GO_IMAGE=golang:1.26.8-bookworm
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG REVISION=""
# go-nvml's wrappers call functions its header marks deprecated; gcc's
# warnings about them are noise.
ENV CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
RUN CGO_ENABLED=1 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/dynmig/dynmig/internal/wiring/cli.version=${VERSION} -X github.com/dynmig/dynmig/internal/wiring/cli.revision=${REVISION}" \
      -o /out/dynmig-device-plugin ./cmd/dynmig-device-plugin

FROM gcr.io/distroless/base-debian12
COPY --from=build /out/dynmig-device-plugin /usr/bin/dynmig-device-plugin
# Root: creating MIG instances through NVML needs CAP_SYS_ADMIN and the
# host's /dev/nvidia-caps, which the DaemonSet grants (privileged).
ENTRYPOINT ["/usr/bin/dynmig-device-plugin"]
