#!/usr/bin/env bash
# Builds the container images the suite runs, from nothing but Debian's mirror and the host's Swift toolchain (no
# registry is reachable here; ../shared/reference/containers.md). Each image is built once per machine and reused:
#   localhost/debian:bookworm-slim          debootstrap minbase, imported
#   localhost/token-registry-builder:6.3    that base + the Swift toolchain's Debian 12 requirements
#   localhost/postgres:15, localhost/haproxy:2.6   stand-ins for the public images the compose file names
# and then, on every call, the service image itself from deploy/Dockerfile (tag: $IMAGE, default
# localhost/token-registry:dev), with the host toolchain mounted read-only into the build stage.
# Prints the build time and image size. Elsewhere the same Dockerfile builds from the public images with no arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/token-registry:dev}
podman=(podman)
conf=/etc/containers/containers.conf
if ! grep -q 'default_ulimits = \[\]' "$conf" 2>/dev/null || ! grep -q 'runtime = "runc"' "$conf" 2>/dev/null; then
  # podman's default ulimits exceed this machine's hard limits; crun does not run here ("cgroups in hybrid mode"),
  # runc does: the default for every podman call, including those docker-compose makes through podman's API.
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = []\npids_limit = 0\n\n[engine]\nruntime = "runc"\n' > "$conf"
fi
stamp() { date +%s; }
if ! "${podman[@]}" image exists localhost/debian:bookworm-slim; then
  echo "container-images: debootstrap of the Debian base (1-2 min, once per machine)" >&2
  root=$(mktemp -d /var/tmp/debian-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > /tmp/debootstrap.log 2>&1 \
    || { tail -20 /tmp/debootstrap.log >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "${podman[@]}" import --change 'CMD ["/bin/bash"]' - localhost/debian:bookworm-slim >/dev/null
  rm -rf "$root"
  trap - EXIT
fi
build_once() {   # name, containerfile
  if ! "${podman[@]}" image exists "$1"; then
    echo "container-images: building $1 (once per machine)" >&2
    "${podman[@]}" build --pull=never --layers=false --format docker -t "$1" -f "$2" deploy/local >&2
  fi
}
build_once localhost/token-registry-builder:6.3 deploy/local/builder.Containerfile
build_once localhost/postgres:15 deploy/local/postgres.Containerfile
build_once localhost/haproxy:2.6 deploy/local/haproxy.Containerfile
toolchain=$(dirname "$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")")   # /opt/swift
started=$(stamp)
"${podman[@]}" build --pull=never --layers=false --format docker -t "$IMAGE" -f deploy/Dockerfile \
  --build-arg BUILDER_IMAGE=localhost/token-registry-builder:6.3 \
  --build-arg RUNTIME_IMAGE=localhost/debian:bookworm-slim \
  -v "$toolchain:$toolchain:ro" --build-arg SWIFT_TOOLCHAIN="$toolchain" . >&2
size=$("${podman[@]}" image inspect "$IMAGE" --format '{{.Size}}')
echo "container-images: $IMAGE built in $(( $(stamp) - started )) s, $(( size / 1000000 )) MB" >&2
