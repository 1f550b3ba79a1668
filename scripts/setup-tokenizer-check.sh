#!/usr/bin/env bash
# setup-tokenizer-check.sh: what tests/sh_tokenizer_gpt2.sh compares meshtrain's tokenizer
# with, from PyPI: a virtual environment .venv-tok with tiktoken (the reference ids) and
# Hugging Face's tokenizers and transformers (which must read meshtrain's tokenizer files and
# checkpoints to the same ids; no torch), and
# GPT-2's vocabulary in runs/tokenizers/gpt2 (scripts/get-gpt2-tokenizer.sh).  Without them
# that test is skipped with a message.  CI runs this before the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_packages.sh python3-venv
[ -x .venv-tok/bin/python ] || python3 -m venv .venv-tok
.venv-tok/bin/python -c "import tiktoken, tokenizers, transformers" 2>/dev/null ||
  .venv-tok/bin/pip install -q tiktoken tokenizers transformers
PIP=".venv-tok/bin/pip" bash scripts/get-gpt2-tokenizer.sh
echo "tokenizer check: $(.venv-tok/bin/python -c 'import tiktoken, tokenizers; print("tiktoken", tiktoken.__version__, "and tokenizers", tokenizers.__version__)') in .venv-tok"
