#!/usr/bin/env bash
# install_packages.sh PACKAGE...: installs the Debian packages among those named that are
# not installed yet (as root, or with sudo); does nothing when all are there.
#
# Another apt or dpkg may hold the package locks (unattended-upgrades, a second terminal):
# apt-get then waits for them up to MT_APT_LOCK_WAIT seconds (default 300, apt's
# DPkg::Lock::Timeout for dpkg's locks; `apt-get update`, which that setting does not cover,
# is tried again every 2 s while the package lists' lock is held), and this script says
# so first, rather than failing at once.
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
wait_s=${MT_APT_LOCK_WAIT:-300}
# who holds a lock (apt and dpkg take fcntl locks, so /proc/locks shows them): a note only
held_by() {
  local f ino pid
  for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock; do
    [ -e "$f" ] || continue
    ino=$(stat -c %i "$f")
    pid=$(awk -v ino="$ino" '$2 != "->" { n = split($6, a, ":"); if (a[n] == ino) { print $5; exit } }' /proc/locks 2>/dev/null)
    [ -n "$pid" ] && { echo "$f (process $pid: $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-60))"; return; }
  done
}
holder=$(held_by || true)
[ -z "$holder" ] || echo "install_packages: another package manager holds $holder; waiting up to ${wait_s} s for it (MT_APT_LOCK_WAIT)"
apt=(apt-get -o "DPkg::Lock::Timeout=$wait_s")
deadline=$(( $(date +%s) + wait_s ))
until $SUDO "${apt[@]}" update -qq 2>"${TMPDIR:-/tmp}/mt_apt_update.$$"; do
  if [ -z "$(held_by || true)" ] || [ "$(date +%s)" -ge "$deadline" ]; then
    cat "${TMPDIR:-/tmp}/mt_apt_update.$$" >&2
    rm -f "${TMPDIR:-/tmp}/mt_apt_update.$$"
    exit 100
  fi
  sleep 2
done
rm -f "${TMPDIR:-/tmp}/mt_apt_update.$$"
DEBIAN_FRONTEND=noninteractive $SUDO "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
