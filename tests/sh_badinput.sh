#!/usr/bin/env bash
# Bad input exits with status 2 and one clear line, before any work, and overwrites nothing.
source "$(dirname "$0")/lib.sh"
make_text "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" >/dev/null
m="--layers 2 --heads 2 --dim 32 --seq-len 32"
ok="--data $T/data $m --batch-size 4 --steps 2 --log-every 0 --eval-every 0"
$MT_BIN train $ok --save "$T/ckpt" >/dev/null

# flags and layouts
expect_bad_input "unknown command" $MT_BIN fly
expect_bad_input "unknown flag" $MT_BIN train $ok --colour blue
expect_bad_input "flag without value" $MT_BIN train $ok --lr
expect_bad_input "malformed number" $MT_BIN train $ok --lr fast
expect_bad_input "flag given twice" $MT_BIN train $ok --lr 1 --lr 2
expect_bad_input "heads not dividing width" $MT_BIN train --data "$T/data" --layers 2 --heads 3 --dim 32 --seq-len 32
expect_bad_input "sequence longer than context" $MT_BIN train $ok --context 16
expect_bad_input "batch not splitting" $MT_BIN train $ok --micro-batch-size 3
expect_bad_input "zero layers" $MT_BIN train --data "$T/data" --layers 0 --heads 2 --dim 32 --seq-len 32
expect_bad_input "missing --data" $MT_BIN train $m
expect_bad_input "missing data directory" $MT_BIN train $m --data "$T/nowhere"
expect_bad_input "vocab smaller than the data's" $MT_BIN train $ok --vocab 100
expect_bad_input "micro-batches not splitting over --dp" $MT_BIN train $ok --micro-batch-size 4 --dp 2
expect_bad_input "unknown zero stage" $MT_BIN train $ok --zero 5
expect_bad_input "tp not dividing the heads" $MT_BIN train $ok --tp 3
expect_bad_input "more stages than layers" $MT_BIN train $ok --pp 3
expect_bad_input "a degree of zero" $MT_BIN train $ok --dp 0
expect_bad_input "unknown schedule" $MT_BIN train $ok --schedule zigzag
expect_bad_input "resume with model flags" $MT_BIN train --data "$T/data" --resume "$T/ckpt" --layers 3
expect_bad_input "resume from nothing" $MT_BIN train --data "$T/data" --resume "$T/none"
expect_bad_input "untie a tied checkpoint" $MT_BIN train --data "$T/data" --resume "$T/ckpt" --untie-embeddings
cp -r "$T/ckpt" "$T/tiebad" && sed -i 's/"tie_word_embeddings": true/"tie_word_embeddings": "yes"/' "$T/tiebad/config.json"
expect_bad_input "tie_word_embeddings not a boolean" $MT_BIN eval --ckpt "$T/tiebad" --data "$T/data/val.bin"
cp -r "$T/ckpt" "$T/tienone" && sed -i 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$T/tienone/config.json"
expect_bad_input "untied config without lm_head.weight" $MT_BIN eval --ckpt "$T/tienone" --data "$T/data/val.bin"
expect_bad_input "prepare without --out" $MT_BIN prepare --input "$T/text.txt"
expect_bad_input "prepare of a missing file" $MT_BIN prepare --input "$T/missing.txt" --out "$T/d2"
expect_bad_input "eval without checkpoint" $MT_BIN eval --data "$T/data/val.bin"
expect_bad_input "eval of a missing checkpoint" $MT_BIN eval --ckpt "$T/none" --data "$T/data/val.bin"
expect_bad_input "sample without checkpoint" $MT_BIN sample --prompt hi

# nothing is overwritten: prepare over existing data, --save over a foreign directory,
# and a failing run keeps the log file and checkpoint it was pointed at
sum_before=$(cat "$T/data/"*.bin "$T/ckpt/"* | md5sum)
expect_bad_input "prepare over existing data" $MT_BIN prepare --input "$T/text.txt" --out "$T/data"
mkdir "$T/foreign" && echo precious > "$T/foreign/notes.txt"
expect_bad_input "save over a foreign directory" $MT_BIN train $ok --save "$T/foreign"
[ "$(cat "$T/foreign/notes.txt")" = precious ] && pass || fail "foreign directory was touched"
echo "old log" > "$T/log.jsonl"
expect_bad_input "bad flag with a log file" $MT_BIN train $ok --log-json "$T/log.jsonl" --save "$T/ckpt" --zero 9
[ "$(cat "$T/log.jsonl")" = "old log" ] && pass || fail "log file was overwritten by a failing run"
[ "$(cat "$T/data/"*.bin "$T/ckpt/"* | md5sum)" = "$sum_before" ] && pass || fail "data or checkpoint changed"

# corrupted, truncated and oversized safetensors files, and a bad token file
corrupt() { # dir-name, then a command that damages $T/<dir-name>/model.safetensors
  local d="$T/$1"; shift
  cp -r "$T/ckpt" "$d"
  "$@" "$d/model.safetensors"
}
corrupt trunc truncate -s 1000
expect_bad_input "truncated safetensors (eval)" $MT_BIN eval --ckpt "$T/trunc" --data "$T/data/val.bin"
expect_bad_input "truncated safetensors (resume)" $MT_BIN train --data "$T/data" --resume "$T/trunc" --steps 3
corrupt big sh -c 'printf "\377\377\377\377\377\377\377\177" | dd of="$0" conv=notrunc status=none'
expect_bad_input "oversized header length" $MT_BIN eval --ckpt "$T/big" --data "$T/data/val.bin"
corrupt json sh -c 'printf "{\"x\": " | dd of="$0" bs=1 seek=8 conv=notrunc status=none'
expect_bad_input "corrupt header JSON" $MT_BIN eval --ckpt "$T/json" --data "$T/data/val.bin"
corrupt extra sh -c 'printf "0123456789" >> "$0"'
expect_bad_input "trailing bytes (oversized file)" $MT_BIN eval --ckpt "$T/extra" --data "$T/data/val.bin"
cp -r "$T/ckpt" "$T/cfg" && sed -i 's/"n_embd": 32/"n_embd": 64/' "$T/cfg/config.json"
expect_bad_input "config does not match the tensors" $MT_BIN eval --ckpt "$T/cfg" --data "$T/data/val.bin"
head -c 20 "$T/data/val.bin" > "$T/short.bin"
expect_bad_input "truncated token file" $MT_BIN eval --ckpt "$T/ckpt" --data "$T/short.bin"
finish
