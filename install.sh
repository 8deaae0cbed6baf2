#!/bin/sh
# Installs meshcnictl, the meshcni CLI, into ~/.meshcni/bin:
#
#   curl -sSfL https://github.com/meshcni/meshcni/releases/latest/download/install.sh | sh
#
# It picks the build for this OS and architecture (Linux or macOS, amd64 or arm64), checks it
# against the release's SHA256SUMS, and installs nothing unless the checksum matches.
# MESHCNI_RELEASE_URL: where the release files are (default: the latest GitHub release); https
# only, and so is every redirect (curl --proto =https --proto-redir =https; with wget each
# redirect is checked before it is followed).
# MESHCNI_HOME: where to install (default: ~/.meshcni; the binary goes into its bin/).
set -eu

base="${MESHCNI_RELEASE_URL:-https://github.com/meshcni/meshcni/releases/latest/download}"
base="${base%/}"
home="${MESHCNI_HOME:-${HOME:?HOME is not set}/.meshcni}"
bindir="$home/bin"

fail() {
  echo "meshcni install: $*" >&2
  exit 1
}

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) fail "unsupported operating system $(uname -s): meshcnictl is built for Linux and macOS" ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64 | armv8*) arch=arm64 ;;
  *) fail "unsupported architecture $(uname -m): meshcnictl is built for amd64 (x86_64) and arm64" ;;
esac
file="meshcnictl-$os-$arch"

https_only() { # URL
  case "$1" in
    https://*) ;;
    *) fail "refusing to download $1: only https:// is allowed (MESHCNI_RELEASE_URL too), redirects included" ;;
  esac
}

fetch() { # URL FILE
  https_only "$1"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --proto =https --proto-redir =https --retry 2 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    # wget's --https-only binds only recursive downloads, not redirects: they are followed here,
    # one at a time, each checked.
    url="$1"
    hops=0
    while ! wget --https-only --max-redirect=0 -S -O "$2" "$url" 2>"$tmp/headers"; do
      loc="$(sed -n 's/^  [Ll]ocation: *//p' "$tmp/headers" | tr -d '\r' | tail -n 1)"
      [ -n "$loc" ] || return 1
      hops=$((hops + 1))
      [ "$hops" -le 10 ] || fail "too many redirects downloading $1"
      case "$loc" in
        https://*) url="$loc" ;;
        //*) url="https:$loc" ;;
        /*) url="$(printf '%s' "$url" | sed 's#^\(https://[^/]*\).*#\1#')$loc" ;;
        *) fail "refusing the redirect from $url to $loc: only https:// is allowed" ;;
      esac
    done
  else
    fail "needs curl or wget to download $1"
  fi
}

sha256() { # FILE
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d ' ' -f 1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d ' ' -f 1
  elif command -v openssl >/dev/null 2>&1; then
    openssl dgst -sha256 "$1" | sed 's/^.*= *//'
  else
    fail "needs sha256sum, shasum or openssl to verify the download"
  fi
}

tmp="$(mktemp -d 2>/dev/null || mktemp -d -t meshcni)"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "meshcni install: downloading $base/$file"
fetch "$base/$file" "$tmp/$file" || fail "cannot download $base/$file (is there a release for $os-$arch?)"
fetch "$base/SHA256SUMS" "$tmp/SHA256SUMS" || fail "cannot download $base/SHA256SUMS"

expected="$(awk -v f="$file" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/SHA256SUMS")"
[ -n "$expected" ] || fail "SHA256SUMS has no line for $file; nothing was installed"
actual="$(sha256 "$tmp/$file")"
if [ "$expected" != "$actual" ]; then
  fail "checksum mismatch for $file: SHA256SUMS says $expected, the download is $actual; nothing was installed"
fi

mkdir -p "$bindir"
chmod 0755 "$tmp/$file"
# Same file system as the target, so the final rename replaces any old binary atomically.
mv "$tmp/$file" "$bindir/.meshcnictl.new"
mv -f "$bindir/.meshcnictl.new" "$bindir/meshcnictl"

if version="$("$bindir/meshcnictl" version 2>/dev/null)"; then
  echo "meshcni install: installed $version into $bindir/meshcnictl (checksum verified)"
else
  echo "meshcni install: installed $bindir/meshcnictl (checksum verified)"
fi

case ":${PATH:-}:" in
  *":$bindir:"*) ;;
  *)
    echo ""
    echo "Add meshcnictl to your PATH, for example in ~/.profile, ~/.bashrc or ~/.zshrc:"
    echo ""
    echo "  export PATH=\"$bindir:\$PATH\""
    ;;
esac
echo ""
echo "Then: meshcnictl check --pre && meshcnictl install-cni | kubectl apply -f -"
