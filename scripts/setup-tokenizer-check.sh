#!/usr/bin/env bash
# setup-tokenizer-check.sh: what tests/sh_tokenizer_gpt2.sh, sh_tokenizer_train.sh and
# sh_tokenizer_hf_model.sh compare meshtrain's tokenizer, trainer and checkpoints with, from
# PyPI: a virtual environment .venv-tok with tiktoken (the reference ids), Hugging Face's
# tokenizers (its BpeTrainer) and transformers with torch (which must load meshtrain's
# tokenizer files and checkpoints to the same ids, loss and greedy text; torch's PyPI wheel
# with its CUDA libraries, about 5 GB, used on the CPU), and GPT-2's vocabulary in
# runs/tokenizers/gpt2 (scripts/get-gpt2-tokenizer.sh).  Without them those tests are
# skipped with a message.  CI runs this before the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_packages.sh python3-venv
[ -x .venv-tok/bin/python ] || python3 -m venv .venv-tok
.venv-tok/bin/python -c "import tiktoken, tokenizers, transformers, torch" 2>/dev/null ||
  .venv-tok/bin/pip install -q tiktoken tokenizers transformers torch
PIP=".venv-tok/bin/pip" bash scripts/get-gpt2-tokenizer.sh
echo "tokenizer check: $(.venv-tok/bin/python -c 'import tiktoken, tokenizers; import torch, transformers; print("tiktoken", tiktoken.__version__, "tokenizers", tokenizers.__version__, "transformers", transformers.__version__, "torch", torch.__version__)') in .venv-tok"
