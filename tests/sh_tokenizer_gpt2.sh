#!/usr/bin/env bash
# GPT-2's byte-level BPE, exactly tiktoken's (issue 27): on GPT-2's vocabulary (r50k_base,
# fetched and hash-checked by scripts/setup-tokenizer-check.sh, which also puts tiktoken in
# .venv-tok), `meshtrain tokenizer encode` gives tiktoken's ids (allowed_special="all") on
# the README, source files and docs, text in nine scripts, emoji with modifiers and
# joiners, every kind of white-space run, contractions in upper and lower case, digits of
# every length, <|endoftext|> inside text, and a 1 MB piece with no split point; and
# decode gives the text back.  `tokenizer import` writes Hugging Face's files (merges.txt
# beginning as GPT-2's own); meshtrain reading them, and Hugging Face's tokenizers reading
# its tokenizer.json, give the same ids.  `prepare --tokenizer` makes GPT-2 tokens that
# train reads (the vocabulary from the data), and the checkpoint carries the tokenizer:
# transformers' AutoTokenizer loads it from the checkpoint and gives meshtrain's ids, and
# config.json names <|endoftext|> as bos and eos.  Skipped (exit 77, a message) where the
# set-up (scripts/setup-tokenizer-check.sh) has not run.
source "$(dirname "$0")/lib.sh"
G=${MT_GPT2_TIKTOKEN:-runs/tokenizers/gpt2/gpt2.tiktoken}
PY=${MT_TIKTOKEN_PYTHON:-.venv-tok/bin/python}
if [ ! -f "$G" ] || ! "$PY" -c "import tiktoken, tokenizers, transformers" 2>/dev/null; then
  echo "SKIPPED: GPT-2's vocabulary ($G) or tiktoken, tokenizers and transformers ($PY) are missing: run bash scripts/setup-tokenizer-check.sh"
  exit 77
fi
"$PY" - "$T" <<'PY'
import random, sys
d = sys.argv[1]
texts = {
  "latin": "Ünïcödé façade, Straße, crème brûlée, Ångström, Dvořák, Łódź, ﬁ ligature, ĳ, Œuvre.\n",
  "cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю. ПРОПИСНЫЕ.\n",
  "greek": "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΑΛΦΆΒΗΤΟ!\n",
  "cjk": "我能吞下玻璃而不伤身体。日本語のテキスト、カタカナ。한국어 문장입니다.\n",
  "arabic": "أنا قادر على أكل الزجاج و هذا لا يؤلمني. ١٢٣٤٥ ۶۷۸\n",
  "devanagari": "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. ०१२३\n",
  "hebrew_thai": "אני יכול לאכול זכוכית. ฉันกินกระจกได้\n",
  "emoji": "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 🧑🏿‍🚀 👩🏻‍💻 and text after.\n",
  "spaces": "tabs\t\tand\r\nwindows\r\n\r\nnbsp\u00a0here\u00a0\u00a0x ideographic\u3000space\u3000\u3000y  \n\n\n   end \t \u2028 \u2029 \x0b\x0c x \u2003\u2009 z\u0085q   ",
  "contractions": "I'm you're we've they'll he'd it's don't I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T 'tis ''s '''x it''s\n",
  "digits": " ".join(str(10**k + k) for k in range(1, 40)) + " 3.14159 1,000,000 0x1F 007 ½ ¾ Ⅻ ²³ ①②\n",
  "special": "first doc<|endoftext|>second doc   <|endoftext|><|endoftext|>\n third",
}
for k, t in texts.items():
    open(f"{d}/{k}.txt", "w", encoding="utf-8").write(t)
random.seed(7)
open(f"{d}/onepiece.txt", "w").write("".join(random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1 << 20)))
PY
cat > "$T/ref.py" <<'PY'
import sys, tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext.openai_public import r50k_pat_str
enc = tiktoken.Encoding("gpt2", pat_str=r50k_pat_str, mergeable_ranks=load_tiktoken_bpe(sys.argv[1]),
                        special_tokens={"<|endoftext|>": 50256})
for path in sys.argv[2:]:
    ids = enc.encode(open(path, "rb").read().decode("utf-8"), allowed_special="all")
    open(path + ".ref", "w").write(" ".join(map(str, ids)) + "\n")
