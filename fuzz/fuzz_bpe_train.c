/* The BPE trainer on any text: the first byte picks the vocabulary size (257 to 320) and
 * whether <|endoftext|> is a special token; the rest is the text.  Trained on 1 and on 3
 * threads, the merges and tokens must be the same; every merge's parts must be tokens whose
 * bytes make an existing token; and the trained vocabulary must encode the text and decode
 * it back.  A difference aborts. */
#include "fuzz_common.h"
#include "mt_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *sp[] = {"<|endoftext|>"};
    int nsp = data[0] & 1;
    const unsigned char *text = data + 1;
    int64_t n = (int64_t)size - 1;
    MtBpeTrainOptions o = {257 + nsp + (data[0] >> 2), 0, 1, sp, nsp};
    MtBpeTrained a, b;
    if (mt_bpe_train(&text, &n, 1, &o, &a) != MT_OK)
        abort();
    o.threads = 3;
    if (mt_bpe_train(&text, &n, 1, &o, &b) != MT_OK)
        abort();
    if (a.nmerges != b.nmerges || mt_bpe_vocab(a.bpe) != mt_bpe_vocab(b.bpe) || a.words != b.words ||
        (a.nmerges && memcmp(a.merges, b.merges, sizeof *a.merges * (size_t)a.nmerges) != 0))
        abort();
    for (int k = 0; k < a.nmerges; k++) {
        const unsigned char *pl, *pr;
        int ll, lr;
        unsigned char cat[4096];
        if (!mt_bpe_token(a.bpe, a.merges[k][0], &pl, &ll) || !mt_bpe_token(a.bpe, a.merges[k][1], &pr, &lr) ||
            ll + lr > (int)sizeof cat)
            abort();
        memcpy(cat, pl, (size_t)ll);
        memcpy(cat + ll, pr, (size_t)lr);
        if (mt_bpe_rank(a.bpe, cat, ll + lr) < 0)
            abort();
    }
    int32_t *ids = NULL;
    unsigned char *back = NULL;
    int64_t icap = 0, bcap = 0, bad;
    int64_t k = mt_bpe_encode(a.bpe, text, n, 1, &ids, &icap);
    int64_t m = mt_bpe_decode(a.bpe, ids, k, &back, &bcap, &bad);
    if (m != n || (n && memcmp(back, text, (size_t)n) != 0))
        abort();
    free(ids);
    free(back);
    mt_bpe_trained_free(&a);
    mt_bpe_trained_free(&b);
    return 0;
}
