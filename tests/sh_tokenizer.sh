#!/usr/bin/env bash
# meshtrain tokenizer encode | decode on a small vocabulary this test writes (the 256
# bytes and a few merges, as a tiktoken rank file): the round trip of text, of invalid
# UTF-8 and of every output format; <|endoftext|> as the token and, with --no-special, as
# text; and every bad input (a broken rank file, a missing one, an id outside the
# vocabulary, ids that are not numbers, a bad --format): exit 2, one line, nothing written.
source "$(dirname "$0")/lib.sh"
v="$T/v.tiktoken"
python3 - "$v" <<'PY'
import base64, sys
toks = [bytes([i]) for i in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b" wo", b"rld", b" world"]
with open(sys.argv[1], "w") as f:
    for r, t in enumerate(toks):
        f.write(base64.b64encode(t).decode() + " " + str(r) + "\n")
PY
enc() { $MT_BIN tokenizer encode --tokenizer "$v" "$@"; }
dec() { $MT_BIN tokenizer decode --tokenizer "$v" "$@"; }
[ "$(printf 'hello world' | enc)" = "259 263" ] && pass || fail "hello world: $(printf 'hello world' | enc)"
[ "$(printf 'hello<|endoftext|>x' | enc)" = "259 264 120" ] && pass || fail "the special: $(printf 'hello<|endoftext|>x' | enc)"
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
for i in 1 2 3 4 5 6 7; do [ -e "$T/no$i" ] && fail "a bad input wrote $T/no$i" || pass; done
finish
