#!/usr/bin/env bash
# Installs every Debian 12 package dripgate needs to build, test, demo and benchmark.
# Idempotent: does nothing (and needs no network) when everything is installed.
set -euo pipefail

PKGS=(
  build-essential pkg-config meson ninja-build clang llvm lld
  libdpdk-dev dpdk dpdk-dev
  libhiredis-dev libevent-dev liburing-dev libhttp-parser-dev libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libsimdjson-dev
  libcli11-dev libgtest-dev libpcap-dev libssl-dev libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler-grpc
  libbpf-dev bpftool libelf-dev zlib1g-dev linux-libc-dev
  redis-server redis-tools
  iproute2 iputils-ping tcpdump wrk nginx-light bpftrace python3 python3-grpcio curl openssl ethtool systemd
  util-linux man-db
  prometheus python3-yaml
  debhelper help2man lintian    # the Debian package (debian/): its build, man pages and check
  chromium python3-websocket    # the status page's test in headless Chromium
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The distribution's redis-server service is not what tests use (they start their own on a free
# port); stopping it is not needed, but it must not be required either.
