/* mt_schedule.h - pipeline stages and schedules as data (pure: no MPI).
 *
 * Stages.  With P pipeline ranks and V model chunks per rank (interleaved schedules) the
 * model's units are cut into S = P x V contiguous virtual stages: stage 0 takes the
 * embedding unit, stage S-1 the head unit, and the L blocks are spread as evenly as
 * possible, the first stages taking the extra blocks (Megatron's rule), unless the blocks
 * per stage are given (--stage-layers).  Virtual stage s lives on rank s mod P as its
 * chunk s / P (Megatron's interleaving).
 *
 * Worked example, L = 5 blocks, P = 2, V = 1: stage 0 = embedding + blocks 0..2 (units
 * 0..3), stage 1 = blocks 3..4 + head (units 4..6).  With V = 2 (S = 4; L = 8): stages
 * hold 2 blocks each; rank 0 runs stages 0 and 2, rank 1 stages 1 and 3.
 *
 * Schedules.  mt_schedule_build lists, for one rank, every action of one training step
 * in the order the rank performs them: forward (F), backward (B; with a split schedule
 * B is the input gradient only and W the weight gradient), and the sends and receives of
 * activations (SEND_F / RECV_F) and of their gradients (SEND_B / RECV_B) between
 * neighbouring stages.  A receive is posted before the compute action ahead of the one
 * that needs it, so the transfer overlaps that compute.  Text form: "<stage><kind><mb>",
 * e.g. 2F0 (stage 2, forward, micro-batch 0), 1W3, 0SEND_F1.
 *
 * The tied embedding.  wte's gradient of an accumulation block is the LM head's part
 * summed over the block's micro-batches, plus the rows reaching the embedding's output
 * summed per token over the block (MtEmbSum, mt_model.h).  With P > 1 the last stage
 * computes the head's part and the first stage the rows, so the list has, for every
 * micro-batch k, SEND_E after the first stage's backward of k, RECV_E on the last rank
 * after its H_k, and E k on the last rank; the executor moves the rows only at a block's
 * last micro-batch (the block's sum), and E of that micro-batch completes the block.
 * E k sits in the last rank's list before the first compute action that starts after the
 * rows were sent in the unit-cost simulation: dependencies never form a cycle through it,
 * and the blocks waiting for their rows (peak_wte) stay few.  An untied model
 * (MtSchedule.untied) has none of these: the first stage adds its rows to its own wte.
 *
 * Every schedule runs the backward passes of each stage in micro-batch order (and W in
 * micro-batch order), so a stage's gradient can be accumulated as the canonical pairwise
 * tree over micro-batches as the leaves arrive (mt_tree_plan, mt_accum.h).
 *
 *   naive        one micro-batch at a time through all stages and back (vertical model
 *                parallelism): bubble (P-1)/P
 *   gpipe        all forwards, then all backwards: bubble (P-1)/(M+P-1), M sets in flight
 *   1f1b         PipeDream-Flush (Megatron's default): P-s-1 warm-up forwards on stage s,
 *                then one forward, one backward: same bubble, min(P-s, M) sets in flight
 *   interleaved  Megatron's interleaved 1F1B over V chunks; needs M a multiple of P:
 *                bubble (P-1)/(V M + P-1) with unit costs
 *   zb           zero bubble ZB-H1 (Qi et al., 2023): backward split into B and W, W
 *                deferred into the bubbles, in-flight sets capped at min(P, M) (1F1B's
 *                peak): bubble (P-1)/(3M+P-1) with F = B = W = 1 when M >= P
 *   zb2          ZB-2p's memory (Qi et al., 2023): a list schedule at unit costs holding up
 *                to min(2P, M) sets, backwards first, W where nothing else is ready; the
 *                same step as zb at unit costs, shorter than zb whenever B > W and M > P
 *
 * The simulator runs any set of lists with given action costs: timeline, bubble fraction
 * (idle time over P x the step), the peak activation sets per rank, and it reports a
 * deadlock or a dependency violation with the action that broke it.
 */
#ifndef MT_SCHEDULE_H
#define MT_SCHEDULE_H

#include "mt_core.h"

#define MT_MAX_STAGES 64

typedef enum { MT_SCHED_NAIVE, MT_SCHED_GPIPE, MT_SCHED_1F1B, MT_SCHED_INTERLEAVED, MT_SCHED_ZB, MT_SCHED_ZB2, MT_NSCHED } MtSchedKind;

typedef enum {
    MT_ACT_F, MT_ACT_B, MT_ACT_W,             /* compute */
    MT_ACT_SEND_F, MT_ACT_RECV_F,             /* activations, stage s -> s+1 */
    MT_ACT_SEND_B, MT_ACT_RECV_B,             /* their gradients, stage s -> s-1 */
    MT_ACT_SEND_E, MT_ACT_RECV_E, MT_ACT_E,   /* the tied embedding's rows, first -> last stage */
    MT_NACT
} MtActKind;

