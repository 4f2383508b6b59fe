#!/usr/bin/env bash
# Proves the README's commands work on a fresh machine: builds a minimal Debian 12 root from
# Debian's own packages (mmdebstrap, variant minbase: the Essential set and apt, no compiler,
# no make, no python, no CUDA), copies the commit into it with `git archive` (nothing
# untracked leaks in), and runs the README's commands inside it as root, timing each.
# Fails on the first command that fails, naming what was missing where the log says.
#
#   scripts/fresh-machine-check.sh [--keep] [--commit REV] [--also CMD]...
#
# --also CMD runs CMD in the same root after the README's commands, timed like them (CI runs
# its fuzzing, sanitizer and soak steps so, which proves their packages come from setup.sh).
#
# Needs root and a Debian host (mmdebstrap is installed on the host when absent).
# Environment:
#   HETERO_FRESH_DIR        where the root is made (default: a new folder under /var/tmp);
#                           removed afterwards unless --keep
#   HETERO_FRESH_MIRROR     Debian mirror (default http://deb.debian.org/debian)
#   HETERO_FRESH_APT_CACHE  a host folder of downloaded .deb files, bind-mounted as the
#                           root's apt archive cache so repeated runs download less; empty
#                           (the default) caches nothing. Only .deb files are kept there:
#                           package lists, installed packages and the build start anew.
#   HETERO_FRESH_CCACHE     a host folder bind-mounted as the root's ccache directory, so
#                           repeated runs compile only what changed; empty (the default)
#                           starts every build cold. It cannot hide a missing package:
#                           configure and link always run, and ccache compiles again
#                           whenever an included file changed or is gone.
# What is carried from the host, and why: /etc/resolv.conf and the host's locally added CA
# certificates (/usr/local/share/ca-certificates), which are this site's network (a
# TLS-inspecting egress proxy), not the project's dependencies. Nothing else.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keep=0
commit=HEAD
also=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --commit) [ $# -ge 2 ] || { echo "$0: --commit needs a revision" >&2; exit 2; }; commit="$2"; shift ;;
    --also) [ $# -ge 2 ] || { echo "$0: --also needs a command" >&2; exit 2; }; also+=("$2"); shift ;;
    *) echo "usage: $0 [--keep] [--commit REV] [--also CMD]..." >&2; exit 2 ;;
  esac
  shift
done

