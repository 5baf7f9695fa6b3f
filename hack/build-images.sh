#!/usr/bin/env bash
# Builds the four dynmig images (the scheduler extender, the device plugin,
# the DRA driver, and kube-scheduler with the DynMIG plugin) from this
# source tree, stamped with its version and VCS revision (what each binary
# prints for -version; the plugin scheduler logs it):
#
#   hack/build-images.sh                 # docker, images dynmig/<component>:<version>
#   REGISTRY=registry.example.com/dynmig PUSH=1 hack/build-images.sh
#
# Environment:
#   REGISTRY  image name prefix (default "dynmig")
#   VERSION   tag and -version string (default: git describe --tags --always --dirty)
#   REVISION  VCS revision (default: git rev-parse HEAD)
#   BUILDER   container build tool: docker or podman (default docker)
#   PLATFORM  target platform, e.g. linux/amd64 (default: the builder's)
#   PUSH      1 pushes the images after building them
#   GO_IMAGE  Go builder image (default: the one pinned in build/*.Dockerfile)
#
# Prints the image references it built, one a line, last.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY=${REGISTRY:-dynmig}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
BUILDER=${BUILDER:-docker}
# An image tag may not contain '+'; a semantic version's build metadata does.
TAG=${VERSION//+/-}

args=(--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION")
if [ -n "${GO_IMAGE:-}" ]; then args+=(--build-arg "GO_IMAGE=$GO_IMAGE"); fi
if [ -n "${PLATFORM:-}" ]; then args+=(--platform "$PLATFORM"); fi

built=()
for component in scheduler-extender device-plugin dra-driver kube-scheduler; do
  dockerfile=build/${component#scheduler-}.Dockerfile # extender, device-plugin, dra-driver, kube-scheduler
  image=$REGISTRY/$component:$TAG
  echo "== $image ($dockerfile)" >&2
  "$BUILDER" build "${args[@]}" -f "$dockerfile" -t "$image" .
  if [ "${PUSH:-0}" = 1 ]; then "$BUILDER" push "$image"; fi
  built+=("$image")
done
printf '%s\n' "${built[@]}"
