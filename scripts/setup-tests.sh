#!/bin/bash
# What gemmscope's CPU test suite needs beyond `pip install -e '.[test]'`, on a Debian machine with
# no GPU (run as root: it uses apt-get). Each part is skipped when already there, so running it
# again changes nothing; it prints what it did, and nsys's path last.
#
#   a C compiler          tests/fixtures/cpu/make_traces.sh builds the CPU fixture programs
#   Nsight Systems        2023.4.4 from Debian's non-free packages, unpacked into a folder: it
#                         profiles CPU programs (--trace=nvtx,osrt) and exports reports, which is
#                         what the CPU trace tests need; tests/conftest.py looks in the default
#                         folder, so no variable needs setting
#   torch, CPU build      the autocast hook's tests (tests/test_autocast_hook.py, test_torch_capture.py)
#   Chromium              the tests that open `gemmscope report`'s page in a real headless browser
#
# What it leaves on the machine beside those, said at its end on every run: the apt source of
# Debian trixie's non-free component and its pin (APT_SOURCE, APT_PIN below; remove both to undo),
# where it had to add them to find nsys's packages.
#
# Usage: bash scripts/setup-tests.sh
#   GEMMSCOPE_NSYS_DIR=DIR   install nsys there instead of /opt/nsys-cpu (then export NSYS as printed)
set -euo pipefail

NSYS_DIR=${GEMMSCOPE_NSYS_DIR:-/opt/nsys-cpu}
APT_SOURCE=/etc/apt/sources.list.d/gemmscope-nsys.sources
APT_PIN=/etc/apt/preferences.d/gemmscope-nsys
NSYS_DEBIAN_VERSION=2023.4.4.54~12.4.1-2
# 2.13.0: the release CI's machine holds as a CPU wheel; pip's default download of torch is a
# CUDA build of several GB, so elsewhere the CPU build comes from PyTorch's CPU index.
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

export DEBIAN_FRONTEND=noninteractive
say() { echo "setup-tests: $*" >&2; }
apt_updated=false
apt_install() {
  if ! $apt_updated; then apt-get update -qq >/dev/null; apt_updated=true; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
# grep reads to the end (no -q): under pipefail, apt-cache cut off early would read as "not there"
has_nsys_packages() { apt-cache policy nsight-systems-target 2>/dev/null | grep -F "$NSYS_DEBIAN_VERSION" >/dev/null; }

# --- C compiler ---------------------------------------------------------------------------------
if command -v cc >/dev/null || command -v gcc >/dev/null; then
  say "C compiler: $(command -v cc || command -v gcc) (already there)"
else
  apt_install gcc libc6-dev
  say "C compiler: installed gcc"
fi

# --- Nsight Systems -----------------------------------------------------------------------------
nsys="$NSYS_DIR/target-linux-x64/nsys"
if [ -x "$nsys" ]; then
  say "nsys: $nsys (already there)"
else
  # The packages live in Debian trixie's non-free component: added to apt's sources where no
  # source gives them yet, pinned low (priority 50) so that only what is asked for by version
  # comes from there and every other package of this machine stays where it is.
  if ! has_nsys_packages; then
    apt-get update -qq >/dev/null
    apt_updated=true
  fi
  if ! has_nsys_packages; then
    cat > "$APT_SOURCE" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 50\n' > "$APT_PIN"
    apt-get update -qq >/dev/null
    say "nsys: added the apt source $APT_SOURCE (Debian trixie non-free) and its pin $APT_PIN (priority 50)"
  fi
  apt_install libssh-4 libpfm4 libelf1 libdw1  # what nsys's binaries link against
  say "nsys: installed libssh-4 libpfm4 libelf1 libdw1 (what its binaries link against)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chown _apt "$work" 2>/dev/null || true  # apt-get download fetches as its own user where there is one
  # downloaded and unpacked into the folder, not installed: the system gains only the libraries above
  (cd "$work" && apt-get download -qq "nsight-systems=$NSYS_DEBIAN_VERSION" \
    "nsight-systems-target=$NSYS_DEBIAN_VERSION" >/dev/null)
  for package in "$work"/*.deb; do dpkg -x "$package" "$work/unpacked"; done
  mkdir -p "$NSYS_DIR"
  cp -a "$work/unpacked/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$NSYS_DIR/"
  cp -a "$work/unpacked/usr/lib/nsight-systems/host-linux-x64" "$NSYS_DIR/"
  # Debian moves the Python modules of `nsys stats` to dist-packages; nsys looks beside itself
  mkdir -p "$NSYS_DIR/host-linux-x64/python/lib"
  cp -L "$work"/unpacked/usr/lib/python3/dist-packages/*.py "$NSYS_DIR/host-linux-x64/python/lib/"
  # the packages link libssh.so through a path of their own; point it at the system's copy
  ln -sf "$(ldconfig -p | awk '/libssh.so.4 /{print $NF; exit}')" "$NSYS_DIR/host-linux-x64/libssh.so"
  say "nsys: installed $("$nsys" --version) into $NSYS_DIR"
fi
if [ "$NSYS_DIR" != /opt/nsys-cpu ]; then
  say "nsys is outside the tests' default folder: export NSYS=$nsys"
fi

# --- torch, CPU build ---------------------------------------------------------------------------
if python -c 'import torch' 2>/dev/null; then
  say "torch: $(python -c 'import torch; print(torch.__version__)') (already there)"
else
  # Where PyTorch's CPU index cannot be reached, pip's own configuration decides (CI's holds the
  # CPU wheel); a quick look first, as pip would retry an unreachable index for over a minute.
  if python -c "import urllib.request; urllib.request.urlopen('$TORCH_CPU_INDEX/torch/', timeout=5)" 2>/dev/null; then
    python -m pip install -q "torch==$TORCH_VERSION" --index-url "$TORCH_CPU_INDEX"
    say "torch: installed $TORCH_VERSION from $TORCH_CPU_INDEX"
  else
    python -m pip install -q "torch==$TORCH_VERSION"
    say "torch: installed $TORCH_VERSION as pip's configuration finds it ($TORCH_CPU_INDEX not reachable)"
  fi
fi

# --- Chromium -----------------------------------------------------------------------------------
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  say "chromium: $(command -v chromium || command -v chromium-browser) (already there)"
else
  apt_install chromium
  say "chromium: installed $(chromium --version 2>/dev/null || echo chromium)"
fi

# --- What it leaves behind ------------------------------------------------------------------------
# Beside the tools above, apt's configuration changed where nsys's packages needed it: said on every
# run, with how to undo it (apt-get then finds nothing more from trixie than before).
for left in "$APT_SOURCE" "$APT_PIN"; do
  if [ -e "$left" ]; then
    say "left behind: $left (for nsys's packages; remove it, then apt-get update, to undo)"
  fi
done

echo "$nsys"
