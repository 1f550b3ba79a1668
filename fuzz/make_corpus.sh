#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from files meshtrain itself makes (a one-layer checkpoint and
# a token file) and a few edge cases.  The seeds are committed; scripts/fuzz.sh adds what the
# fuzzer finds (inputs that grow coverage, and any crash once fixed), and the suite replays
# them all.  Usage: bash fuzz/make_corpus.sh (needs build/meshtrain).
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT_BIN:-build/meshtrain}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for i in $(seq 1 300); do echo "line $i: seed text for the fuzz corpus"; done > "$T/text.txt"
$MT prepare --input "$T/text.txt" --out "$T/data" >/dev/null
$MT train --data "$T/data" --layers 1 --heads 1 --dim 8 --seq-len 8 --batch-size 2 --steps 1 --log-every 0 \
  --eval-every 0 --threads 1 --save "$T/ck" >/dev/null
c=fuzz/corpus
mkdir -p $c/json $c/safetensors $c/tokens $c/checkpoint
cp "$T/ck/config.json" "$T/ck/trainer_state.json" $c/json/
python3 - "$T/ck/model.safetensors" $c/json/header.json <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
open(sys.argv[2], 'wb').write(b[8:8 + n])
PY
printf '' > $c/json/empty
printf '{"a": [1, -2.5e-3, true, false, null, "\\u00e9\\n"], "b": {}}' > $c/json/values.json
cp "$T/ck/model.safetensors" $c/safetensors/model.safetensors
head -c 300 "$T/ck/model.safetensors" > $c/safetensors/truncated.safetensors
printf '\010\000\000\000\000\000\000\000{}      ' > $c/safetensors/empty-header.safetensors
cp "$T/data/val.bin" $c/tokens/val.bin
head -c 40 "$T/data/val.bin" > $c/tokens/truncated.bin
{ printf '\000'; cat "$T/ck/config.json"; } > $c/checkpoint/config
{ printf '\001'; cat "$T/ck/trainer_state.json"; } > $c/checkpoint/state
ls -l $c/*
