#!/usr/bin/env bash
# get-gpt2-tokenizer.sh [DIR]: GPT-2's byte-level BPE vocabulary into DIR (default
# runs/tokenizers/gpt2) as DIR/gpt2.tiktoken, for `meshtrain tokenizer --tokenizer` and the
# tokenizer tests.  The ranks are tiktoken's r50k_base (GPT-2's 50,000 merges over the 256
# bytes; meshtrain adds <|endoftext|> as id 50256).  They are data from elsewhere, not part
# of the repository, and nothing is downloaded at run time: this set-up step takes them
# from the openai-whisper source package on PyPI (pip download, no dependencies, no torch),
# which ships them as whisper/assets/gpt2.tiktoken, and checks their SHA-256.  Does nothing
# when DIR already holds the checked file.  PIP: the pip to use (default python3 -m pip).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-runs/tokenizers/gpt2}
want=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
if [ -f "$dir/gpt2.tiktoken" ] && [ "$(sha256sum < "$dir/gpt2.tiktoken" | cut -d' ' -f1)" = "$want" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${PIP:-python3 -m pip} download --no-deps --no-binary :all: openai-whisper==20250625 -d "$tmp" -q 2>"$tmp/pip.err" \
  || { echo "get-gpt2-tokenizer: pip download openai-whisper failed: $(tail -1 "$tmp/pip.err")" >&2; exit 1; }
tar -xzf "$tmp"/openai_whisper-*.tar.gz -C "$tmp" --wildcards '*/whisper/assets/gpt2.tiktoken'
f=$(find "$tmp" -name gpt2.tiktoken | head -1)
got=$(sha256sum < "$f" | cut -d' ' -f1)
[ "$got" = "$want" ] || { echo "get-gpt2-tokenizer: gpt2.tiktoken has SHA-256 $got, want $want" >&2; exit 1; }
mkdir -p "$dir"
cp "$f" "$dir/gpt2.tiktoken.tmp" && mv "$dir/gpt2.tiktoken.tmp" "$dir/gpt2.tiktoken"
echo "GPT-2's vocabulary (r50k_base, SHA-256 checked) in $dir/gpt2.tiktoken"
