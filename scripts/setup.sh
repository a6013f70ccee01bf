#!/usr/bin/env bash
# Installs everything actorpipe needs from Debian 12's packages. Idempotent:
# when every package is already present it does not touch apt at all.
set -euo pipefail
packages=(g++ cmake ninja-build ccache pkg-config libcaf-dev libuv1-dev doctest-dev libibverbs-dev iproute2 libssl-dev libthrust-dev openmpi-bin libopenmpi-dev clang libclang-rt-14-dev slurmd slurmctld slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
