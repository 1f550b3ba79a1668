#!/usr/bin/env bash
# The module graph (docs/design.md): the layers of src/ in order, from the bottom,
#   core < kernels < model < optim < text < data < io < train < comm < parallel < obs < plan < cli,
# and calls go down: no file includes a header of a higher layer.  Between the kernels and
# the commands, the device is reached through the backend only: no file of model .. obs
# includes a header of src/kernels/cpu (the CPU backend's own), only mt_backend.h.  Checked
# over every #include of every file under src/; a line names each break.
source "$(dirname "$0")/lib.sh"
layers=(core kernels model optim text data io train comm parallel obs plan cli)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

# where each header lives: its layer, and whether it is the CPU backend's
declare -A home cpu
while IFS= read -r h; do
  b=$(basename "$h")
  l=$(echo "$h" | cut -d/ -f2)
  [ -n "${home[$b]:-}" ] && fail "two headers named $b"
  home[$b]=$l
  case $h in src/kernels/cpu/*) cpu[$b]=1 ;; esac
done < <(find src -name '*.h' | sort)
[ "${#home[@]}" -gt 20 ] && pass || fail "only ${#home[@]} headers found under src/"

nchecked=0
while IFS= read -r f; do
  l=$(echo "$f" | cut -d/ -f2)
  [ -n "${rank[$l]:-}" ] || { fail "$f is in no layer"; continue; }
  while IFS= read -r inc; do
    h=$(echo "$inc" | sed -E 's/.*#include "([^"]+)".*/\1/')
    hl=${home[$h]:-}
    [ -n "$hl" ] || continue # a header of this folder's own (pipe_internal.h is found above)
    nchecked=$((nchecked + 1))
    if [ "${rank[$hl]}" -gt "${rank[$l]}" ]; then
      fail "$f ($l) includes $h of the higher layer $hl"
    elif [ -n "${cpu[$h]:-}" ] && [ "${rank[$l]}" -ge "${rank[model]}" ] && [ "$l" != cli ]; then
      fail "$f ($l) includes $h, the CPU backend's own: reach the device through mt_backend.h"
    else
      pass
    fi
  done < <(grep -E '^#include "' "$f" || true)
done < <(find src -name '*.c' -o -name '*.h' | sort)
echo "checked $nchecked includes of $(find src -name '*.c' -o -name '*.h' | wc -l) files"
[ "$nchecked" -gt 150 ] && pass || fail "only $nchecked includes checked"
finish
