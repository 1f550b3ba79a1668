/* comm.c - the MPI layer: groups, collectives with byte counters and trace events, the
 * fixed-order reductions, the collective check and the stall watchdog.  The only file of
 * meshtrain that includes mpi.h. */
#include "mt_comm.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int op, group;
    int64_t n, bytes;
    double start, end; /* seconds since the common start */
} Event;

struct MtRequest {
    MPI_Request req;
    int *counts, *displs;
    /* fixed-order forms: phase 1 exchanges the chunks (rs_det's Alltoallv), then the rows
     * are summed in tree order; an all-reduce then gathers the sums (phase 2) */
    int phase;
    int *xc;       /* send counts, displacements, receive counts, displacements (4N) */
    float *rows, *buf, *out;
    int mine;
    MtComm *comm;
    MtOp op;
    MtGroupKind group;
    int64_t n, bytes;
    double start;
    int done, peer;
    MtRequest *next_free; /* in the comm's pool once finished */
};

struct MtComm {
    MtCommOptions opt;
    int rank, size;
    MtLayout layout;
    MPI_Comm groups[MT_NGROUPS];
    /* Second phases of fixed-order non-blocking all-reduces (their gathers) go on a copy of
     * the group, posted in the order the all-reduces were started: a rank may finish the
     * exchanges in another order than its peers, and collectives must match in order. */
    MPI_Comm second[MT_NGROUPS];
    MtRequest *queue[256];
    int nqueue;
    MtRequest *free_reqs; /* finished requests, reused: a steady step allocates none */
    int64_t reqs_made;    /* requests ever allocated */
    int grank[MT_NGROUPS], gsize[MT_NGROUPS];
    int64_t bytes[MT_NGROUPS][MT_NOPS]; /* since the last reset */
    int64_t total[MT_NGROUPS];          /* over the whole run */
    int64_t seq[MT_NGROUPS];
    char label[96];
    Event *events;
    int nevents, cap;
    double t0;
    float *scratch;
    int64_t scratch_n;
    pthread_t watchdog;
    int watchdog_on;
    volatile int stop;
};

/* What this rank is waiting on, for the watchdog thread and the signal handlers (which
 * can only read preformatted memory): process-wide by necessity, one MtComm per process. */
static volatile sig_atomic_t inflight;
static volatile double inflight_since;
static volatile int inflight_op, inflight_group;
static volatile int64_t inflight_seq, inflight_n;
static volatile int inflight_peer; /* send / receive: the peer's group rank; -1 otherwise */
static char label_copy[96];
static char idle_msg[128];
static int idle_len;

/* async-signal-safe formatting of "<label> waiting in <op> (call #k on group g, n floats)" */
static int put_str(char *b, int at, int cap, const char *s)
{
    while (*s && at < cap - 1)
        b[at++] = *s++;
    return at;
}

static int put_int(char *b, int at, int cap, int64_t v)
{
    char d[24];
    int k = 0;
    if (v < 0) {
        at = put_str(b, at, cap, "-");
        v = -v;
    }
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && k < 23);
    while (k && at < cap - 1)
        b[at++] = d[--k];
    return at;
}

static int inflight_message(char *b, int cap)
{
    static const char *ops[MT_NOPS] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv"};
    static const char *groups[MT_NGROUPS] = {"tp", "dp", "pp", "embed", "dp_shard", "dp_replica", "world"};
    int at = put_str(b, 0, cap, label_copy);
    at = put_str(b, at, cap, " waiting in ");
    at = put_str(b, at, cap, ops[inflight_op]);
    at = put_str(b, at, cap, " (call #");
    at = put_int(b, at, cap, inflight_seq);
    at = put_str(b, at, cap, " on group ");
    at = put_str(b, at, cap, groups[inflight_group]);
    at = put_str(b, at, cap, ", ");
    at = put_int(b, at, cap, inflight_n);
    at = put_str(b, at, cap, " floats");
    if (inflight_peer >= 0) { /* on the pp group a peer's group rank is its pipeline stage */
        at = put_str(b, at, cap, inflight_op == MT_OP_SEND ? ", to " : ", from ");
        at = put_str(b, at, cap, groups[inflight_group]);
        at = put_str(b, at, cap, " rank ");
        at = put_int(b, at, cap, inflight_peer);
    }
    at = put_str(b, at, cap, ")");
    return at;
}

