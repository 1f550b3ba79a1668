#!/usr/bin/env bash
# Many hosts on one machine (issue 29, scripts/hosts.sh): two network namespaces joined by a
# switch, mpirun started inside the first with an rsh agent, Open MPI over TCP:
#  - the ranks run on the two hosts (192.0.2.1 and 192.0.2.2, round robin);
#  - dp 2, pp 2 (zb2) and dp 2 x pp 2 across them train bit for bit as one rank does
#    (losses, weights, moments), the same bytes as the layouts on one host;
#  - hosts.sh down leaves no namespace behind.
# Skipped (exit 77, said) where namespaces cannot be made (not root, no iproute2).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export MT_HOSTS_PREFIX=mtt$$ MT_HOSTS_SLOTS=2
H="$(dirname "$0")/../scripts/hosts.sh"
rc=0
bash "$H" up 2 "$T/h" > "$T/up.out" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
  echo "sh_mpi_hosts: skipped: $(tail -1 "$T/up.out")"
  bash "$H" down "$T/h" > /dev/null 2>&1 || true
  [ $rc -eq 77 ] && exit 77
  fail "hosts.sh up 2: exit $rc: $(tail -2 "$T/up.out")"
  finish
fi
trap 'bash "$H" down "$T/h" > /dev/null 2>&1 || true; rm -rf "$T"' EXIT
MPI="$T/h/mpirun --map-by node"
where=$($MPI -np 2 sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip -4 -o addr show dev eth0 | awk "{print \$4}")"' 2>&1 | sort)
[ "$where" = "$(printf '0 192.0.2.1/24\n1 192.0.2.2/24')" ] && pass || fail "the ranks' hosts: $where"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 4 --heads 2 --dim 32 --seq-len 16 --batch-size 8 --steps 6 --warmup 2 --log-every 0
   --eval-every 0 --threads 1"
train one $m --micro-batch-size 2 --accum-blocks 2
train onepp $m --micro-batch-size 1
train local $m --micro-batch-size 2 --dp 2
for layout in "dp:2:--micro-batch-size 2 --dp 2:one" "pp:2:--micro-batch-size 1 --pp 2 --schedule zb2:onepp" \
              "dpp:4:--micro-batch-size 1 --dp 2 --pp 2 --accum-blocks 2:onek"; do
  IFS=: read -r name np flags ref <<< "$layout"
  [ $ref = onek ] && train onek $m --micro-batch-size 1 --accum-blocks 2
  # shellcheck disable=SC2086
  timeout 300 $MPI -np $np $MT_BIN train $m $flags --log-json "$T/$name.jsonl" --save "$T/$name" > "$T/$name.out" 2>&1 \
    || fail "$name across two hosts: exit $?: $(tail -3 "$T/$name.out")"
  same_run "$name across two hosts" "$T/$ref" "$T/$name"
done
cmp -s "$T/dp/model.safetensors" "$T/local/model.safetensors" && pass || fail "dp 2 across hosts differs from one host"
bash "$H" down "$T/h"
[ -z "$(ip netns list | grep "^$MT_HOSTS_PREFIX-" || true)" ] && pass || fail "namespaces left: $(ip netns list)"
finish
