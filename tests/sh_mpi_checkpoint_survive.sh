#!/usr/bin/env bash
# Checkpoints that survive (issue 29, docs/failures.md): every save's manifest.json (each
# file's size and SHA-256, written last, inside the stage the save swaps in); --keep-checkpoints N
# (a folder of saves DIR/step-NNNNNNNN, the newest N kept); a resume from the folder takes
# the newest intact save, one line naming each damaged one, and ends bit for bit as the
# uninterrupted run:
#  - a byte flipped in model.safetensors, a truncated optimizer.safetensors, a missing
#    manifest, each in the newest save: the save before it, on one rank and on --dp 2;
#  - every save damaged: refused, one line, exit 2; a damaged checkpoint given itself: the same;
#  - a disk that fills during a save (a small tmpfs, where it can be mounted): the save
#    fails, the previous one is intact and named, and a resume from it ends as the
#    uninterrupted run;
#  - bad input: --keep-checkpoints without --save, negative; a folder holding other files.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--data $T/data --layers 2 --heads 2 --dim 32 --seq-len 16 --batch-size 4 --steps 8 --warmup 2 --lr 3e-3
   --log-every 0 --eval-every 0 --threads 1"
flip() { python3 -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-7] ^= 1; open(p, 'wb').write(b)" "$1"; }

train ref $m
train refdp $m --dp 2
for layout in "one:" "dp:--dp 2"; do
  name=${layout%%:*} flags=${layout#*:}
  r=ref; [ $name = dp ] && r=refdp
  for damage in flip truncate manifest; do
    S="$T/$name-$damage"
    # shellcheck disable=SC2086
    $MT_BIN train $m $flags --save "$S" --keep-checkpoints 2 --save-every 2 --exit-interval 6 --log-json "$S.jsonl" \
      > "$S.out" 2>&1 || fail "$name: saves: $(tail -2 "$S.out")"
    [ "$(ls "$S")" = "$(printf 'step-00000004\nstep-00000006')" ] && [ -s "$S/step-00000006/manifest.json" ] && pass \
      || fail "$name: --keep-checkpoints 2 left $(ls "$S" | tr '\n' ' ')"
    case $damage in
      flip) flip "$S/step-00000006/model.safetensors" ;;
      truncate) truncate -s 1000 "$S/step-00000006/optimizer.safetensors" ;;
      manifest) rm "$S/step-00000006/manifest.json" ;;
    esac
    head -4 "$S.jsonl" > "$S.all.jsonl" # the log up to the save taken: steps 1-4
    # shellcheck disable=SC2086
    resume "$S" "$S.all.jsonl" "$S.final" --steps 8 $flags --layers 2 --heads 2 --dim 32 --seq-len 16 --batch-size 4 \
      --warmup 2 --lr 3e-3
    grep -q "step-00000006 is damaged" "$S.final.out" && grep -q "resuming from $S/step-00000004" "$S.final.out" \
      && [ "$(grep -c damaged "$S.final.out")" = 1 ] && pass \
      || fail "$name $damage: $(grep -i "damaged\|resum" "$S.final.out" | head -3)"
    same_resumed "$name, newest save damaged ($damage)" "$T/$r" "$S.all.jsonl" "$S.final" 8
  done
done
grep -q "model.safetensors: its SHA-256 is not the manifest's" "$T/one-flip.final.out" && pass \
  || fail "the flipped byte is not named: $(grep damaged "$T/one-flip.final.out")"
grep -q "optimizer.safetensors: 1000 bytes, the manifest says" "$T/one-truncate.final.out" && pass \
  || fail "the truncation is not named: $(grep damaged "$T/one-truncate.final.out")"
grep -q "step-00000006 is damaged (no manifest.json)" "$T/one-manifest.final.out" && pass \
  || fail "the missing manifest is not named: $(grep damaged "$T/one-manifest.final.out")"
# every save damaged; a damaged checkpoint named itself
flip "$T/one-flip/step-00000004/model.safetensors"
expect_bad_input "every save damaged" $MT_BIN train $m --resume "$T/one-flip"
grep -q "none of its 2 saves is intact" "$T/err" && pass || fail "every save damaged: $(cat "$T/err")"
expect_bad_input "a damaged checkpoint" $MT_BIN train $m --resume "$T/one-flip/step-00000006"
# a disk that fills: the save that does not fit fails, the one before it stands
mkdir -p "$T/small"
if mount -t tmpfs -o size=700k tmpfs "$T/small" 2>/dev/null; then
  trap 'umount "$T/small" 2>/dev/null || true; rm -rf "$T"' EXIT
  rc=0
  $MT_BIN train $m --save "$T/small/S" --keep-checkpoints 2 --save-every 2 --log-json "$T/small.jsonl" \
    > "$T/full.out" 2>&1 || rc=$?
  [ $rc -ne 0 ] && grep -q "No space left on device" "$T/full.out" \
    && grep -q "the previous save, $T/small/S/step-00000002, is intact" "$T/full.out" \
    && [ "$(ls -A "$T/small/S")" = step-00000002 ] && pass \
    || fail "a full disk: exit $rc, $(ls -A "$T/small/S" | tr '\n' ' '): $(grep -v '^step' "$T/full.out" | tail -3)"
  cp -r "$T/small/S" "$T/fullS"
  umount "$T/small"
  head -2 "$T/small.jsonl" > "$T/full.all.jsonl"
  resume "$T/fullS" "$T/full.all.jsonl" "$T/full" --steps 8 --layers 2 --heads 2 --dim 32 --seq-len 16 \
    --batch-size 4 --warmup 2 --lr 3e-3
  same_resumed "resumed after a full disk" "$T/ref" "$T/full.all.jsonl" "$T/full" 8
else
  echo "sh_mpi_checkpoint_survive: cannot mount a tmpfs here (not root?): the full-disk check is skipped"
fi
# bad input
expect_bad_input "--keep-checkpoints without --save" $MT_BIN train $m --keep-checkpoints 2
expect_bad_input "--keep-checkpoints -1" $MT_BIN train $m --save "$T/k" --keep-checkpoints -1
mkdir -p "$T/other" && touch "$T/other/notes.txt"
expect_bad_input "a folder with other files" $MT_BIN train $m --save "$T/other" --keep-checkpoints 2
[ -f "$T/other/notes.txt" ] && pass || fail "the folder's file went"
finish