static double now(void) { return MPI_Wtime(); }

static void on_signal(int sig)
{
    static const char tail[] = " - terminated by a signal\n";
    if (inflight) {
        char msg[320];
        int len = inflight_message(msg, sizeof msg);
        ssize_t w = write(2, msg, (size_t)len);
        w = write(2, tail, sizeof tail - 1);
        (void)w;
    } else {
        ssize_t w = write(2, idle_msg, (size_t)idle_len);
        (void)w;
    }
    _exit(128 + sig);
}

static void *watchdog_main(void *arg)
{
    MtComm *c = arg;
    while (!c->stop) {
        usleep(50 * 1000);
        if (inflight && now() - inflight_since > c->opt.timeout_s) {
            char tail[128], msg[320];
            int n = snprintf(tail, sizeof tail, " - no progress for %.0f s (timeout): a peer died or stalled\n",
                             c->opt.timeout_s);
            int len = inflight_message(msg, sizeof msg);
            ssize_t w = write(2, msg, (size_t)len);
            w = write(2, tail, (size_t)n);
            (void)w;
            _exit(3);
        }
    }
    return NULL;
}

const char *mt_op_name(MtOp op)
{
    static const char *names[MT_NOPS] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv"};
    return op < MT_NOPS ? names[op] : "?";
}

void mt_chunk(int64_t n, int N, int i, int64_t *lo, int64_t *hi)
{
    *lo = n * i / N;
    *hi = n * (i + 1) / N;
}

int64_t mt_comm_formula_bytes(MtOp op, int64_t bytes, int N, int is_root)
{
    switch (op) {
    case MT_OP_ALLREDUCE: return 2 * (int64_t)(N - 1) * bytes / N;
    case MT_OP_REDUCE_SCATTER:
    case MT_OP_ALLGATHER: return (int64_t)(N - 1) * bytes / N;
    case MT_OP_BROADCAST: return N > 1 && is_root ? bytes : 0;
    case MT_OP_SEND: return bytes;
    default: return 0;
    }
}

static void set_label(MtComm *c)
{
    MtCoords k = mt_mesh_coords(&c->layout, c->rank);
    snprintf(c->label, sizeof c->label, "[rank %d/%d pp=%d dp=%d tp=%d]", c->rank, c->size, k.pp, k.dp, k.tp);
    mt_set_rank_label(c->label + 1);
    c->label[strlen(c->label)] = 0;
    idle_len = snprintf(idle_msg, sizeof idle_msg, "%s terminated by a signal (not in a collective)\n", c->label);
    snprintf(label_copy, sizeof label_copy, "%s", c->label);
}

MtComm *mt_comm_init(int *argc, char ***argv, const MtCommOptions *opt)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MtComm *c = calloc(1, sizeof *c);
    MT_ASSERT(c, "out of memory");
    c->opt = *opt;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->layout = (MtLayout){.dp = c->size, .tp = 1, .pp = 1};
    for (int g = 0; g < MT_NGROUPS; g++)
        c->groups[g] = c->second[g] = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->groups[MT_GROUP_WORLD]);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->second[MT_GROUP_WORLD]);
    c->grank[MT_GROUP_WORLD] = c->rank;
    c->gsize[MT_GROUP_WORLD] = c->size;
    set_label(c);
    MPI_Barrier(MPI_COMM_WORLD);
    c->t0 = now();
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (opt->timeout_s > 0) {
        c->watchdog_on = pthread_create(&c->watchdog, NULL, watchdog_main, c) == 0;
    }
    return c;
}

