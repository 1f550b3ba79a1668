#!/usr/bin/env bash
# The help is the truth (issue 25).  For every subcommand: every flag its --help lists is
# one its parser knows (given, it is never an "unknown flag"), the dry run lists the same
# flags, and every default the help prints is the one the command uses: the settings a dry
# run resolves are the same with the flag left out and with the printed default given.
# Then what the help says a 0 stands for, against the dry run and against a real run's
# banner (micro-batch size and threads under --dp 2, --microbatches, --context, --tp-blocks,
# eval's window, bench's micro-batch), and a singular "1 thread".
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
tiny="--layers 1 --heads 2 --dim 32 --seq-len 16 --batch-size 4 --threads 1"
$MT_BIN train --data "$T/data" $tiny --steps 1 --eval-batches 0 --save "$T/ck" >/dev/null
ncores=$(nproc)

# a subcommand's help entries, one line each (wrapped lines joined)
entries() {
  $MT_BIN "$@" --help | awk '/^  --/ { if (e != "") print e; e = $0; next }
    /^      / { sub(/^ +/, " "); e = e $0; next } END { if (e != "") print e }'
}
python3 -c "
import base64
with open('$T/v.tiktoken', 'w') as f:
    for i in range(256):
        f.write(base64.b64encode(bytes([i])).decode() + ' ' + str(i) + '\n')"
declare -A base=(
  [train]="--data $T/data" [prepare]="--input $T/text.txt --out $T/new" [eval]="--ckpt $T/ck --data $T/data/val.bin"
  [sample]="--ckpt $T/ck" [bench]="" [schedule]="--pp 2 --microbatches 4" [bench-comm]=""
  [tokenizer encode]="--tokenizer $T/v.tiktoken" [tokenizer decode]="--tokenizer $T/v.tiktoken"
  [tokenizer import]="--from $T/v.tiktoken --out $T/imported"
  [tokenizer train]="--input $T/text.txt --vocab-size 300 --out $T/trained"
)
for cmd in train prepare eval sample bench schedule bench-comm "tokenizer encode" "tokenizer decode" "tokenizer import" \
           "tokenizer train"; do
  b=${base[$cmd]}
  entries $cmd > "$T/help.txt"
  [ -s "$T/help.txt" ] || { fail "$cmd --help lists no flags"; continue; }
  $MT_BIN $cmd $b --dry-run > "$T/dry0.txt" 2> "$T/err" || { fail "$cmd $b --dry-run: $(cat "$T/err")"; continue; }
  cmp -s <(awk '{print $1}' "$T/help.txt") <(awk '{print $1}' "$T/dry0.txt") && pass \
    || fail "$cmd: the help lists $(awk '{print $1}' "$T/help.txt" | tr '\n' ' '), the dry run $(awk '{print $1}' "$T/dry0.txt" | tr '\n' ' ')"
  nd=0
  while read -r line; do
    name=${line%% *}
    name=${name#--}
    [ "$name" = dry-run ] && continue
    def=$(echo "$line" | sed -n 's/.*(default: \([^)]*\))$/\1/p')
    case " $b " in *" --$name "*) continue ;; esac # the base arguments give it already
    if [ -n "$def" ]; then
      nd=$((nd + 1))
      rc=0
      $MT_BIN $cmd $b --dry-run "--$name" "$def" > "$T/dry1.txt" 2> "$T/err" || rc=$?
      [ $rc -eq 0 ] && cmp -s "$T/dry0.txt" "$T/dry1.txt" && pass \
        || fail "$cmd --$name $def (the printed default): exit $rc, $(cat "$T/err") $(diff "$T/dry0.txt" "$T/dry1.txt" | tr '\n' ' ')"
    else # known to the parser: whatever it thinks of the value, never an unknown flag
      if echo "$line" | grep -q "^  --$name  "; then arg=("--$name"); else arg=("--$name" x); fi
      $MT_BIN $cmd $b --dry-run "${arg[@]}" > /dev/null 2> "$T/err" || true
      grep -q "unknown flag" "$T/err" && fail "$cmd ${arg[*]}: $(cat "$T/err")" || pass
    fi
  done < "$T/help.txt"
  echo "$cmd: $(wc -l < "$T/help.txt") flags, $nd printed defaults checked"
done

# what 0 stands for, as the help says it
dry() { $MT_BIN train --data "$T/data" --dry-run "$@"; }
val() { grep "^--$1 " | cut -d' ' -f2; }
[ "$(dry --dp 2 | val micro-batch-size)" = 8 ] && [ "$(dry --dp 2 | val microbatches)" = 2 ] && pass \
  || fail "--dp 2: micro-batch $(dry --dp 2 | val micro-batch-size), want batch / dp = 8"
[ "$(dry | val micro-batch-size)" = 16 ] && [ "$(dry --microbatches 4 | val micro-batch-size)" = 4 ] \
  && [ "$(dry --micro-batch-size 2 | val microbatches)" = 8 ] && pass || fail "--microbatches and --micro-batch-size"
[ "$(dry --seq-len 32 | val context)" = 32 ] && [ "$(dry --tp 2 | val tp-blocks)" = 2 ] \
  && [ "$(dry | val tp-blocks)" = 1 ] && pass || fail "--context 0 is --seq-len, --tp-blocks 0 is --tp"
want1=$ncores want2=$((ncores / 2 > 0 ? ncores / 2 : 1))
[ "$(dry | val threads)" = "$want1" ] && [ "$(dry --dp 2 | val threads)" = "$want2" ] \
  && [ "$(OMP_NUM_THREADS=3 dry --dp 2 | val threads)" = 3 ] && pass \
  || fail "--threads 0: $(dry | val threads) on one rank, $(dry --dp 2 | val threads) per rank of dp 2 ($ncores cores)"
[ "$($MT_BIN eval --ckpt "$T/ck" --data "$T/data/val.bin" --dry-run | val seq-len)" = 16 ] \
  && [ "$($MT_BIN bench --batch-size 6 --dry-run | val micro-batch-size)" = 6 ] && pass \
  || fail "eval's --seq-len 0 (the checkpoint's context 16), bench's --micro-batch-size 0 (the batch)"
# the dry run is the run: a real dp 2 run uses the micro-batch and threads it printed
small="--layers 1 --heads 2 --dim 32 --seq-len 16 --batch-size 4"
d=$(dry $small --dp 2)
$MT_BIN train --data "$T/data" $small --dp 2 --steps 1 --eval-batches 0 > "$T/run.out" 2>&1 || fail "dp 2 run: $(tail -2 "$T/run.out")"
t=$(echo "$d" | val threads)
s=$([ "$t" = 1 ] && echo "" || echo s)
grep -q "(micro-batch $(echo "$d" | val micro-batch-size)), 1 step from step 0, $t thread$s," "$T/run.out" && pass \
  || fail "the run's banner does not match its dry run (micro $(echo "$d" | val micro-batch-size), threads $t): $(grep batch "$T/run.out")"

$MT_BIN train --data "$T/data" $tiny --steps 1 --eval-batches 0 > "$T/one.out" 2>&1
grep -q "1 step from step 0, 1 thread, " "$T/one.out" && pass || fail "the banner's singular: $(grep batch "$T/one.out")"
finish