PY
$MT_BIN tokenizer import --from "$G" --out "$T/hf" > /dev/null || fail "import: exit $?"
[ "$(sed -n 2,7p "$T/hf/merges.txt" | tr '\n' '|')" = "Ġ t|Ġ a|h e|i n|r e|o n|" ] && pass \
  || fail "merges.txt does not begin as GPT-2's: $(sed -n 2,7p "$T/hf/merges.txt" | tr '\n' '|')"
mkdir "$T/vm" && cp "$T/hf/vocab.json" "$T/hf/merges.txt" "$T/vm/"
mkdir "$T/repo" # copies of some of this repository's files (their .ref files go beside them, in $T)
for f in README.md docs/design.md docs/parallelism.md src/parallel/pipeline.c src/text/pretok.c tests/test_text.c scripts/demo.sh; do
  cp "$f" "$T/repo/$(echo "$f" | tr / _)"
done
files=("$T"/*.txt "$T"/repo/*)
"$PY" "$T/ref.py" "$G" "${files[@]}"
for f in "${files[@]}"; do
  $MT_BIN tokenizer encode --tokenizer "$G" --input "$f" --out "$T/got.txt"
  cmp -s "$T/got.txt" "$f.ref" && pass || fail "$f: ids differ from tiktoken's: $(diff <(tr ' ' '\n' < "$T/got.txt") <(tr ' ' '\n' < "$f.ref") | head -4 | tr '\n' ' ')"
  $MT_BIN tokenizer decode --tokenizer "$G" --input "$T/got.txt" --out "$T/back"
  cmp -s "$T/back" "$f" && pass || fail "$f: decode does not give the text back"
  for d in "$T/hf" "$T/vm"; do
    $MT_BIN tokenizer encode --tokenizer "$d" --input "$f" --out "$T/got2.txt"
    cmp -s "$T/got2.txt" "$f.ref" && pass || fail "$f: read from $d, other ids"
  done
done
# Hugging Face's tokenizers on meshtrain's tokenizer.json
"$PY" - "$T/hf/tokenizer.json" "${files[@]}" <<'PY' && pass || fail "tokenizers' ids differ from tiktoken's"
import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
bad = 0
for path in sys.argv[2:]:
    ids = tok.encode(open(path, encoding="utf-8", newline="").read()).ids
    want = list(map(int, open(path + ".ref").read().split()))
    if ids != want:
        bad += 1
        print(f"tokenizers on {path}: {len(ids)} ids, tiktoken {len(want)}", file=sys.stderr)
sys.exit(bad > 0)
PY
# into training: GPT-2 tokens, the vocabulary from the data, a checkpoint with its tokenizer
cat README.md docs/*.md > "$T/corpus.txt"
$MT_BIN prepare --input "$T/corpus.txt" --out "$T/data" --tokenizer "$T/hf" > "$T/prep.out" || fail "prepare: $(cat "$T/prep.out")"
grep -q "vocab 50257" "$T/prep.out" && [ -s "$T/data/tokenizer/tokenizer.json" ] && pass || fail "prepare: $(cat "$T/prep.out")"
$MT_BIN train --data "$T/data" --layers 1 --heads 2 --dim 32 --seq-len 32 --batch-size 4 --steps 2 --eval-every 0 \
  --log-every 0 --threads 1 --save "$T/ck" > "$T/train.out" 2>&1 || fail "train: $(tail -2 "$T/train.out")"
grep -q "vocab 50257" "$T/train.out" && pass || fail "train did not take the data's vocabulary: $(head -1 "$T/train.out")"
grep -q '"eos_token_id": 50256' "$T/ck/config.json" && grep -q '"meshtrain_tokenizer": "bpe"' "$T/ck/config.json" && pass \
  || fail "config.json: $(grep token "$T/ck/config.json" | tr '\n' ' ')"
"$PY" - "$T/ck" "${files[@]}" <<'PY' 2>/dev/null && pass || fail "AutoTokenizer on the checkpoint: other ids"
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
bad = sum(tok(open(p, encoding="utf-8", newline="").read())["input_ids"] != list(map(int, open(p + ".ref").read().split()))
          for p in sys.argv[2:] if "onepiece" not in p)
sys.exit(bad > 0)
PY
echo "ok: ${#files[@]} texts, ids as tiktoken's $("$PY" -c 'import tiktoken; print(tiktoken.__version__)') and back"
finish
