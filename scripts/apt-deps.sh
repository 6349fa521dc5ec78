#!/usr/bin/env bash
# The Debian packages the test suite drives, installed where missing, all at once: `apt-get update` runs at most once and
# only when something is missing, and a dpkg/apt lock held by another process (unattended upgrades, another install) is
# waited for, never fought. Not root or no apt: say what is missing (those tests skip and say why) and go on.
#   chromium                          the dashboard's browser test (Playwright drives Debian's build, never its own download)
#   ocl-icd-libopencl1 pocl-opencl-icd  OpenCL on the CPU (PoCL): the GPU-style kernels run for real
#   hipcc                             builds the HIP renderer's source for AMD GPUs (ROCm's LLVM, ~40 MB)
#   clang                             tinygrad's CLANG device (tests/test_tinygrad_integration.py, bench/tinygrad_models.py)
#   postgresql                        the store's PostgreSQL tests (scripts/postgres.sh starts it)
# Usage: scripts/apt-deps.sh [PACKAGE...]   (default: all of the above)
set -euo pipefail
PKGS=("$@")
[ ${#PKGS[@]} -gt 0 ] || PKGS=(chromium ocl-icd-libopencl1 pocl-opencl-icd hipcc clang postgresql)
LOCK_WAIT_S=${APT_LOCK_WAIT_S:-900}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "apt-deps: missing ${missing[*]} (not root or no apt-get: the tests that need them skip and say why)" >&2
  exit 0
fi

# apt-get waits for the dpkg frontend lock itself (DPkg::Lock::Timeout); `update` takes the lists lock, which that option
# does not cover on every apt version, so a failure that names a lock is retried until LOCK_WAIT_S has passed.
apt_locked() {
  local deadline=$((SECONDS + LOCK_WAIT_S)) err
  while true; do
    if err=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT_S" "$@" 2>&1 >/dev/null); then return 0; fi
    if ! grep -qiE "could not get lock|unable to acquire|is held by process|temporarily unavailable" <<<"$err" || [ $SECONDS -ge $deadline ]; then
      echo "$err" >&2
      return 1
    fi
    echo "apt-deps: the apt lock is held by another process; waiting" >&2
    sleep 5
  done
}

echo "apt-deps: installing ${missing[*]}" >&2
apt_locked update -qq
# chromium takes its recommends (fonts); the rest do without theirs (hipcc's would pull in much of ROCm)
lean=() full=()
for p in "${missing[@]}"; do if [ "$p" = chromium ]; then full+=("$p"); else lean+=("$p"); fi; done
[ ${#lean[@]} -eq 0 ] || apt_locked install -y -qq --no-install-recommends "${lean[@]}"
[ ${#full[@]} -eq 0 ] || apt_locked install -y -qq "${full[@]}"
