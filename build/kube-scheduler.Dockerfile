# kube-scheduler with dynmig's DynMIG framework plugin
# (schedplugin/cmd/kube-scheduler, module schedplugin): pure Go, built
# without cgo into a static binary on distroless/static. It reports the
# Kubernetes version it is built from (KUBE_VERSION, schedplugin/go.mod's
# k8s.io/kubernetes) as kube-scheduler does, and dynmig's version and
# revision through internal/wiring/cli. Build from the repository root with
# hack/build-images.sh.
ARG GO_IMAGE=golang:1.26.8-bookworm
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY schedplugin/go.mod schedplugin/go.sum ./schedplugin/
RUN cd schedplugin && go mod download
COPY . .
ARG VERSION=""
ARG REVISION=""
ARG KUBE_VERSION=v1.37.2
RUN cd schedplugin && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X github.com/dynmig/dynmig/internal/wiring/cli.version=${VERSION} -X github.com/dynmig/dynmig/internal/wiring/cli.revision=${REVISION}" \
      -o /out/kube-scheduler ./cmd/kube-scheduler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kube-scheduler /usr/local/bin/kube-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kube-scheduler"]