typedef struct {
    int kind;  /* MtActKind */
    int stage; /* virtual stage 0..S-1 */
    int mb;    /* micro-batch */
} MtAction;

typedef struct {
    MtSchedKind kind;
    int P, M, V; /* ranks, micro-batches, chunks per rank */
    int untied;  /* the model's LM head has its own weight: no tied embedding, no E actions */
} MtSchedule;

/* "naive" ... "zb" -> kind; -1 if unknown. */
int mt_schedule_kind(const char *name);
const char *mt_schedule_name(MtSchedKind kind);
/* Whether the schedule splits backward into B and W. */
int mt_schedule_split(MtSchedKind kind);
/* P, M, V valid for the kind (V > 1 only with interleaved, which needs M % P == 0);
 * MT_EINPUT with one line quoting the numbers. */
MtStatus mt_schedule_check(const MtSchedule *s);
/* Most actions one rank's list can hold (a bound for the caller's buffer). */
int mt_schedule_max_actions(const MtSchedule *s);
/* Writes rank's actions into out (capacity mt_schedule_max_actions) and returns their count. */
int mt_schedule_build(const MtSchedule *s, int rank, MtAction *out);
/* The most micro-batch activation sets of chunk c (stage c P + rank) that rank's list
 * holds at once (F takes one; B, or W when split, returns it), and the most accumulation
 * blocks of B micro-batches whose head sums the last rank holds at once, from the H of a
 * block's first micro-batch to the E of its last (0 elsewhere): what the executor allocates. */
int mt_schedule_peak_sets(const MtSchedule *s, const MtAction *list, int n, int chunk);
int mt_schedule_peak_wte(const MtSchedule *s, const MtAction *list, int n, int B);
/* The rank's chunks whose sets have one shape (equal key[c], c < V) share one pool of sets:
 * sets[c] is the most sets of all those chunks held at once when c is the first chunk of
 * its pool, else 0 (its sets come from that chunk's pool).  With one key for every chunk
 * that is the rank's simultaneous peak; with distinct keys, mt_schedule_peak_sets. */
void mt_schedule_pool_sets(const MtSchedule *s, const MtAction *list, int n, const int *key, int *sets);
/* "2F0", "0SEND_F1" into buf (>= 40 bytes); returns buf. */
const char *mt_action_str(const MtAction *a, char *buf);

/* ---- stages ---- */

/* Blocks per virtual stage (S entries) for L blocks: given (S numbers) or even with the
 * first stages taking the extra blocks.  MT_EINPUT if S > L, a given count is < 1 or the
 * counts do not sum to L. */
MtStatus mt_stage_layers(int L, int S, const int *given, int *blocks);
/* Units [*first, *last] of virtual stage s (units: 0 embedding, 1..L blocks, L+1 head). */
void mt_stage_units(int L, int S, const int *blocks, int s, int *first, int *last);

/* ---- simulator ---- */

typedef struct {
    double start, end;
    int action; /* index into the rank's list */
} MtSimSpan;

typedef struct {
    double makespan;   /* time of the last action's end */
    double bubble;     /* idle / (P x makespan) */
    double busy[MT_MAX_STAGES];
    int peak_sets[MT_MAX_STAGES]; /* most micro-batch activation sets held at once, per rank */
    int peak_wte;                 /* most H_k held by the last rank awaiting their rows (E) */
    /* per rank: the compute actions' spans, in list order */
    MtSimSpan *span[MT_MAX_STAGES];
    int nspan[MT_MAX_STAGES];
    char error[256]; /* empty when the lists ran to the end */
} MtSimResult;

typedef struct {
    double f, b, w;      /* cost of one chunk's F, B and W; without a split, B costs b + w */
    const double *stage; /* or NULL: 3 S costs, (f, b, w) of each virtual stage, used instead */
    const double *each;  /* or NULL: every action's own cost, [(kind S + stage) M + mb] for kind
                          * 0 F, 1 B, 2 W (a measured step replayed; used before stage) */
} MtSimCosts;

/* Runs the P lists (lists[r] of n[r] actions) of schedule s.  Returns MT_OK, or MT_EINPUT
 * with res->error (and the message) naming the first deadlock or violated dependency.
 * res->span arrays are allocated; mt_sim_free releases them (NULL-safe, idempotent). */
MtStatus mt_simulate(const MtSchedule *s, MtAction *const *lists, const int *n, MtSimCosts costs,
                     MtSimResult *res);
void mt_sim_free(MtSimResult *res);

/* How many buffers the first stage needs for the rows of the tied embedding it sends (a
 * block of B micro-batches at a time): a send waits until its buffer's last rows were
 * received, so too few can deadlock a schedule whose last rank posts its receives late
 * (zb2's deferred W).  The fewest with which the lists run to the end when every send
 * waits so (a timing-free property: each rank runs its list in order, and every wait is on
 * a peer's progress, so one complete run means no run deadlocks).  0 with P = 1. */
int mt_schedule_esend_slots(const MtSchedule *s, int B);

#endif