void mt_comm_mesh(MtComm *c, const MtLayout *l)
{
    MT_ASSERT(mt_mesh_size(l) == c->size, "mesh of %d ranks on a world of %d", mt_mesh_size(l), c->size);
    c->layout = *l;
    for (int g = 0; g < MT_GROUP_WORLD; g++) {
        if (c->groups[g] != MPI_COMM_NULL)
            MPI_Comm_free(&c->groups[g]);
        if (c->second[g] != MPI_COMM_NULL)
            MPI_Comm_free(&c->second[g]);
        MPI_Comm_split(MPI_COMM_WORLD, mt_mesh_group_color(l, g, c->rank), c->rank, &c->groups[g]);
        MPI_Comm_dup(c->groups[g], &c->second[g]);
        MPI_Comm_rank(c->groups[g], &c->grank[g]);
        MPI_Comm_size(c->groups[g], &c->gsize[g]);
        c->seq[g] = 0; /* a new group counts its calls from the start on every member */
    }
    set_label(c);
}

void mt_comm_finalize(MtComm *c)
{
    if (!c)
        return;
    c->stop = 1;
    if (c->watchdog_on)
        pthread_join(c->watchdog, NULL);
    for (int g = 0; g < MT_NGROUPS; g++) {
        if (c->groups[g] != MPI_COMM_NULL)
            MPI_Comm_free(&c->groups[g]);
        if (c->second[g] != MPI_COMM_NULL)
            MPI_Comm_free(&c->second[g]);
    }
    while (c->free_reqs) {
        MtRequest *r = c->free_reqs;
        c->free_reqs = r->next_free;
        free(r);
    }
    free(c->events);
    free(c->scratch);
    free(c);
    MPI_Finalize();
}

int mt_comm_rank(const MtComm *c) { return c->rank; }
int mt_comm_size(const MtComm *c) { return c->size; }
int mt_comm_group_rank(const MtComm *c, MtGroupKind g) { return c->grank[g]; }
int mt_comm_group_size(const MtComm *c, MtGroupKind g) { return c->gsize[g]; }
const char *mt_comm_label(const MtComm *c) { return c->label; }
int64_t mt_comm_bytes(const MtComm *c, MtGroupKind g, MtOp op) { return c->bytes[g][op]; }

int64_t mt_comm_group_bytes(const MtComm *c, MtGroupKind g)
{
    int64_t s = 0;
    for (int op = 0; op < MT_NOPS; op++)
        s += c->bytes[g][op];
    return s;
}

void mt_comm_reset_counters(MtComm *c) { memset(c->bytes, 0, sizeof c->bytes); }

int64_t mt_comm_total_bytes(const MtComm *c, MtGroupKind g) { return c->total[g]; }

void mt_comm_barrier(MtComm *c)
{
    (void)c;
    MPI_Barrier(MPI_COMM_WORLD);
}

void mt_comm_gather_i64(MtComm *c, const int64_t *mine, int n, int64_t *all)
{
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)n);
    MT_ASSERT(tmp, "out of memory");
    memcpy(tmp, mine, sizeof(int64_t) * (size_t)n); /* mine may alias all */
    MPI_Gather(tmp, n, MPI_INT64_T, all, n, MPI_INT64_T, 0, MPI_COMM_WORLD);
    free(tmp);
}

/* ---- bookkeeping around every operation ---- */

static MPI_Comm group(MtComm *c, MtGroupKind g)
{
    MT_ASSERT(g < MT_NGROUPS && c->groups[g] != MPI_COMM_NULL, "group %s used before mt_comm_mesh",
              mt_group_name(g));
    return c->groups[g];
}

