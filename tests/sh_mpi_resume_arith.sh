#!/usr/bin/env bash
# The arithmetic is part of the checkpoint (issue 26, item 6): trainer_state.json records
# the tensor-parallel blocks K (--tp-blocks, resolved), and a resume continues them unless
# the flag is given.  Saved on dp 2 x tp 2 FSDP with --tp-blocks 2 at step 4 and resumed on
# pp 2 without the flag, the run ends bit for bit with the straight one (before, the resume
# summed plainly: the same losses to 9 digits, other weights).  A layout that cannot sum in
# the checkpoint's K is refused with one line saying where K came from; --tp-blocks given
# changes it, and says so; a checkpoint that does not record K resumes as before.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 2 --heads 4 --dim 32 --seq-len 16 --batch-size 8 --micro-batch-size 2 --steps 8
   --warmup 2 --lr 3e-3 --eval-every 0 --log-every 0 --threads 1 --check-collectives"
train straight $m --dp 2 --tp 2 --zero 3 --tp-blocks 2
train half $m --dp 2 --tp 2 --zero 3 --tp-blocks 2 --exit-interval 4
grep -q '"tp_blocks": 2,' "$T/half/trainer_state.json" && pass \
  || fail "trainer_state.json does not record tp_blocks 2: $(tr '\n' ' ' < "$T/half/trainer_state.json")"
cp "$T/half.jsonl" "$T/res.jsonl"
resume "$T/half" "$T/res.jsonl" "$T/res" --pp 2
same_resumed "dp 2 x tp 2 FSDP (--tp-blocks 2) resumed on pp 2 without the flag" "$T/straight" "$T/res.jsonl" "$T/res" 8
grep -q "resumed $T/half at step 4; split sums in 2 blocks: the checkpoint's, continued" "$T/res.out" && pass \
  || fail "the resume does not say which arithmetic it continues: $(grep resumed "$T/res.out")"
grep -q '"tp_blocks": 2,' "$T/res/trainer_state.json" && pass || fail "the resumed checkpoint lost tp_blocks"
# a layout that cannot sum in 2 blocks (tp 4 needs a multiple of 4): refused, naming the checkpoint
expect_bad_input "resume of a K = 2 checkpoint on --tp 4" $MT_BIN train --data "$T/data" --resume "$T/half" --tp 4 --steps 6
grep -q "continues the checkpoint's arithmetic, $T/half/trainer_state.json" "$T/err" && pass \
  || fail "the refusal does not say where K came from: $(cat "$T/err")"
# --tp-blocks given: the new arithmetic from here on, said so
cp "$T/half.jsonl" "$T/k4.jsonl"
resume "$T/half" "$T/k4.jsonl" "$T/k4" --tp 4 --tp-blocks 4
grep -q "split sums in 4 blocks: --tp-blocks changes the checkpoint's 2 from here on" "$T/k4.out" && pass \
  || fail "a changed K is not reported: $(grep resumed "$T/k4.out")"
grep -q '"tp_blocks": 4,' "$T/k4/trainer_state.json" && pass || fail "the new K is not recorded"
# an older checkpoint without the key: resumes with the flags' arithmetic, and says it cannot know
cp -r "$T/half" "$T/old"
sed -i '/"tp_blocks"/d' "$T/old/trainer_state.json"
rm "$T/old/manifest.json" # an older checkpoint has none
resume "$T/old" "$T/old.jsonl" "$T/old2" --tp 2
grep -q "the checkpoint does not record its own" "$T/old2.out" && pass \
  || fail "an old checkpoint's resume: $(grep resumed "$T/old2.out")"
finish
