#!/usr/bin/env bash
# Optimizer post-validation (--post-validate, mt_pipeline.h): each pipeline rank updates its
# stage as soon as its step ends, as if the global norm needs no clipping, and checks that
# norm after the next step; an update that had to clip is undone and made again, and the
# step after it runs again.
#  - bit for bit with one rank (losses, validation losses, weights, moments) where every
#    update clips (--grad-clip 0.5), where none does (--grad-clip 0, and 100), and where some
#    do (--grad-clip 1.3: the summary counts between 1 and steps - 1 made again), on pp 2
#    zb2, pp 4 1f1b with DDP copies, tp 2 x pp 2 zb;
#  - every step logged once, in order, though a step's stats come with the next;
#  - a save every 3 steps and --exit-interval 4, then a resume with it: the uninterrupted run;
#  - refused, one line each: without --untie-embeddings, without --pp, with ZeRO copies.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 4 --heads 4 --dim 32 --seq-len 16 --batch-size 8 --micro-batch-size 1 --steps 8
   --warmup 2 --lr 3e-3 --eval-every 4 --eval-batches 1 --log-every 0 --threads 1 --untie-embeddings"
vals() { grep -o '"val_loss": [^,]*' "$1" | cut -d' ' -f2; }
redone() { sed -n 's/^post-validation: \([0-9]*\) of \([0-9]*\) updates.*/\1/p' "$1"; }
for clip in 0.5 0 100 1.3; do
  train one$clip $m --grad-clip $clip
  for layout in "pp2:--pp 2 --schedule zb2" "dpp:--dp 2 --pp 4 --schedule 1f1b" \
                "tpp:--tp 2 --pp 2 --schedule zb --tp-blocks 2"; do
    name=${layout%%:*} flags=${layout#*:}
    ref=one$clip
    [ $name = dpp ] && { [ -d "$T/onek$clip" ] || train onek$clip $m --grad-clip $clip --accum-blocks 2; ref=onek$clip; }
    [ $name = tpp ] && { [ -d "$T/onet$clip" ] || train onet$clip $m --grad-clip $clip --tp-blocks 2; ref=onet$clip; }
    train $name$clip $m --grad-clip $clip $flags --post-validate
    same_run "$name --grad-clip $clip" "$T/$ref" "$T/$name$clip"
    cmp -s <(vals "$T/$ref.jsonl") <(vals "$T/$name$clip.jsonl") && [ "$(vals "$T/$ref.jsonl" | wc -l)" -eq 2 ] \
      && pass || fail "$name --grad-clip $clip: validation losses $(vals "$T/$name$clip.jsonl" | tr '\n' ' ')"
    [ "$(grep -o '"step": [0-9]*' "$T/$name$clip.jsonl" | cut -d' ' -f2 | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 " ] && pass \
      || fail "$name --grad-clip $clip: logged steps $(grep -o '"step": [0-9]*' "$T/$name$clip.jsonl" | tr '\n' ' ')"
    n=$(redone "$T/$name$clip.out")
    case $clip in
      0.5) [ "$n" = 8 ] ;;
      0 | 100) [ "$n" = 0 ] ;;
      1.3) [ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" -lt 8 ] ;;
    esac && pass || fail "$name --grad-clip $clip: $n of 8 updates made again ($(grep post-valid "$T/$name$clip.out"))"
  done
done
# save, exit, resume: the uninterrupted run
$MT_BIN train $m --grad-clip 1.3 --pp 2 --schedule zb2 --post-validate --save-every 3 --exit-interval 4 \
  --log-json "$T/part.jsonl" --save "$T/part" > "$T/part.out" 2>&1 || fail "exit-interval: $(tail -2 "$T/part.out")"
[ "$(grep -o '"step": [0-9]*' "$T/part.jsonl" | cut -d' ' -f2 | tr '\n' ' ')" = "1 2 3 4 " ] && pass \
  || fail "exit-interval 4: logged $(grep -o '"step": [0-9]*' "$T/part.jsonl" | tr '\n' ' ')"
cp "$T/part.jsonl" "$T/all.jsonl"
resume "$T/part" "$T/all.jsonl" "$T/rest" --pp 2 --schedule zb2 --post-validate
same_resumed "resume with --post-validate" "$T/pp21.3" "$T/all.jsonl" "$T/rest" 8
# refused before work starts
expect_bad_input "--post-validate tied" $MT_BIN train ${m/--untie-embeddings/} --pp 2 --post-validate
expect_bad_input "--post-validate without --pp" $MT_BIN train $m --post-validate
expect_bad_input "--post-validate with ZeRO copies" $MT_BIN train $m --dp 2 --pp 2 --zero 1 --post-validate
finish