/* the collective check: every member must be about to run the same operation */
static void check_signature(MtComm *c, MtGroupKind g, MtOp op, int64_t n, int root)
{
    int N = c->gsize[g];
    int64_t mine[4] = {c->seq[g], op, n, root};
    int64_t *all = malloc(sizeof(int64_t) * 4 * (size_t)N);
    MT_ASSERT(all, "out of memory");
    MPI_Allgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, c->groups[g]);
    for (int i = 0; i < N; i++) {
        int64_t *o = all + 4 * i;
        if (memcmp(o, mine, sizeof mine) != 0) {
            fprintf(stderr,
                    "%s collective mismatch on group %s: this rank calls %s(n=%lld, root=%lld) as call #%lld, "
                    "group rank %d calls %s(n=%lld, root=%lld) as call #%lld\n",
                    c->label, mt_group_name(g), mt_op_name(op), (long long)n, (long long)root,
                    (long long)c->seq[g], i, mt_op_name((MtOp)o[1]), (long long)o[2], (long long)o[3],
                    (long long)o[0]);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
    }
    free(all);
}

static double begin(MtComm *c, MtGroupKind g, MtOp op, int64_t n, int root, int collective)
{
    group(c, g);
    if (collective)
        c->seq[g]++;
    inflight_op = op;
    inflight_peer = op == MT_OP_SEND || op == MT_OP_RECV ? root : -1;
    inflight_group = g;
    inflight_seq = c->seq[g];
    inflight_n = n;
    double t = now();
    inflight_since = t;
    inflight = 1; /* from here on the watchdog and the signal handlers know what we wait on */
    if (collective && c->opt.check)
        check_signature(c, g, op, n, root);
    return t;
}

/* appends to the trace (when tracing); the trace loses events rather than the run */
static void add_event(MtComm *c, Event e)
{
    if (!c->opt.trace)
        return;
    if (c->nevents == c->cap) {
        int cap = c->cap ? 2 * c->cap : 1024;
        Event *grown = realloc(c->events, sizeof(Event) * (size_t)cap);
        if (!grown)
            return;
        c->events = grown;
        c->cap = cap;
    }
    c->events[c->nevents++] = e;
}

static void record(MtComm *c, MtGroupKind g, MtOp op, int64_t n, int64_t bytes, double start)
{
    double t = now();
    c->bytes[g][op] += bytes;
    c->total[g] += bytes;
    add_event(c, (Event){op, g, n, bytes, start - c->t0, t - c->t0});
}

static void end(MtComm *c, MtGroupKind g, MtOp op, int64_t n, int root_or_me, double start)
{
    inflight = 0;
    int N = c->gsize[g];
    record(c, g, op, n, mt_comm_formula_bytes(op, n * (int64_t)sizeof(float), N, root_or_me), start);
}

static void counts_displs(int64_t n, int N, int *counts, int *displs)
{
    for (int i = 0; i < N; i++) {
        int64_t lo, hi;
        mt_chunk(n, N, i, &lo, &hi);
        MT_ASSERT(hi - lo <= INT32_MAX && lo <= INT32_MAX, "buffer of %lld floats is too large for one call", (long long)n);
        counts[i] = (int)(hi - lo);
        displs[i] = (int)lo;
    }
}

/* counts[0..N) and displacements [N..2N) of the chunks of n elements (owned by the caller) */
static int *chunk_counts(int64_t n, int N)
{
    int *cd = malloc(sizeof(int) * 2 * (size_t)N);
    MT_ASSERT(cd, "out of memory");
    counts_displs(n, N, cd, cd + N);
    return cd;
}

static float *scratch(MtComm *c, int64_t n)
{
    if (c->scratch_n < n) {
        free(c->scratch);
        c->scratch = malloc(sizeof(float) * (size_t)n);
        MT_ASSERT(c->scratch, "cannot allocate %lld floats of communication scratch", (long long)n);
        c->scratch_n = n;
    }
    return c->scratch;
}

