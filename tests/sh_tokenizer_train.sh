#!/usr/bin/env bash
# meshtrain tokenizer train (src/text/bpe_train.c): byte-level BPE with the merges of
# Hugging Face tokenizers' BpeTrainer.
#  - a text whose merges are worked out by hand (counts, then the tie to the smaller left id:
#    'c' is a printable byte, ids before the 68 that map to U+0100..): a b, Ġ ab, c d, Ġ cd,
#    then no pair is left, whatever --vocab-size;
#  - the ids: the specials first in the order given, then the 256 bytes in their characters'
#    order, then the merges' tokens; the files load back (encode, decode round trip);
#  - the same files on 1, 2 and 3 threads (three texts: tests/textgen.py);
#  - against tokenizers' BpeTrainer (ByteLevel, add_prefix_space false, its alphabet, the same
#    special token; .venv-tok of scripts/setup-tokenizer-check.sh): the same merges in the same
#    order and the same vocabulary on English, a mixed-script text and source code at 512,
#    4,096 and 32,000 tokens, and the trained tokenizer.json encodes each text to the ids
#    meshtrain's encode gives.  Without .venv-tok this part is skipped (exit 77, a message)
#    after the others ran;
#  - bad input: --vocab-size below the specials and bytes, a special twice, an empty one, a
#    missing input, an existing --out: exit 2, one line, nothing written.
source "$(dirname "$0")/lib.sh"
TG="$(dirname "$0")/textgen.py"
printf 'ab ab ab cd\n' > "$T/hand.txt"
for vs in 261 300; do
  $MT_BIN tokenizer train --input "$T/hand.txt" --vocab-size $vs --special '<|endoftext|>' --out "$T/hand$vs" \
    > "$T/hand.out" 2>&1 || fail "hand $vs: $(cat "$T/hand.out")"
  [ "$(cat "$T/hand$vs/merges.txt" | tr '\n' '|')" = "#version: 0.2|a b|Ġ ab|c d|Ġ cd|" ] && pass \
    || fail "hand, --vocab-size $vs: merges $(cat "$T/hand$vs/merges.txt" | tr '\n' '|')"
done
grep -q '"<|endoftext|>": 0, "!": 1, "\\"": 2' "$T/hand261/vocab.json" && grep -q '"Ā": 189' "$T/hand261/vocab.json" \
  && grep -q '"ab": 257, "Ġab": 258, "cd": 259, "Ġcd": 260}' "$T/hand261/vocab.json" && pass \
  || fail "hand: ids $(head -c 300 "$T/hand261/vocab.json") ... $(tail -c 100 "$T/hand261/vocab.json")"
[ "$(printf 'ab cd<|endoftext|>ab' | $MT_BIN tokenizer encode --tokenizer "$T/hand261")" = "257 260 0 257" ] && pass \
  || fail "hand: encode $(printf 'ab cd<|endoftext|>ab' | $MT_BIN tokenizer encode --tokenizer "$T/hand261")"
for k in english mixed code; do
  python3 "$TG" $k 600000 "$T/$k.txt"
  for t in 1 2 3; do
    $MT_BIN tokenizer train --input "$T/$k.txt" --vocab-size 8000 --special '<|endoftext|>' --threads $t \
      --out "$T/${k}t$t" > "$T/t.out" 2>&1 || fail "$k on $t threads: $(cat "$T/t.out")"
  done
  diff -r "$T/${k}t1" "$T/${k}t2" > /dev/null && diff -r "$T/${k}t1" "$T/${k}t3" > /dev/null && pass \
    || fail "$k: the files differ between 1, 2 and 3 threads"
  $MT_BIN tokenizer encode --tokenizer "$T/${k}t2" --input "$T/$k.txt" --format u32 --out "$T/$k.ids" \
    && $MT_BIN tokenizer decode --tokenizer "$T/${k}t2" --input "$T/$k.ids" --format u32 --out "$T/$k.back" \
    && cmp -s "$T/$k.txt" "$T/$k.back" && pass || fail "$k: the trained vocabulary does not round-trip the text"
