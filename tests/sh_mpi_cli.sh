#!/usr/bin/env bash
# The command line as a user expects (issue 10, item 5):
#  - --dp N without --micro-batch-size gives each rank one micro-batch of batch / N, and
#    that run is the one-rank run with that micro-batch, bit for bit;
#  - --resume accepts model flags that repeat the checkpoint's and refuses a conflict,
#    quoting both values; the resumed run is the uninterrupted one;
#  - under an explicit mpirun -np 3, a bad flag is printed once and the job exits 2;
#  - config.json's bos/eos token ids are valid for the vocabulary (null without GPT-2's);
#  - OMP_NUM_THREADS, when set, is the default thread count; --threads overrides it.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--layers 2 --heads 2 --dim 32"
run="--data $T/data $m --seq-len 32 --batch-size 8 --steps 4 --warmup 1 --lr 3e-3 --eval-every 0 --log-every 0
     --threads 1"

# default micro-batch under --dp
train dp1 $run --micro-batch-size 4 --accum-blocks 2 # as dp 2 sums: one block per rank
train dp2 $run --dp 2
grep -q "micro-batch 4)" "$T/dp2.out" && pass || fail "--dp 2 --batch-size 8: want micro-batch 4: $(grep batch "$T/dp2.out")"
same_run "--dp 2 with the default micro-batch" "$T/dp1" "$T/dp2"
expect_bad_input "batch not splitting over --dp" $MT_BIN train --data "$T/data" $m --batch-size 5 --dp 2

# --resume with the model's own flags: accepted and the same run; a conflict quotes both values
train half $run --micro-batch-size 4 --accum-blocks 2 --exit-interval 2
cp "$T/half.jsonl" "$T/res.jsonl"
resume "$T/half" "$T/res.jsonl" "$T/res" $m --vocab 256 --context 32
same_resumed "resume with the checkpoint's model flags" "$T/dp1" "$T/res.jsonl" "$T/res" 4
expect_bad_input "resume with a conflicting --layers" $MT_BIN train --data "$T/data" --resume "$T/half" --layers 3
grep -q -- "--layers 3" "$T/err" && grep -q "n_layer 2" "$T/err" && pass \
  || fail "the conflict does not quote both values: $(cat "$T/err")"

# a bad flag under an explicit mpirun: one line from the job, exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0
timeout 60 ${MT_MPIEXEC:-mpiexec} --oversubscribe --mca btl_vader_single_copy_mechanism none -n 3 \
  $MT_BIN train --data "$T/data" --colour blue >"$T/out" 2>"$T/err" || rc=$?
n=$(grep -c "^meshtrain train: unknown flag --colour" "$T/err" || true)
[ "$rc" -eq 2 ] && [ "$n" -eq 1 ] && pass || fail "mpirun -np 3 with a bad flag: exit $rc, printed $n times"
echo "mpirun -np 3 --colour blue: exit $rc, printed $n time(s)"

# config.json's special token ids
for f in bos_token_id eos_token_id; do
  grep -q "\"$f\": null," "$T/dp1/config.json" && pass || fail "vocab 256: $f is not null: $(grep "$f" "$T/dp1/config.json")"
done
train gpt2vocab --data "$T/data" --layers 1 --heads 2 --dim 16 --seq-len 16 --vocab 50257 --batch-size 2 --steps 1 \
  --eval-every 0 --threads 1
grep -q '"eos_token_id": 50256,' "$T/gpt2vocab/config.json" && pass \
  || fail "vocab 50257: want GPT-2's eos 50256: $(grep eos "$T/gpt2vocab/config.json")"

# OMP_NUM_THREADS as the default thread count
threads() { $MT_BIN train --data "$T/data" $m --seq-len 32 --batch-size 2 --steps 1 --eval-every 0 "$@" \
  | grep -o '[0-9]* threads\?,'; }
[ "$(OMP_NUM_THREADS=3 threads)" = "3 threads," ] && pass || fail "OMP_NUM_THREADS=3: $(OMP_NUM_THREADS=3 threads)"
[ "$(OMP_NUM_THREADS=3,1 threads)" = "3 threads," ] && pass || fail "OMP_NUM_THREADS=3,1: $(OMP_NUM_THREADS=3,1 threads)"
[ "$(OMP_NUM_THREADS=3 threads --threads 1)" = "1 thread," ] && pass \
  || fail "--threads 1 under OMP_NUM_THREADS=3: $(OMP_NUM_THREADS=3 threads --threads 1)"
finish