/* rows lo..hi-1 of x (each m floats) summed as S(lo,hi) = S(lo,mid) + S(mid,hi) into row lo */
static void tree_rows(float *x, int64_t m, int lo, int hi)
{
    if (hi - lo <= 1)
        return;
    int mid = lo + (hi - lo) / 2;
    tree_rows(x, m, lo, mid);
    tree_rows(x, m, mid, hi);
    float *a = x + (int64_t)lo * m;
    const float *b = x + (int64_t)mid * m;
    for (int64_t k = 0; k < m; k++)
        a[k] += b[k];
}

/* the fixed-order reduce-scatter: exchange chunks, sum each in tree order over group ranks */
static void rs_det(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n)
{
    int N = c->gsize[g], me = c->grank[g];
    int *sc = calloc(4 * (size_t)N, sizeof(int));
    MT_ASSERT(sc, "out of memory");
    int *sd = sc + N, *rc = sc + 2 * N, *rd = sc + 3 * N;
    counts_displs(n, N, sc, sd);
    int mine = sc[me];
    for (int i = 0; i < N; i++) {
        rc[i] = mine;
        rd[i] = i * mine;
    }
    float *rows = scratch(c, (int64_t)N * mine);
    MPI_Alltoallv(in, sc, sd, MPI_FLOAT, rows, rc, rd, MPI_FLOAT, c->groups[g]);
    tree_rows(rows, mine, 0, N);
    memcpy(out, rows, sizeof(float) * (size_t)mine);
    free(sc);
}

/* ---- blocking operations ---- */

void mt_allreduce(MtComm *c, MtGroupKind g, float *buf, int64_t n, int det)
{
    double t = begin(c, g, MT_OP_ALLREDUCE, n, -1, 1);
    int N = c->gsize[g];
    if (N > 1 && !det) {
        MT_ASSERT(n <= INT32_MAX, "buffer too large");
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->groups[g]);
    } else if (N > 1) {
        int *cd = chunk_counts(n, N), me = c->grank[g];
        float *mine = malloc(sizeof(float) * (size_t)(cd[me] ? cd[me] : 1));
        MT_ASSERT(mine, "out of memory");
        rs_det(c, g, buf, mine, n);
        MPI_Allgatherv(mine, cd[me], MPI_FLOAT, buf, cd, cd + N, MPI_FLOAT, c->groups[g]);
        free(mine);
        free(cd);
    }
    end(c, g, MT_OP_ALLREDUCE, n, 0, t);
}

void mt_reduce_scatter(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n, int det)
{
    double t = begin(c, g, MT_OP_REDUCE_SCATTER, n, -1, 1);
    int N = c->gsize[g];
    if (N == 1) {
        memcpy(out, in, sizeof(float) * (size_t)n);
    } else if (det) {
        rs_det(c, g, in, out, n);
    } else {
        int *cd = chunk_counts(n, N);
        MPI_Reduce_scatter(in, out, cd, MPI_FLOAT, MPI_SUM, c->groups[g]);
        free(cd);
    }
    end(c, g, MT_OP_REDUCE_SCATTER, n, 0, t);
}

void mt_allgather(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n)
{
    double t = begin(c, g, MT_OP_ALLGATHER, n, -1, 1);
    int N = c->gsize[g];
    int *cd = chunk_counts(n, N), me = c->grank[g];
    if (N == 1)
        memmove(out, in, sizeof(float) * (size_t)n);
    else /* in may already be this rank's chunk of out */
        MPI_Allgatherv(in == out + cd[N + me] ? MPI_IN_PLACE : in, cd[me], MPI_FLOAT, out, cd, cd + N,
                       MPI_FLOAT, c->groups[g]);
    free(cd);
    end(c, g, MT_OP_ALLGATHER, n, 0, t);
}

void mt_broadcast(MtComm *c, MtGroupKind g, float *buf, int64_t n, int root)
{
    double t = begin(c, g, MT_OP_BROADCAST, n, root, 1);
    MT_ASSERT(n <= INT32_MAX, "buffer too large");
    if (c->gsize[g] > 1)
        MPI_Bcast(buf, (int)n, MPI_FLOAT, root, c->groups[g]);
    end(c, g, MT_OP_BROADCAST, n, c->grank[g] == root, t);
}

