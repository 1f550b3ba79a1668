#!/usr/bin/env bash
# meshtrain tokenizer import | encode | decode on a small vocabulary this test writes (the
# 256 bytes and a few merges, as a tiktoken rank file): the round trip of text, of invalid
# UTF-8 and of every output format; <|endoftext|> as the token and, with --no-special, as
# text; the vocabulary imported into Hugging Face's files and read back from tokenizer.json
# and from vocab.json + merges.txt with the same ids; and every bad input (a broken rank
# file, a missing one, broken Hugging Face files, an id outside the vocabulary, ids that
# are not numbers, a bad --format, an existing --out): exit 2, one line, nothing written.
# Into training: prepare --tokenizer writes the vocabulary's tokens (the same on 1, 2 and 3
# threads, as tokenizer encode's; several inputs as documents separated by <|endoftext|>) and
# DIR/tokenizer, staged and committed with nothing left behind (a vocabulary whose files
# cannot be written: exit 2, nothing written); train
# takes the model's vocabulary from the data (and refuses a smaller --vocab), and its
# checkpoints carry the tokenizer files, with <|endoftext|> as bos and eos in config.json;
# eval --text and sample read and write text through the checkpoint's tokenizer.
source "$(dirname "$0")/lib.sh"
v="$T/v.tiktoken"
python3 - "$v" <<'PY'
import base64, sys
toks = [bytes([i]) for i in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wo", b"ld", b"rld", b" world"]
with open(sys.argv[1], "w") as f:
    for r, t in enumerate(toks):
        f.write(base64.b64encode(t).decode() + " " + str(r) + "\n")
PY
enc() { $MT_BIN tokenizer encode --tokenizer "$v" "$@"; }
dec() { $MT_BIN tokenizer decode --tokenizer "$v" "$@"; }
[ "$(printf 'hello world' | enc)" = "259 264" ] && pass || fail "hello world: $(printf 'hello world' | enc)"
[ "$(printf 'hello<|endoftext|>x' | enc)" = "259 265 120" ] && pass || fail "the special: $(printf 'hello<|endoftext|>x' | enc)"
[ "$(printf '<|endoftext|>' | enc --no-special | wc -w)" -gt 1 ] && pass || fail "--no-special: $(printf '<|endoftext|>' | enc --no-special)"
head -c 20000 /dev/urandom > "$T/rand.bin"
printf 'hello world\xff\xfe caf\xc3\xa9 \xed\xa0\x80 <|endoftext|> end  ' >> "$T/rand.bin"
for fmt in text u16 u32; do
  enc --input "$T/rand.bin" --out "$T/ids.$fmt" --format $fmt && dec --input "$T/ids.$fmt" --format $fmt --out "$T/back.$fmt"
  cmp -s "$T/rand.bin" "$T/back.$fmt" && pass || fail "--format $fmt: random bytes do not come back"
done
[ "$(wc -c < "$T/ids.u16")" -eq $(( $(wc -w < "$T/ids.text") * 2 )) ] && pass || fail "u16: not 2 bytes per id"
echo "ok: 20 KB of random bytes and invalid UTF-8 round-trip in text, u16 and u32"
# bad input: exit 2, one line, nothing written
printf 'YWJj 0\n' > "$T/short.tiktoken"
printf 'YW*= 0\n' > "$T/b64.tiktoken"
expect_bad_input "a rank file without every byte" $MT_BIN tokenizer encode --tokenizer "$T/short.tiktoken" --out "$T/no1" < /dev/null
expect_bad_input "bad base64" $MT_BIN tokenizer encode --tokenizer "$T/b64.tiktoken" --out "$T/no2" < /dev/null
expect_bad_input "a missing rank file" $MT_BIN tokenizer encode --tokenizer "$T/none.tiktoken" --out "$T/no3" < /dev/null
echo "1 2 99999" > "$T/bad.ids"
expect_bad_input "an id outside the vocabulary" $MT_BIN tokenizer decode --tokenizer "$v" --input "$T/bad.ids" --out "$T/no4"
echo "1 x 2" > "$T/nan.ids"
expect_bad_input "ids that are not numbers" $MT_BIN tokenizer decode --tokenizer "$v" --input "$T/nan.ids" --out "$T/no5"
expect_bad_input "a bad --format" $MT_BIN tokenizer encode --tokenizer "$v" --format u8 --out "$T/no6" < /dev/null
expect_bad_input "no --tokenizer" $MT_BIN tokenizer encode --out "$T/no7" < /dev/null
expect_bad_input "an unknown subcommand" $MT_BIN tokenizer train
# Hugging Face's files: imported, then read back (tokenizer.json; vocab.json + merges.txt)
$MT_BIN tokenizer import --from "$v" --out "$T/hf" > /dev/null || fail "import: exit $?"
for f in tokenizer.json vocab.json merges.txt tokenizer_config.json; do [ -s "$T/hf/$f" ] && pass || fail "import wrote no $f"; done
head -1 "$T/hf/merges.txt" | grep -q "^#version: 0.2$" && sed -n 2p "$T/hf/merges.txt" | grep -q "^h e$" && pass \
  || fail "merges.txt: $(head -3 "$T/hf/merges.txt" | tr '\n' '|')"
mkdir "$T/vm" && cp "$T/hf/vocab.json" "$T/hf/merges.txt" "$T/vm/"
for d in "$T/hf" "$T/hf/tokenizer.json" "$T/vm"; do
  enc --input "$T/rand.bin" --out "$T/want.txt"
  $MT_BIN tokenizer encode --tokenizer "$d" --input "$T/rand.bin" --out "$T/got.txt"
  cmp -s "$T/want.txt" "$T/got.txt" && pass || fail "$d: other ids than the rank file's"
done
expect_bad_input "import over an existing directory" $MT_BIN tokenizer import --from "$v" --out "$T/hf"
python3 - "$T" <<'PY'
import json, os, sys
d = sys.argv[1]
vocab = json.load(open(f"{d}/vm/vocab.json"))
merges = open(f"{d}/vm/merges.txt").read().splitlines()
def case(name, v, m):
    os.makedirs(f"{d}/{name}")
    open(f"{d}/{name}/vocab.json", "w").write(v if isinstance(v, str) else json.dumps(v))
    open(f"{d}/{name}/merges.txt", "w").write("\n".join(m) + "\n")
case("b_part", vocab, merges + ["h zz"])                            # a part not in the vocabulary
dup = dict(vocab); dup["zq"] = vocab["he"]; case("b_dup", dup, merges)  # two tokens, one id
case("b_trunc", vocab, merges[:3] + ["ll"] + merges[3:])            # a truncated line
case("b_json", json.dumps(vocab)[:-40], merges)                     # truncated JSON
nob = {k: i for k, i in vocab.items() if k != "!"}; case("b_byte", nob, merges)  # a byte missing
PY
n=8
for c in b_part b_dup b_trunc b_json b_byte; do
  n=$((n + 1))
  expect_bad_input "vocab.json + merges.txt: $c" $MT_BIN tokenizer encode --tokenizer "$T/$c" --out "$T/no$n" < /dev/null
done
# into training
for i in $(seq 1 400); do echo "hello world, line $i: the hello of the world"; done > "$T/text.txt"
$MT_BIN prepare --input "$T/text.txt" --out "$T/data" --tokenizer "$v" > "$T/prep.out" || fail "prepare: $(cat "$T/prep.out")"
grep -q "vocab 266" "$T/prep.out" && [ -s "$T/data/tokenizer/tokenizer.json" ] && pass || fail "prepare: $(cat "$T/prep.out")"
$MT_BIN train --data "$T/data" --layers 1 --heads 2 --dim 32 --seq-len 16 --batch-size 4 --steps 2 --eval-every 0 \
  --log-every 0 --threads 1 --save "$T/ck" > "$T/train.out" 2>&1 || fail "train: $(tail -2 "$T/train.out")"
grep -q "vocab 266" "$T/train.out" && pass || fail "train: not the data's vocabulary: $(head -1 "$T/train.out")"
for f in tokenizer.json vocab.json merges.txt tokenizer_config.json; do [ -s "$T/ck/$f" ] && pass || fail "the checkpoint lacks $f"; done
grep -q '"bos_token_id": 265' "$T/ck/config.json" && grep -q '"eos_token_id": 265' "$T/ck/config.json" && pass \
  || fail "config.json: $(grep token_id "$T/ck/config.json" | tr '\n' ' ')"
$MT_BIN tokenizer encode --tokenizer "$T/ck" --input "$T/rand.bin" --out "$T/got.txt"
enc --input "$T/rand.bin" --out "$T/want.txt"
cmp -s "$T/got.txt" "$T/want.txt" && pass || fail "the checkpoint's tokenizer gives other ids"
# prepare on several threads: the same tokens as one (1.5 MB: text, a 2-byte character, random bytes)
python3 -c "
import random
r = random.Random(4)
words = ['hello', 'world', 'caf\u00e9', \"it's\", '  ', '\\n', '123', 'ab!!']
t = ' '.join(r.choice(words) for _ in range(200000)).encode()
open('$T/big.txt', 'wb').write(t + bytes(r.randrange(256) for _ in range(300000)) + t)"
for t in 1 2 3; do
  $MT_BIN prepare --input "$T/big.txt" --out "$T/p$t" --tokenizer "$v" --threads $t > /dev/null || fail "prepare --threads $t"
done
cmp -s "$T/p1/train.bin" "$T/p2/train.bin" && cmp -s "$T/p1/train.bin" "$T/p3/train.bin" && cmp -s "$T/p1/val.bin" "$T/p3/val.bin" \
  && pass || fail "prepare: --threads 2 or 3 gave other tokens than one thread"
# tokenizer encode on several threads: the ids of one
for t in 1 2 3; do
  $MT_BIN tokenizer encode --tokenizer "$v" --input "$T/big.txt" --format u32 --out "$T/e$t.u32" --threads $t || fail "encode --threads $t"
done
cmp -s "$T/e1.u32" "$T/e2.u32" && cmp -s "$T/e1.u32" "$T/e3.u32" && [ -s "$T/e1.u32" ] && pass \
  || fail "tokenizer encode: --threads 2 or 3 gave other ids than one thread"
# the tokenizer directory is staged beside the data and committed: nothing of it is left
# behind, over a new directory (staged beside it) or an existing one (--force: inside it)
ls -a "$T" | grep -q "tmp-" && fail "a staging directory was left beside the data: $(ls -a "$T" | grep tmp-)" || pass
$MT_BIN prepare --input "$T/big.txt" --out "$T/p2" --tokenizer "$v" --threads 2 --force > /dev/null || fail "prepare --force"
ls -a "$T/p2" "$T" | grep -q "tmp-" && fail "prepare --force left a staging directory" || pass
cmp -s "$T/p1/train.bin" "$T/p2/train.bin" && cmp -s "$T/data/tokenizer/tokenizer.json" "$T/p2/tokenizer/tokenizer.json" && pass \
  || fail "prepare --force: other tokens or tokenizer files"
# a vocabulary whose tokenizer files cannot be written (a token no merge of lower ranks
# reaches), found while 1.5 MB is encoded on two threads: exit 2, one line, nothing written
{ head -256 "$v"; printf 'YWJj 256\n'; } > "$T/unreach.tiktoken"
expect_bad_input "prepare with a token no merge reaches" $MT_BIN prepare --input "$T/big.txt" --out "$T/no18" \
  --tokenizer "$T/unreach.tiktoken" --threads 2
grep -q "not reachable" "$T/err" && pass || fail "the unreachable token: $(cat "$T/err")"
ls -a "$T" | grep -q "no18" && fail "a staging directory of no18 was left: $(ls -a "$T" | grep no18)" || pass
touch "$T/afile"
expect_bad_input "prepare --out a file" $MT_BIN prepare --input "$T/text.txt" --out "$T/afile" --tokenizer "$v"
# read a chunk at a time (--read-mb 1: the 1.5 MB text in two chunks, cut where a piece
# always ends): the tokens of the whole text, as `tokenizer encode` gives them, on 1 and 2 threads
$MT_BIN tokenizer encode --tokenizer "$v" --input "$T/big.txt" --format u16 --out "$T/big.u16"
for t in 1 2; do
  $MT_BIN prepare --input "$T/big.txt" --out "$T/r$t" --tokenizer "$v" --threads $t --read-mb 1 > /dev/null \
    || fail "prepare --read-mb 1 --threads $t"
  cmp -s "$T/big.u16" <(tail -c +33 "$T/r$t/train.bin"; tail -c +33 "$T/r$t/val.bin") && cmp -s "$T/p1/train.bin" "$T/r$t/train.bin" \
    && pass || fail "prepare --read-mb 1 --threads $t: not the whole text's tokens"
done
cp "$T/big.txt" "$T/bigb.txt"
{ cat "$T/big.txt"; printf '<|endoftext|>'; cat "$T/bigb.txt"; } > "$T/bigj.txt"
$MT_BIN prepare --input "$T/big.txt" "$T/bigb.txt" --out "$T/rj2" --tokenizer "$v" --read-mb 1 > /dev/null \
  && $MT_BIN prepare --input "$T/bigj.txt" --out "$T/rj1" --tokenizer "$v" > /dev/null \
  && cmp -s "$T/rj1/train.bin" "$T/rj2/train.bin" && cmp -s "$T/rj1/val.bin" "$T/rj2/val.bin" && pass \
  || fail "--read-mb 1: two inputs of two chunks each are not the documents joined by <|endoftext|>"
$MT_BIN prepare --input "$T/big.txt" --out "$T/rb1" --read-mb 1 > /dev/null && cmp -s <(tail -c +33 "$T/rb1/train.bin"; tail -c +33 "$T/rb1/val.bin") "$T/big.txt" \
  && pass || fail "byte-level --read-mb 1: not the text's bytes"
expect_bad_input "prepare --read-mb 0" $MT_BIN prepare --input "$T/big.txt" --out "$T/no17" --read-mb 0
# several inputs: documents separated by <|endoftext|> (bytes: joined as they are)
head -c 30000 "$T/big.txt" > "$T/doc1.txt"
tail -c 20000 "$T/big.txt" > "$T/doc2.txt"
{ cat "$T/doc1.txt"; printf '<|endoftext|>'; cat "$T/doc2.txt"; } > "$T/joined.txt"
$MT_BIN prepare --input "$T/doc1.txt" "$T/doc2.txt" --out "$T/m2" --tokenizer "$v" > /dev/null || fail "prepare of two inputs"
$MT_BIN prepare --input "$T/joined.txt" --out "$T/m1" --tokenizer "$v" > /dev/null || fail "prepare of the joined input"
cmp -s "$T/m1/train.bin" "$T/m2/train.bin" && cmp -s "$T/m1/val.bin" "$T/m2/val.bin" && pass \
  || fail "two inputs are not the documents joined by <|endoftext|>"
cat "$T/doc1.txt" "$T/doc2.txt" > "$T/cat.txt"
$MT_BIN prepare --input "$T/doc1.txt" "$T/doc2.txt" --out "$T/b2" > /dev/null && $MT_BIN prepare --input "$T/cat.txt" --out "$T/b1" > /dev/null
cmp -s "$T/b1/train.bin" "$T/b2/train.bin" && pass || fail "byte-level: two inputs are not the files joined"
expect_bad_input "prepare with a missing second input" $MT_BIN prepare --input "$T/doc1.txt" "$T/none.txt" --out "$T/no16"
# eval --text and sample speak the checkpoint's tokenizer
ntok=$($MT_BIN tokenizer encode --tokenizer "$T/ck" --input "$T/text.txt" | wc -w)
$MT_BIN eval --ckpt "$T/ck" --text "$T/text.txt" --seq-len 16 --threads 1 > "$T/eval.out" 2>&1 || fail "eval --text: $(cat "$T/eval.out")"
grep -q "^windows $(( (ntok - 1) / 16 )) of 16 tokens" "$T/eval.out" && pass \
  || fail "eval --text: $(head -1 "$T/eval.out"), want $(( (ntok - 1) / 16 )) windows of the text's $ntok BPE tokens"
$MT_BIN sample --ckpt "$T/ck" --prompt "hello" --tokens 8 --threads 1 > "$T/sample.out" 2>&1 || fail "sample: $(cat "$T/sample.out")"
head -c 5 "$T/sample.out" | grep -q "^hello" && [ "$(wc -c < "$T/sample.out")" -ge 14 ] \
  && ! grep -qE "^hello( [0-9]+){8}$" "$T/sample.out" && pass || fail "sample did not decode its tokens: $(cat "$T/sample.out")"
expect_bad_input "a --vocab smaller than the data's" $MT_BIN train --data "$T/data" --vocab 256 --layers 1 --heads 2 \
  --dim 32 --seq-len 16 --batch-size 4 --steps 2 --save "$T/no8"
expect_bad_input "prepare with a broken tokenizer" $MT_BIN prepare --input "$T/text.txt" --out "$T/no15" --tokenizer "$T/b64.tiktoken"
mkdir "$T/empty"
expect_bad_input "a directory without tokenizer files" $MT_BIN tokenizer encode --tokenizer "$T/empty" --out "$T/no14" < /dev/null
for i in $(seq 1 18); do [ -e "$T/no$i" ] && fail "a bad input wrote $T/no$i" || pass; done
finish
