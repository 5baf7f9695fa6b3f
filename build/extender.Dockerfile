# The scheduler extender (cmd/dynmig-scheduler-extender): pure Go, built
# without cgo into a static binary on distroless/static (no libc, no shell,
# runs as nonroot). Build from the repository root with hack/build-images.sh.
ARG GO_IMAGE=golang:1.26.8-bookworm
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG REVISION=""
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/dynmig/dynmig/internal/wiring/cli.version=${VERSION} -X github.com/dynmig/dynmig/internal/wiring/cli.revision=${REVISION}" \
      -o /out/dynmig-scheduler-extender ./cmd/dynmig-scheduler-extender

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dynmig-scheduler-extender /usr/bin/dynmig-scheduler-extender
USER 65532:65532
ENTRYPOINT ["/usr/bin/dynmig-scheduler-extender"]
