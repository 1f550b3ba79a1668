#!/usr/bin/env bash
# A BPE-trained checkpoint in Hugging Face transformers (with torch, from .venv-tok: scripts/
# setup-tokenizer-check.sh): a vocabulary trained by `meshtrain tokenizer train`, the text
# prepared with it, a small model trained on two ranks (--dp 2).  Then, from the checkpoint
# directory alone:
#  - AutoTokenizer gives meshtrain's ids on a held-out text;
#  - the loss of AutoModelForCausalLM on that text (the windows `meshtrain eval` takes:
#    inputs tokens[iT .. iT+T-1], targets the next T) equals `meshtrain eval --text` to 1e-5
#    (float32 kernels that sum in other orders);
#  - pipeline("text-generation") continues a prompt, greedily, with the continuation
#    `meshtrain sample --temperature 0` prints;
#  - an untied head (--untie-embeddings, on pp 2 zb2) loads with its own lm_head.weight and
#    the loss of `meshtrain eval`.
# Skipped (exit 77, a message) where .venv-tok lacks torch and transformers.
source "$(dirname "$0")/lib.sh"
PY=${MT_TIKTOKEN_PYTHON:-.venv-tok/bin/python}
if ! "$PY" -c "import torch, transformers, tokenizers" 2>/dev/null; then
  echo "SKIPPED: torch, transformers and tokenizers ($PY) are missing: run bash scripts/setup-tokenizer-check.sh"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
python3 "$(dirname "$0")/textgen.py" english 700000 "$T/all.txt"
head -c 600000 "$T/all.txt" > "$T/train.txt"
tail -c 60000 "$T/all.txt" | tail -n +2 > "$T/held.txt"
$MT_BIN tokenizer train --input "$T/train.txt" --vocab-size 1000 --special '<|endoftext|>' --out "$T/tok" > /dev/null
$MT_BIN prepare --input "$T/train.txt" --tokenizer "$T/tok" --out "$T/data" > /dev/null
$MT_BIN train --data "$T/data" --layers 2 --heads 4 --dim 64 --seq-len 32 --batch-size 16 --steps 800 --lr 5e-3 \
  --warmup 5 --eval-every 0 --log-every 0 --dp 2 --threads 1 --save "$T/ck" > "$T/train.out" 2>&1 \
  || fail "train: $(tail -3 "$T/train.out")"
$MT_BIN tokenizer encode --tokenizer "$T/ck" --input "$T/held.txt" --out "$T/held.ids"
$MT_BIN eval --ckpt "$T/ck" --text "$T/held.txt" --seq-len 32 > "$T/eval.out"
want=$(awk '/^loss/ { print $2 }' "$T/eval.out")
# an untied head (--untie-embeddings), trained on a pipeline
$MT_BIN train --data "$T/data" --layers 2 --heads 4 --dim 64 --seq-len 32 --batch-size 16 --steps 60 --lr 5e-3 \
  --warmup 5 --eval-every 0 --log-every 0 --pp 2 --schedule zb2 --untie-embeddings --threads 1 --save "$T/cku" \
  > "$T/trainu.out" 2>&1 || fail "train --untie-embeddings: $(tail -3 "$T/trainu.out")"
$MT_BIN eval --ckpt "$T/cku" --text "$T/held.txt" --seq-len 32 > "$T/evalu.out"
wantu=$(awk '/^loss/ { print $2 }' "$T/evalu.out")
prompt="The meaning of life is"
$MT_BIN sample --ckpt "$T/ck" --prompt "$prompt" --tokens 12 --temperature 0 > "$T/sample.out"
"$PY" - "$T/ck" "$T/held.txt" "$T/held.ids" "$want" "$prompt" "$T/sample.out" "$T/cku" "$wantu" <<'PY' > "$T/hf.out" 2>&1 \
  && pass || fail "$(cat "$T/hf.out")"
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
ck, held, ids_path, want, prompt, sample, cku, wantu = sys.argv[1:9]
tok = AutoTokenizer.from_pretrained(ck)
text = open(held, encoding="utf-8", newline="").read()
ids = tok(text)["input_ids"]
mine = [int(x) for x in open(ids_path).read().split()]
if ids != mine:
    sys.exit("AutoTokenizer: %d ids, meshtrain %d, first difference at %d" % (len(ids), len(mine),
             next(i for i, (a, b) in enumerate(zip(ids + [-1], mine + [-2])) if a != b)))
T = 32
x = torch.tensor(ids)
n = (len(ids) - 1) // T


def loss_of(model):
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, 16):
            k = min(16, n - i)
            inp = torch.stack([x[(i + j) * T:(i + j + 1) * T] for j in range(k)])
            tgt = torch.stack([x[(i + j) * T + 1:(i + j + 1) * T + 1] for j in range(k)])
            logits = model(inp).logits.double()
            total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                       reduction="sum").item()
    return total / (n * T)


model = AutoModelForCausalLM.from_pretrained(ck, dtype=torch.float32).eval()
loss = loss_of(model)
if abs(loss - float(want)) > 1e-5 * float(want):
    sys.exit("transformers' loss %.9f, meshtrain eval %s (%d windows of %d)" % (loss, want, n, T))
# the untied head: its own lm_head.weight (config tie_word_embeddings false), eval's loss
if json.load(open(cku + "/config.json"))["tie_word_embeddings"] is not False:
    sys.exit("untied: config.json's tie_word_embeddings is not false")
mu = AutoModelForCausalLM.from_pretrained(cku, dtype=torch.float32).eval()
if torch.equal(mu.lm_head.weight, mu.transformer.wte.weight):
    sys.exit("untied: lm_head.weight equals wte: the head was tied on loading")
lossu = loss_of(mu)
if abs(lossu - float(wantu)) > 1e-5 * float(wantu):
    sys.exit("untied: transformers' loss %.9f, meshtrain eval %s" % (lossu, wantu))
gen = pipeline("text-generation", model=ck, tokenizer=ck)
out = gen(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
ours = open(sample, encoding="utf-8").read().rstrip("\n")
if not out.startswith(prompt) or len(out) <= len(prompt) or out != ours:
    sys.exit("pipeline(text-generation): %r; meshtrain sample: %r" % (out, ours))
print("%d ids as meshtrain's; loss %.9f vs eval %s over %d windows; generated %r; untied: loss %.9f vs eval %s"
      % (len(ids), loss, want, n, out, lossu, wantu))
PY
echo "transformers: $(cat "$T/hf.out")"
finish
