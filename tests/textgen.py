"""textgen.py - the three texts the BPE trainer is checked and timed on (tests/sh_tokenizer_train.sh,
bench/bpe_train_bench.py), written as files of about n bytes each, the same bytes on every run:

  english  Debian's fortunes (/usr/share/games/fortunes), whole files in name order, repeated as
           needed;
  mixed    words of thirteen scripts and emoji, Zipf-distributed so that a few are common and most
           rare (as words in a language are), in lines of 4 to 16 words, with numbers and
           punctuation;
  code     this repository's C sources (src/), whole files in path order, repeated as needed.

usage: python3 tests/textgen.py english|mixed|code BYTES OUT
"""
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# syllables (or single characters) per script; a word is 1 to 4 of one script's
SCRIPTS = [
    "ba be bi bo bu ça çe dé fè gö hü jå ké lø mé né pä rí sú tá vé wö zé ñá ñe ß ŋa",
    "ба бе ви го да жи зо ко лу ме но пы ра си то фу хэ цу чи ша щё ю я",
    "α βα γε δι ζω θη κα λο μυ νε ξι πο ρα σι τω φη χα ψυ ω",
    "我 你 他 是 的 不 了 人 在 有 这 中 大 来 上 国 个 到 说 们 为 子 和 年",
    "あ か さ た な は ま や ら わ ア カ サ タ ナ ハ マ ヤ ラ ワ ン",
    "가 나 다 라 마 바 사 아 자 차 카 타 파 하 한 국 어 문 장",
    "ب ت ث ج ح خ د ذ ر ز س ش ص ض ط ظ ع غ ف ق ك ل م ن ه و ي",
    "क ख ग घ च छ ज झ ट ठ ड ढ त थ द ध न प फ ब भ म य र ल व श स ह",
    "א ב ג ד ה ו ז ח ט י כ ל מ נ ס ע פ צ ק ר ש ת",
    "ก ข ค ง จ ฉ ช ซ ญ ด ต ถ ท น บ ป ผ พ ฟ ม ย ร ล ว ส ห อ",
    "ა ბ გ დ ე ვ ზ თ ი კ ლ მ ნ ო პ ჟ რ ს ტ უ",
    "Ա Բ Գ Դ Ե Զ Է Ը Թ Ժ Ի Լ Խ Ծ Կ Հ Ձ Ղ Ճ Մ",
    "👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷 🇯🇵 😀 🎉 🚀 ✨ 🔥",
]
PUNCT = [", ", ". ", "; ", ": ", "! ", "? ", " - ", " (", ") ", "\u3001", "\u3002", "\u060c ", "\u0964 "]


def english(n):
    d = "/usr/share/games/fortunes"
    names = sorted(f for f in os.listdir(d) if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(d, f)))
    out, total = [], 0
    while total < n:
        for f in names:
            b = open(os.path.join(d, f), "rb").read()
            out.append(b)
            total += len(b)
            if total >= n:
                break
    return b"".join(out)[:n].decode("utf-8", errors="ignore").encode()


def mixed(n):
    rnd = random.Random(27)
    vocab = []
    for script in SCRIPTS:
        syl = script.split(" ")
        for _ in range(2500):
            vocab.append("".join(rnd.choice(syl) for _ in range(rnd.randint(1, 4))))
    rnd.shuffle(vocab)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]  # Zipf's law
    out, total = [], 0
    while total < n:
        words = rnd.choices(vocab, weights, k=rnd.randint(4, 16))
        line = ""
        for i, w in enumerate(words):
            line += w
            r = rnd.random()
            line += rnd.choice(PUNCT) if r < 0.12 else (" %d " % rnd.randint(0, 99999)) if r < 0.16 else " "
        line = line.rstrip() + ("\n" if rnd.random() < 0.9 else "\r\n")
        b = line.encode()
        out.append(b)
        total += len(b)
    return b"".join(out)[:n].decode("utf-8", errors="ignore").encode()


def code(n):
    paths = []
    for root, _, files in os.walk(os.path.join(ROOT, "src")):
        paths += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    paths.sort()
    out, total = [], 0
    while total < n:
        for p in paths:
            b = open(p, "rb").read()
            out.append(b)
            total += len(b)
            if total >= n:
                break
    return b"".join(out)[:n].decode("utf-8", errors="ignore").encode()


if __name__ == "__main__":
    kind, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    data = {"english": english, "mixed": mixed, "code": code}[kind](n)
    with open(path, "wb") as f:
        f.write(data)