void mt_send(MtComm *c, MtGroupKind g, const float *buf, int64_t n, int peer)
{
    double t = begin(c, g, MT_OP_SEND, n, peer, 0);
    MT_ASSERT(n <= INT32_MAX, "buffer too large");
    MPI_Send(buf, (int)n, MPI_FLOAT, peer, 0, c->groups[g]);
    end(c, g, MT_OP_SEND, n, 1, t);
}

void mt_recv(MtComm *c, MtGroupKind g, float *buf, int64_t n, int peer)
{
    double t = begin(c, g, MT_OP_RECV, n, peer, 0);
    MT_ASSERT(n <= INT32_MAX, "buffer too large");
    MPI_Recv(buf, (int)n, MPI_FLOAT, peer, 0, c->groups[g], MPI_STATUS_IGNORE);
    end(c, g, MT_OP_RECV, n, 0, t);
}

/* ---- non-blocking operations ---- */

static MtRequest *request(MtComm *c, MtGroupKind g, MtOp op, int64_t n, int root, int collective)
{
    MtRequest *r = c->free_reqs;
    if (r)
        c->free_reqs = r->next_free;
    else if ((r = malloc(sizeof *r)))
        c->reqs_made++;
    MT_ASSERT(r, "out of memory");
    double t = begin(c, g, op, n, root, collective);
    inflight = 0; /* posting does not wait; mt_wait does */
    *r = (MtRequest){.comm = c, .op = op, .group = g, .n = n, .start = t, .peer = root};
    r->bytes = mt_comm_formula_bytes(op, n * (int64_t)sizeof(float), c->gsize[g], op == MT_OP_SEND);
    MT_ASSERT(n <= INT32_MAX, "buffer too large");
    return r;
}

/* posts phase 1 of a fixed-order reduction: every peer gets its chunk of in */
static void post_exchange(MtComm *c, MtRequest *r, const float *in)
{
    int N = c->gsize[r->group], me = c->grank[r->group];
    r->xc = calloc(4 * (size_t)N, sizeof(int));
    MT_ASSERT(r->xc, "out of memory");
    int *sc = r->xc, *sd = sc + N, *rc = sc + 2 * N, *rd = sc + 3 * N;
    counts_displs(r->n, N, sc, sd);
    r->mine = sc[me];
    for (int i = 0; i < N; i++) {
        rc[i] = r->mine;
        rd[i] = i * r->mine;
    }
    r->rows = malloc(sizeof(float) * (size_t)(N * r->mine > 0 ? N * r->mine : 1));
    MT_ASSERT(r->rows, "cannot allocate %lld floats of communication scratch", (long long)N * r->mine);
    r->phase = 1;
    MPI_Ialltoallv(in, sc, sd, MPI_FLOAT, r->rows, rc, rd, MPI_FLOAT, c->groups[r->group], &r->req);
}

MtRequest *mt_iallreduce(MtComm *c, MtGroupKind g, float *buf, int64_t n, int det)
{
    MtRequest *r = request(c, g, MT_OP_ALLREDUCE, n, -1, 1);
    if (c->gsize[g] == 1) {
        r->req = MPI_REQUEST_NULL;
    } else if (det) {
        r->buf = buf;
        r->counts = chunk_counts(n, c->gsize[g]);
        r->displs = r->counts + c->gsize[g];
        MT_ASSERT(c->nqueue < (int)(sizeof c->queue / sizeof c->queue[0]), "too many all-reduces in flight");
        c->queue[c->nqueue++] = r;
        post_exchange(c, r, buf);
    } else {
        MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->groups[g], &r->req);
    }
    return r;
}

