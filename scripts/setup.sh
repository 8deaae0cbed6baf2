#!/bin/sh
# Installs what `npm test`, `npm run demo` and `bun run bench` need and this machine lacks:
# bun (from npm, into node_modules) and, as root on Debian, the packages for real network
# namespaces, iptables (legacy and nft), the reference CNI plugins, podman, containerd, openssl,
# curl, wget and zsh, and for the arm64 image (bun run image, test/agent/image.test.ts) the
# arm64 architecture in dpkg (Debian's arm64 libc6 goes into the image) and qemu-user-static
# (runs the arm64 binaries). Packages already present are left alone. Safe to run again.
set -eu
cd "$(dirname "$0")/.."

if [ ! -x node_modules/.bin/bun ] || [ ! -d node_modules/valibot ] || [ ! -x node_modules/.bin/biome ] || [ ! -x node_modules/.bin/depcruise ]; then
  echo "setup: installing node modules (bun from npm)"
  npm install --no-audit --no-fund --loglevel=error
fi

need=""
have() { command -v "$1" >/dev/null 2>&1; }
pkg_for() { # command -> Debian package
  case "$1" in
    iptables-legacy|iptables-nft|ip6tables-nft) echo iptables ;;
    nft) echo nftables ;;
    /usr/lib/cni/bridge) echo containernetworking-plugins ;;
    podman) echo podman ;;
    containerd|ctr|containerd-shim-runc-v2) echo containerd ;;
    ip) echo iproute2 ;;
    nsenter) echo util-linux ;;
    openssl) echo openssl ;;
    curl) echo curl ;;
    wget) echo wget ;;
    zsh) echo zsh ;;
    time) echo time ;;
    strace) echo strace ;;
    readelf) echo binutils ;;
  esac
}
# wget and zsh: meshcnictl's install.sh and zsh completion are tested with them. containerd, ctr
# and the runc shim: test/support/cri.ts runs containerd's CRI as kubelet drives it. strace:
# test/plugin/agent.test.ts proves a DEL without a record runs no process. readelf: the host
# check's and the ELF rewrite's tests compare what they read and write with binutils' reading.
for c in iptables-legacy iptables-nft nft ip nsenter openssl curl wget zsh strace readelf /usr/lib/cni/bridge podman containerd ctr containerd-shim-runc-v2; do
  case "$c" in
    /*) [ -x "$c" ] && continue ;;
    *) have "$c" && continue ;;
  esac
  need="$need $(pkg_for "$c")"
done
[ -x /usr/bin/time ] || need="$need time"
# podman here runs containers with runc (crun cannot on this kernel's cgroup layout), and the
# test containers' rootfs is a statically linked busybox.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
installed runc || need="$need runc"
installed busybox-static || need="$need busybox-static"
installed qemu-user-static || need="$need qemu-user-static"
update=""
if [ "$(id -u)" = 0 ] && command -v dpkg >/dev/null 2>&1; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg (for apt-get download libc6:arm64)"
    dpkg --add-architecture arm64
    update=1
  fi
  apt-cache show libc6:arm64 >/dev/null 2>&1 || update=1
fi
need=$(printf '%s\n' $need | sort -u | tr '\n' ' ')
need=${need% }
if [ -n "$need" ] || [ -n "$update" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: $need (run as root to install them)" >&2
  else
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if [ -n "$need" ]; then
      echo "setup: installing Debian packages: $need"
      # shellcheck disable=SC2086
      apt-get install -y -qq --no-install-recommends $need >/dev/null
    fi
  fi
fi