done
# two inputs are their lines in order: the same as the files joined, each ending in a newline
head -c 300000 "$T/english.txt" > "$T/a.txt"; printf '\n' >> "$T/a.txt"; tail -c +300001 "$T/english.txt" > "$T/b.txt"
cat "$T/a.txt" "$T/b.txt" > "$T/ab.txt"
$MT_BIN tokenizer train --input "$T/a.txt" "$T/b.txt" --vocab-size 3000 --out "$T/two" > /dev/null \
  && $MT_BIN tokenizer train --input "$T/ab.txt" --vocab-size 3000 --out "$T/joined" > /dev/null \
  && diff -r "$T/two" "$T/joined" > /dev/null && pass || fail "two inputs differ from the files joined"
expect_bad_input "--vocab-size below the bytes" $MT_BIN tokenizer train --input "$T/hand.txt" --vocab-size 256 \
  --special '<|endoftext|>' --out "$T/no1"
expect_bad_input "a special twice" $MT_BIN tokenizer train --input "$T/hand.txt" --vocab-size 300 --special a a --out "$T/no2"
expect_bad_input "an empty special" $MT_BIN tokenizer train --input "$T/hand.txt" --vocab-size 300 --special '' --out "$T/no3"
expect_bad_input "a missing input" $MT_BIN tokenizer train --input "$T/nothere.txt" --vocab-size 300 --out "$T/no4"
expect_bad_input "no --vocab-size" $MT_BIN tokenizer train --input "$T/hand.txt" --out "$T/no5"
expect_bad_input "an existing --out" $MT_BIN tokenizer train --input "$T/hand.txt" --vocab-size 300 --out "$T/hand261"
for i in 1 2 3 4 5; do [ -e "$T/no$i" ] && fail "a bad input wrote $T/no$i" || pass; done
[ "$(cat "$T/hand261/merges.txt" | wc -l)" -eq 5 ] && pass || fail "an existing --out was changed"

# against tokenizers' BpeTrainer
PY=${MT_TIKTOKEN_PYTHON:-.venv-tok/bin/python}
if ! "$PY" -c "import tokenizers" 2>/dev/null; then
  echo "SKIPPED (after $npass checks passed): tokenizers ($PY) is missing: run bash scripts/setup-tokenizer-check.sh"
  [ "$nfail" -eq 0 ] || finish
  exit 77
fi
for k in english mixed code; do
  python3 "$TG" $k 1500000 "$T/$k.txt"
  for vs in 512 4096 32000; do
    $MT_BIN tokenizer train --input "$T/$k.txt" --vocab-size $vs --special '<|endoftext|>' --out "$T/m$k$vs" \
      > "$T/t.out" 2>&1 || fail "$k $vs: $(cat "$T/t.out")"
    $MT_BIN tokenizer encode --tokenizer "$T/m$k$vs" --input "$T/$k.txt" --out "$T/m$k$vs.ids"
    "$PY" - "$T/$k.txt" $vs "$T/m$k$vs" <<'PY' > "$T/cmp.out" 2>&1 && pass || fail "$k $vs: $(cat "$T/cmp.out")"
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
text, vs, mt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.train([text], trainers.BpeTrainer(vocab_size=vs, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
hf = json.loads(tok.to_str())["model"]
ours = json.load(open(mt + "/tokenizer.json"))["model"]
def pairs(ms):
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in ms]
a, b = pairs(hf["merges"]), pairs(ours["merges"])
if a != b:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    sys.exit("merges differ at %d of %d/%d: tokenizers %s, meshtrain %s" % (i, len(a), len(b), a[i:i + 1], b[i:i + 1]))
if hf["vocab"] != ours["vocab"]:
    sys.exit("vocabularies differ: %d tokens and %d" % (len(hf["vocab"]), len(ours["vocab"])))
ids = Tokenizer.from_file(mt + "/tokenizer.json").encode(open(text, encoding="utf-8", newline="").read()).ids
mine = [int(x) for x in open(mt + ".ids").read().split()]
if ids != mine:
    sys.exit("tokenizers encodes the trained tokenizer.json to other ids (%d and %d)" % (len(ids), len(mine)))
print("%d merges, %d tokens, %d ids identical" % (len(a), len(hf["vocab"]), len(ids)))
PY
    echo "$k --vocab-size $vs: $(cat "$T/cmp.out")"
  done
done
finish