MtRequest *mt_ireduce_scatter(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n, int det)
{
    MtRequest *r = request(c, g, MT_OP_REDUCE_SCATTER, n, -1, 1);
    if (c->gsize[g] == 1) {
        memcpy(out, in, sizeof(float) * (size_t)n);
        r->req = MPI_REQUEST_NULL;
    } else if (det) {
        r->out = out;
        post_exchange(c, r, in);
    } else {
        r->counts = chunk_counts(n, c->gsize[g]);
        r->displs = r->counts + c->gsize[g];
        MPI_Ireduce_scatter(in, out, r->counts, MPI_FLOAT, MPI_SUM, c->groups[g], &r->req);
    }
    return r;
}

MtRequest *mt_iallgather(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n)
{
    MtRequest *r = request(c, g, MT_OP_ALLGATHER, n, -1, 1);
    r->counts = chunk_counts(n, c->gsize[g]);
    r->displs = r->counts + c->gsize[g];
    int me = c->grank[g];
    MPI_Iallgatherv(in == out + r->displs[me] ? MPI_IN_PLACE : in, r->counts[me], MPI_FLOAT, out, r->counts,
                    r->displs, MPI_FLOAT, c->groups[g], &r->req);
    return r;
}

MtRequest *mt_isend(MtComm *c, MtGroupKind g, const float *buf, int64_t n, int peer, int tag)
{
    MtRequest *r = request(c, g, MT_OP_SEND, n, peer, 0);
    MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, c->groups[g], &r->req);
    return r;
}

MtRequest *mt_irecv(MtComm *c, MtGroupKind g, float *buf, int64_t n, int peer, int tag)
{
    MtRequest *r = request(c, g, MT_OP_RECV, n, peer, 0);
    MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, c->groups[g], &r->req);
    return r;
}

int64_t mt_comm_requests_made(const MtComm *c) { return c->reqs_made; }

void mt_request_count_now(MtRequest *r)
{
    r->comm->bytes[r->group][r->op] += r->bytes;
    r->comm->total[r->group] += r->bytes;
    r->bytes = 0; /* its completion records the time only */
}

static void finish(MtRequest *r)
{
    record(r->comm, r->group, r->op, r->n, r->bytes, r->start);
    free(r->counts);
    free(r->xc);
    free(r->rows);
    r->next_free = r->comm->free_reqs;
    r->comm->free_reqs = r;
}

/* Sums the exchanged rows of a fixed-order reduction whose exchange has completed; a
 * reduce-scatter is then done, an all-reduce posts its gather (phase 2). */
static void second_phase(MtComm *c, MtRequest *r)
{
    int N = c->gsize[r->group], me = c->grank[r->group];
    tree_rows(r->rows, r->mine, 0, N);
    if (r->op == MT_OP_REDUCE_SCATTER) {
        memcpy(r->out, r->rows, sizeof(float) * (size_t)r->mine);
        r->phase = 0;
        return;
    }
    r->phase = 2;
    MPI_Iallgatherv(r->rows, r->counts[me], MPI_FLOAT, r->buf, r->counts, r->displs, MPI_FLOAT,
                    c->second[r->group], &r->req);
}

/* Moves queued all-reduces whose exchange is done to their gather, oldest first; with
 * upto set, waits until that one has moved. */
static void drain(MtComm *c, MtRequest *upto)
{
    int k = 0;
    while (k < c->nqueue) {
        MtRequest *h = c->queue[k];
        int flag = 1;
        if (upto)
            MPI_Wait(&h->req, MPI_STATUS_IGNORE);
        else
            MPI_Test(&h->req, &flag, MPI_STATUS_IGNORE);
        if (!flag)
            break;
        second_phase(c, h);
        k++;
        if (h == upto)
            break;
    }
    memmove(c->queue, c->queue + k, sizeof(MtRequest *) * (size_t)(c->nqueue - k));
    c->nqueue -= k;
}

