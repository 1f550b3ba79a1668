/* mt_comm.h - the communication layer every technique shares (MPI underneath).
 *
 * One MtComm per process: the world, the mesh groups (mt_mesh.h), byte counters per group
 * and kind of operation, timed trace events, the collective check and the stall watchdog.
 * Buffers are contiguous floats; counts are elements.
 *
 * Bytes counted (what this rank sends, by the convention of the nccl-tests report, for
 * n bytes of data on a group of N ranks, in integer arithmetic, rounded down):
 *     all-reduce          2 (N-1) n / N
 *     reduce-scatter      (N-1) n / N     (n: the whole buffer, before scattering)
 *     all-gather          (N-1) n / N     (n: the whole buffer, after gathering)
 *     broadcast           n at the root, 0 elsewhere
 *     send                n;  receive 0
 * The same numbers whether the fast path (MPI's reductions) or the deterministic path runs:
 * the deterministic reduce-scatter sends each peer its chunk and sums the N contributions
 * of its own chunk in the balanced pairwise order over group ranks (S(lo,hi) = S(lo,mid) +
 * S(mid,hi), mid = lo + (hi-lo)/2), exactly as the single-device micro-batch tree.
 *
 * Chunks: element range [i n / N, (i+1) n / N) belongs to group rank i.
 *
 * Failure: with the check on, every collective first compares (sequence number, operation,
 * element count, root) across its group and stops the job on a mismatch, quoting both.  A
 * watchdog thread ends the process, naming the operation, if one call waits longer than
 * the timeout; mpirun then ends the others.  SIGTERM/SIGINT print what the rank waited on.
 */
#ifndef MT_COMM_H
#define MT_COMM_H

#include <stdint.h>

#include "mt_core.h"
#include "mt_mesh.h"

typedef enum {
    MT_OP_ALLREDUCE,
    MT_OP_REDUCE_SCATTER,
    MT_OP_ALLGATHER,
    MT_OP_BROADCAST,
    MT_OP_SEND,
    MT_OP_RECV,
    MT_NOPS
} MtOp;

typedef struct {
    int check;         /* compare collective signatures across each group */
    double timeout_s;  /* watchdog bound on one call; <= 0: no watchdog */
    int trace;         /* record trace events */
} MtCommOptions;

typedef struct MtComm MtComm;
typedef struct MtRequest MtRequest;

/* Starts MPI (or joins the world it was launched in) and the watchdog.  Never fails
 * softly: MPI errors abort the job. */
MtComm *mt_comm_init(int *argc, char ***argv, const MtCommOptions *opt);
/* Every rank of the world waits for all (before a job-wide exit whose message one rank prints). */
void mt_comm_barrier(MtComm *c);
/* Builds the mesh groups; the layout must have passed mt_layout_check for this world. */
void mt_comm_mesh(MtComm *c, const MtLayout *l);
void mt_comm_finalize(MtComm *c);

int mt_comm_rank(const MtComm *c);                 /* world rank */
int mt_comm_size(const MtComm *c);                 /* world size */
int mt_comm_group_rank(const MtComm *c, MtGroupKind g);
int mt_comm_group_size(const MtComm *c, MtGroupKind g);
/* "[rank 5/8 pp=1 dp=0 tp=1]" */
const char *mt_comm_label(const MtComm *c);

/* Blocking collectives.  Sums use MPI's reduction (fast path) unless det != 0. */
void mt_allreduce(MtComm *c, MtGroupKind g, float *buf, int64_t n, int det);
/* out receives this rank's chunk of the sum of in (n elements) */
void mt_reduce_scatter(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n, int det);
/* in: this rank's chunk; out: the n gathered elements (in may be the rank's own chunk of out) */
void mt_allgather(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n);
void mt_broadcast(MtComm *c, MtGroupKind g, float *buf, int64_t n, int root);
/* peer is a group rank */
void mt_send(MtComm *c, MtGroupKind g, const float *buf, int64_t n, int peer);
void mt_recv(MtComm *c, MtGroupKind g, float *buf, int64_t n, int peer);

/* Non-blocking forms; a request is finished by mt_wait or a true mt_test (which also moves
 * a fixed-order reduction from its exchange to its sum and gather: call it now and then). */
MtRequest *mt_iallreduce(MtComm *c, MtGroupKind g, float *buf, int64_t n, int det);
MtRequest *mt_ireduce_scatter(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n, int det);
MtRequest *mt_iallgather(MtComm *c, MtGroupKind g, const float *in, float *out, int64_t n);
/* tag: 0 .. 32767; messages between two ranks with the same tag match in posting order */
MtRequest *mt_isend(MtComm *c, MtGroupKind g, const float *buf, int64_t n, int peer, int tag);
MtRequest *mt_irecv(MtComm *c, MtGroupKind g, float *buf, int64_t n, int peer, int tag);
/* Counts r's bytes now, in the counters of the step that posts it, rather than when it
 * completes (an operation that lives across steps: a pipeline's post-validated norm). */
void mt_request_count_now(MtRequest *r);
void mt_wait(MtComm *c, MtRequest *r);
/* How many request structs the comm has allocated: a finished request (waited or tested
 * true) goes back to its pool, so a steady step allocates none. */
int64_t mt_comm_requests_made(const MtComm *c);
int mt_test(MtComm *c, MtRequest *r);

/* Pure helpers. */
void mt_chunk(int64_t n, int N, int i, int64_t *lo, int64_t *hi);
int64_t mt_comm_formula_bytes(MtOp op, int64_t bytes, int N, int is_root);
const char *mt_op_name(MtOp op);

/* Bytes this rank sent, per group and operation, since the last reset. */
int64_t mt_comm_bytes(const MtComm *c, MtGroupKind g, MtOp op);
int64_t mt_comm_group_bytes(const MtComm *c, MtGroupKind g);
void mt_comm_reset_counters(MtComm *c);
/* Bytes this rank sent on a group over the whole run (not reset). */
int64_t mt_comm_total_bytes(const MtComm *c, MtGroupKind g);
/* Bookkeeping (not counted): n values from every rank to world rank 0, rank-major in all
 * (needed on rank 0 only; mine may alias all). */
void mt_comm_gather_i64(MtComm *c, const int64_t *mine, int n, int64_t *all);
/* Seconds since the job's common start (after a barrier at mt_comm_init): the clock of
 * the trace, comparable across ranks. */
double mt_comm_clock(const MtComm *c);
/* Records a compute event in the trace (when tracing): kind 0 F, 1 B, 2 W of stage's
 * micro-batch mb in step `step`, from start to end (mt_comm_clock). */
void mt_comm_trace_compute(MtComm *c, int kind, int stage, int mb, int64_t step, double start, double end);
/* Gathers every rank's trace events to world rank 0, which writes one Chrome trace JSON
 * file (one row per rank; compute events have cat "compute" and args stage, mb, step).
 * Collective over the world. */
MtStatus mt_comm_write_trace(MtComm *c, const char *path);

#endif