say() { echo "fresh-machine-check: $*"; }
die() { say "FAILED: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (it makes a Debian root with mmdebstrap and chroots into it)"
command -v apt-get >/dev/null || die "needs a Debian host (apt-get) to install mmdebstrap"

# The README's commands, in order. The check refuses to run if the README no longer shows
# them, so the two cannot drift apart.
readme_commands=(
  "apt-get update && apt-get install -y make"
  "make run"
  "make test"
)
for c in "${readme_commands[@]}"; do
  grep -qF -- "$c" "$repo_root/README.md" || die "README.md no longer shows '$c'; update this check with it"
done

rev="$(git -C "$repo_root" rev-parse --verify "$commit^{commit}")" || die "no commit '$commit'"
if [ "$commit" = HEAD ] && [ -n "$(git -C "$repo_root" status --porcelain --untracked-files=no)" ]; then
  say "note: the work tree has uncommitted changes; only commit ${rev:0:12} is checked"
fi

if ! command -v mmdebstrap >/dev/null; then
  say "installing mmdebstrap on this host"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

work="${HETERO_FRESH_DIR:-$(mktemp -d /var/tmp/hetero-fresh.XXXXXX)}"
root="$work/root"
mkdir -p "$work"
[ ! -e "$root" ] || die "$root already exists; remove it or choose another HETERO_FRESH_DIR"

cleanup() {
  [ "$keep" -eq 1 ] && { say "kept the root at $root"; return; }
  # The mounts live in a private mount namespace and vanish with it; refuse to delete
  # anything that still has a mount below it all the same.
  if findmnt -rn -o TARGET | grep -q "^$root"; then
    say "not removing $root: something is still mounted below it" >&2
    return
  fi
  rm -rf "$work"
}
trap cleanup EXIT

mirror="${HETERO_FRESH_MIRROR:-http://deb.debian.org/debian}"
security="${mirror%/debian}/debian-security"
t0=$(date +%s)
say "making a minimal Debian 12 root (mmdebstrap --variant=minbase) in $root from $mirror"
mmdebstrap --quiet --variant=minbase --mode=root bookworm "$root" \
  "deb $mirror bookworm main" \
  "deb $mirror bookworm-updates main" \
  "deb $security bookworm-security main" ||
  die "mmdebstrap could not make the root"
say "root made in $(( $(date +%s) - t0 )) s: $(du -sh "$root" | cut -f1)"

# Nothing of the project's toolchain may be in it, or the check proves nothing.
for tool in make cc c++ cmake python3 nvcc git; do
  if chroot "$root" sh -c "command -v $tool" >/dev/null 2>&1; then
    die "the new root already has '$tool'; it is not a minimal root"
  fi
done
[ ! -e "$root/usr/local/cuda" ] || die "the new root has a CUDA toolkit"

mkdir -p "$root/root/hetero"
git -C "$repo_root" archive --format=tar "$rev" | tar -x -C "$root/root/hetero"
say "copied commit ${rev:0:12} (git archive): $(find "$root/root/hetero" -type f | wc -l) files"

cp -L /etc/resolv.conf "$root/etc/resolv.conf"
carried_certs=0
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  while IFS= read -r -d '' cert; do
    cp "$cert" "$root/usr/local/share/ca-certificates/"
    carried_certs=$((carried_certs + 1))
  done < <(find /usr/local/share/ca-certificates -maxdepth 1 -name '*.crt' -print0)
fi
say "carried from the host: resolv.conf and $carried_certs local CA certificate(s) (network only)"

cache_dir="${HETERO_FRESH_APT_CACHE:-}"
if [ -n "$cache_dir" ]; then
  mkdir -p "$cache_dir/partial"
  # apt locks the cache inside each root, where another root's lock is not seen: one check
  # per cache folder at a time, said plainly instead of apt's "held by process 0".
  exec 9>"$cache_dir/.fresh-machine-check.lock"
  flock -n 9 || die "another fresh-machine check is using the apt cache $cache_dir; wait for it, or set HETERO_FRESH_APT_CACHE to another folder (or to nothing)"
  # apt's own cleaning would empty the cache otherwise.
  echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' >"$root/etc/apt/apt.conf.d/10keep-debs"
  say "apt .deb cache: $cache_dir ($(find "$cache_dir" -maxdepth 1 -name '*.deb' | wc -l) files); package lists are fetched anew"
else
  say "apt .deb cache: none (every package is downloaded)"
fi

ccache_dir="${HETERO_FRESH_CCACHE:-}"
if [ -n "$ccache_dir" ]; then
  mkdir -p "$ccache_dir" "$root/root/.cache/ccache"
  # ccache's own locking keeps concurrent users apart; still, one check per folder reads plainer.
  exec 8>"$ccache_dir/.fresh-machine-check.lock"
  flock -n 8 || die "another fresh-machine check is using the ccache folder $ccache_dir; wait for it, or set HETERO_FRESH_CCACHE to another folder (or to nothing)"
  say "ccache folder: $ccache_dir ($(du -sh "$ccache_dir" | cut -f1)); configure and link run anew"
else
  say "ccache folder: none (every build is cold)"
fi

# Each command runs in a private mount and PID namespace (so no mount outlives it and no
# process is left behind), chrooted, with a login's bare environment: nothing of this host's
# PATH, Python or pip settings. Arguments: root, command, apt cache folder and ccache folder
# (either may be empty).
in_namespace='
  set -e
  root="$1" cmd="$2" cache="$3" ccache="$4"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/tmp"
  [ -z "$cache" ] || mount --bind "$cache" "$root/var/cache/apt/archives"
  [ -z "$ccache" ] || mount --bind "$ccache" "$root/root/.cache/ccache"
  exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/hetero && eval \"\$1\"" step "$cmd"'
run_in_root() {
  local cmd="$1" log="$2"
  unshare --mount --pid --fork --propagation private \
    bash -c "$in_namespace" in-namespace "$root" "$cmd" "$cache_dir" "$ccache_dir" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

summary=()
step=0
for cmd in "${readme_commands[@]}" "${also[@]}"; do
  step=$((step + 1))
  log="$work/step$step.log"
  say "running: $cmd"
  started=$(date +%s)
  status=0
  run_in_root "$cmd" "$log" || status=$?
  took=$(( $(date +%s) - started ))
  summary+=("$(printf '%-45s %5d s  exit %d' "$cmd" "$took" "$status")")
  if [ "$status" -ne 0 ]; then
    say "'$cmd' failed (exit $status) after $took s. What the log says was missing or wrong:"
    # CMake's and apt's own words for a missing piece, a compiler's, ctest's failures.
    grep -E "CMake Error|Could NOT find|Could not find|E: Unable to locate|No such file or directory|command not found|\*\*\*(Failed|Timeout|Exception)|FAILED|error:|make: \*\*\*" "$log" |
      head -n 25 | sed 's/^/  | /' || true
    printf '%s\n' "${summary[@]}" | sed 's/^/fresh-machine-check:   /'
    exit 1
  fi
  if [ "$cmd" = "make run" ] && ! grep -q '^answer: ' "$log"; then
    die "'make run' exited 0 but printed no 'answer:' line"
  fi
done

say "passed in a fresh Debian 12 root (commit ${rev:0:12}, CPU:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)):"
printf '%s\n' "${summary[@]}" | sed 's/^/fresh-machine-check:   /'
say "total $(( $(date +%s) - t0 )) s"
