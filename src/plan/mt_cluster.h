/* mt_cluster.h - a cluster as the planner sees it: devices, their memory, the links
 * between them, and the efficiencies the time model applies (docs/planner.md).
 *
 * A cluster file is JSON (clusters/a100-80g.json is an example):
 *   name              string
 *   devices_per_node  integer >= 1
 *   device            peak_tflops {fp32, bf16}: dense peak of a matrix product per precision;
 *                     memory_bytes; memory_bw_gbs (GB/s, 10^9 bytes); memory_efficiency (0, 1]:
 *                     the fraction of that bandwidth streaming kernels reach; optional
 *                     elementwise_bw_gbs: the rate of the model's element-wise kernels, as
 *                     the bytes the time model counts for them (absent: memory_bw_gbs x
 *                     memory_efficiency); optional threads (>= 1, default 1): a device's
 *                     threads, which the CPU engine's per-thread scratch counts; optional
 *                     gemm_table: [[ta, tb, m, n, k, gflops], ...], measured products (a
 *                     product of one of these shapes and orientations costs its measured
 *                     rate instead of the curve's); optional node_full_speed (0, 1]: a
 *                     device's compute speed when every device of its node computes, against
 *                     alone (applied to layouts that fill a node: matrix products and
 *                     attention); optional node_full_memory_speed (0, 1]: the same for its
 *                     streaming work (element-wise kernels, the optimizer)
 *   intra_node        bw_gbs (each way, per device), latency_us (per step of a collective)
 *   inter_node        the same for a device's share of the links between nodes
 *   efficiency        gemm_max (0, 1]: a large product's fraction of the peak; gemm_half_dim > 0:
 *                     the matrix dimension at which a product reaches half of it per dimension;
 *                     network (0, 1]: the fraction of link bandwidth collectives reach;
 *                     optional attention_forward and attention_backward (0, 1]: the fused
 *                     attention kernel's causal FLOPs per second (backward: 2.5x the
 *                     forward's) over the peak (absent: as a matrix product of its shape)
 *   sources           free text: where each figure comes from (not read)
 * Every field but sources is required and positive; a missing, negative or mistyped one is
 * MT_EINPUT naming the file and the field.  Built-in clusters (a100-80g, h100-80g) are the
 * files of clusters/ compiled into the binary.  Pure: no MPI, no device.
 */
#ifndef MT_CLUSTER_H
#define MT_CLUSTER_H

#include "mt_core.h"

enum { MT_PREC_FP32, MT_PREC_BF16, MT_NPREC };

#define MT_CLUSTER_MAX_GEMM 512

typedef struct {
    double bw;  /* bytes per second, each way, per device */
    double lat; /* seconds per step */
} MtLink;

typedef struct {
    char name[64];
    int devices_per_node;
    double peak[MT_NPREC];  /* FLOP/s of a dense matrix product */
    double mem_bytes;       /* per device */
    double mem_bw;          /* bytes/s */
    double mem_eff;
    double ew_bw;           /* bytes/s of element-wise kernels (0: mem_bw x mem_eff) */
    int threads;            /* per device (the CPU engine's activations count per-thread scratch) */
    double node_full;       /* compute speed of a device in a full node, against alone (0: not given, 1) */
    double node_full_mem;   /* its streaming speed there (0: not given, 1) */
    int ngemm;              /* measured products: shape, orientation and FLOP/s */
    struct {
        int ta, tb;
        double m, n, k, rate;
    } gemm[MT_CLUSTER_MAX_GEMM];
    MtLink intra, inter;
    double gemm_max, gemm_half, net_eff;
    double attn_fwd, attn_bwd; /* 0: not given */
} MtCluster;

/* "fp32" / "bf16" -> MT_PREC_*; -1 if unknown. */
int mt_prec_kind(const char *name);
const char *mt_prec_name(int prec);
/* Parses a cluster file's text (what names it in errors: the path). */
MtStatus mt_cluster_parse(const char *text, size_t len, const char *what, MtCluster *cl);
/* A built-in cluster by name (MT_EINPUT listing the names when unknown), or a file's path
 * when name contains '/' or ends in .json. */
MtStatus mt_cluster_load(const char *name, MtCluster *cl);
/* A cluster file. */
MtStatus mt_cluster_read(const char *path, MtCluster *cl);
/* The built-in names, comma separated (for help and errors). */
const char *mt_cluster_builtin_names(void);
/* The built-in file's text, or NULL. */
const char *mt_cluster_builtin_text(const char *name);

#endif