static int queued(const MtComm *c, const MtRequest *r)
{
    for (int i = 0; i < c->nqueue; i++)
        if (c->queue[i] == r)
            return 1;
    return 0;
}

void mt_wait(MtComm *c, MtRequest *r)
{
    begin(c, r->group, r->op, r->n, r->peer, 0); /* for the watchdog: what this rank waits on */
    if (queued(c, r))
        drain(c, r);
    MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    if (r->phase == 1) { /* a reduce-scatter's exchange */
        second_phase(c, r);
    }
    inflight = 0;
    finish(r);
}

int mt_test(MtComm *c, MtRequest *r)
{
    drain(c, NULL);
    if (queued(c, r))
        return 0;
    int flag = 0;
    MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (!flag)
        return 0;
    if (r->phase == 1)
        second_phase(c, r);
    finish(r);
    return 1;
}

/* ---- trace ---- */

double mt_comm_clock(const MtComm *c) { return now() - c->t0; }

#define COMPUTE_OP 100 /* + kind: compute events share the event list */

void mt_comm_trace_compute(MtComm *c, int kind, int stage, int mb, int64_t step, double start, double end)
{
    add_event(c, (Event){COMPUTE_OP + kind, stage, mb, step, start, end});
}

MtStatus mt_comm_write_trace(MtComm *c, const char *path)
{
    int n = c->nevents, *counts = NULL, *displs = NULL, total = 0;
    if (c->rank == 0) {
        counts = malloc(sizeof(int) * 2 * (size_t)c->size);
        MT_ASSERT(counts, "out of memory");
        displs = counts + c->size;
    }
    MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (c->rank == 0)
        for (int i = 0; i < c->size; i++) {
            displs[i] = total * (int)sizeof(Event);
            total += counts[i];
            counts[i] *= (int)sizeof(Event);
        }
    Event *all = c->rank == 0 ? malloc(sizeof(Event) * (size_t)(total ? total : 1)) : NULL;
    MPI_Gatherv(c->events, n * (int)sizeof(Event), MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    MtStatus s = MT_OK;
    if (c->rank == 0) {
        FILE *f = fopen(path, "w");
        if (!f) {
            s = mt_error(MT_EIO, "cannot write trace %s", path);
        } else {
            fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
            for (int r = 0; r < c->size; r++)
                fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                           "\"args\": {\"name\": \"rank %d\"}},\n", r, r);
            int k = 0;
            for (int r = 0; r < c->size; r++)
                for (int i = 0; i < counts[r] / (int)sizeof(Event); i++, k++) {
                    Event *e = &all[k];
                    if (e->op >= COMPUTE_OP) {
                        fprintf(f, "{\"name\": \"%d%c%lld\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": 0, "
                                   "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"kind\": %d, \"stage\": %d, "
                                   "\"mb\": %lld, \"step\": %lld}},\n", e->group, "FBW"[(e->op - COMPUTE_OP) % 3],
                                (long long)e->n, r, e->start * 1e6, (e->end - e->start) * 1e6, e->op - COMPUTE_OP,
                                e->group, (long long)e->n, (long long)e->bytes);
                        continue;
                    }
                    fprintf(f, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, "
                               "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"bytes\": %lld, \"floats\": %lld}},\n",
                            mt_op_name((MtOp)e->op), mt_group_name((MtGroupKind)e->group), r, e->start * 1e6,
                            (e->end - e->start) * 1e6, (long long)e->bytes, (long long)e->n);
                }
            fprintf(f, "{\"name\": \"end\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, \"ts\": %.3f}\n]}\n",
                    (now() - c->t0) * 1e6);
            if (fclose(f) != 0)
                s = mt_error(MT_EIO, "cannot write trace %s", path);
        }
    }
    free(all);
    free(counts);
    int ok = s == MT_OK;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok ? MT_OK : (c->rank == 0 ? s : mt_error(MT_EIO, "rank 0 could not write the trace %s", path));
}
