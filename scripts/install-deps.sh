#!/usr/bin/env bash
# Installs the Debian packages the service and its tests need, when any is missing.
# Usage: scripts/install-deps.sh [extra packages…]
set -euo pipefail
packages=(postgresql libpq-dev libssl-dev zlib1g-dev pkg-config "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "missing packages: ${missing[*]} (install them as root)" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
for attempt in 1 2 3; do
  if $sudo apt-get -o DPkg::Lock::Timeout=120 update -qq && \
     $sudo apt-get -o DPkg::Lock::Timeout=120 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    exit 0
  fi
  echo "apt-get failed (attempt $attempt); retrying" >&2
  sleep 5
done
exit 1
