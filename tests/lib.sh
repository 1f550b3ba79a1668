# lib.sh - helpers for the shell tests.  Each test sources this, runs in a fresh temporary
# directory $T (removed on exit), and fails on the first broken expectation.
set -euo pipefail
MT_BIN=${MT_BIN:-build/meshtrain}
# the test build of the command: the same, with the MT_TEST_* hooks (tests/prog_meshtrain_test.c)
MT_TEST_BIN=${MT_TEST_BIN:-$(dirname "$MT_BIN")/prog_meshtrain_test}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
nfail=0
npass=0

fail() { echo "FAIL: $*" >&2; nfail=$((nfail + 1)); }
pass() { npass=$((npass + 1)); }

# expect_bad_input "description" cmd args...: exit status 2 and exactly one line on stderr
expect_bad_input() {
  local what=$1; shift
  local rc=0
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  local lines
  lines=$(wc -l <"$T/err")
  if [ "$rc" -ne 2 ]; then
    fail "$what: exit status $rc, want 2 (stderr: $(head -c 300 "$T/err"))"
  elif [ "$lines" -ne 1 ] || [ ! -s "$T/err" ]; then
    fail "$what: want one line on stderr, got $lines: $(head -c 300 "$T/err")"
  else
    pass
    echo "ok: $what -> $(cat "$T/err")"
  fi
}

# the text of the project's own sources: real bytes, no download
# a fixed text of 750 KB (tests/textgen.py's English: Debian's fortunes), the same bytes
# whatever the repository's sources say, so that a tolerance check sees the same data
make_text() { python3 "$(dirname "${BASH_SOURCE[0]}")/textgen.py" english 750000 "$1"; }

# ASCII-only text, so that its token files may declare a vocabulary of 128
make_ascii_text() { for i in $(seq 1 3000); do echo "line $i: the quick brown fox jumps over the lazy dog"; done > "$1"; }

# vocab128 DIR: DIR/train.bin and val.bin (of ASCII text) declare a vocabulary of 128
vocab128() {
  for f in train val; do printf '\200\000\000\000' | dd of="$1/$f.bin" bs=1 seek=24 conv=notrunc status=none; done
}

# the losses of a --log-json file, one per line
losses() { grep -o '"loss": [^,]*' "$1" | cut -d' ' -f2; }

# same_run what ref new: losses, weights and moments of two runs ($T/ref, $T/new) bit for bit
same_run() {
  cmp -s <(losses "$2.jsonl") <(losses "$3.jsonl") && cmp -s "$2/model.safetensors" "$3/model.safetensors" \
    && cmp -s "$2/optimizer.safetensors" "$3/optimizer.safetensors" && pass \
    || fail "$1: differs from one rank: $(losses "$2.jsonl" | tr '\n' ' ') vs $(losses "$3.jsonl" | tr '\n' ' ')"
}

# train name args...: a run logging to $T/name.jsonl and saving $T/name
train() {
  local name=$1; shift
  $MT_BIN train "$@" --log-json "$T/$name.jsonl" --save "$T/$name" > "$T/$name.out" 2>&1 \
    || fail "$name: exit $?: $(tail -3 "$T/$name.out")"
}

# resume checkpoint log save layout...: continue a checkpoint on $T/data, appending to log
resume() {
  local ck=$1 log=$2 out=$3; shift 3
  $MT_BIN train --data "$T/data" --threads 1 --eval-every 0 --log-every 0 --resume "$ck" --log-json "$log" \
    --save "$out" "$@" > "$out.out" 2>&1 || fail "resume into $out: $(tail -3 "$out.out")"
}

# same_resumed what ref log ck steps: a resumed run (the log of all its steps, its final
# checkpoint ck) bit for bit with the uninterrupted run $ref
same_resumed() {
  [ "$(losses "$3" | wc -l)" -eq "$5" ] && cmp -s <(losses "$2.jsonl") <(losses "$3") \
    && cmp -s "$2/model.safetensors" "$4/model.safetensors" \
    && cmp -s "$2/optimizer.safetensors" "$4/optimizer.safetensors" && pass \
    || fail "$1 differs: $(losses "$3" | tr '\n' ' ')"
}

finish() {
  echo "$(basename "$0" .sh): $npass passed, $nfail failed"
  [ "$nfail" -eq 0 ]
}
