/* cluster.c - cluster files and the built-in clusters (see mt_cluster.h). */
#include "mt_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_fsutil.h"
#include "mt_json.h"

/* the files of clusters/, embedded at build time (CMakeLists.txt: mt_clusters_builtin.h) */
#include "mt_clusters_builtin.h"

int mt_prec_kind(const char *name)
{
    return strcmp(name, "fp32") == 0 ? MT_PREC_FP32 : strcmp(name, "bf16") == 0 ? MT_PREC_BF16 : -1;
}

const char *mt_prec_name(int prec) { return prec == MT_PREC_BF16 ? "bf16" : "fp32"; }

const char *mt_cluster_builtin_names(void) { return MT_CLUSTERS_BUILTIN_NAMES; }

const char *mt_cluster_builtin_text(const char *name)
{
    for (int i = 0; mt_clusters_builtin[i].name; i++)
        if (strcmp(mt_clusters_builtin[i].name, name) == 0)
            return mt_clusters_builtin[i].text;
    return NULL;
}

/* path "a.b" of obj as a positive number (at most `max` when max > 0) */
static MtStatus num(const MtJson *root, const char *a, const char *b, double max, const char *what, double *out)
{
    const MtJson *j = mt_json_get(root, a);
    if (b)
        j = mt_json_get(j, b);
    char name[96];
    snprintf(name, sizeof name, "%s%s%s", a, b ? "." : "", b ? b : "");
    if (!j)
        return mt_error(MT_EINPUT, "%s: missing field %s", what, name);
    if (mt_json_type(j) != MT_JSON_NUMBER)
        return mt_error(MT_EINPUT, "%s: field %s must be a number", what, name);
    double v = mt_json_num(j);
    if (!(v > 0.0))
        return mt_error(MT_EINPUT, "%s: field %s is %g: must be positive", what, name, v);
    if (max > 0.0 && v > max)
        return mt_error(MT_EINPUT, "%s: field %s is %g: must be at most %g", what, name, v, max);
    *out = v;
    return MT_OK;
}

MtStatus mt_cluster_parse(const char *text, size_t len, const char *what, MtCluster *cl)
{
    memset(cl, 0, sizeof *cl);
    MtJson *j = NULL;
    MtStatus s = mt_json_parse(text, len, &j);
    if (s != MT_OK)
        return mt_error_prefix(s, "%s", what);
    if (mt_json_type(j) != MT_JSON_OBJECT) {
        mt_json_free(j);
        return mt_error(MT_EINPUT, "%s: a cluster file is one JSON object", what);
    }
    const char *name = mt_json_str(mt_json_get(j, "name"));
    double dpn = 0, tf32 = 0, tbf16 = 0;
    if (!name || !*name || strlen(name) >= sizeof cl->name)
        s = mt_error(MT_EINPUT, "%s: field name must be a string of 1 to %d characters", what, (int)sizeof cl->name - 1);
    if (s == MT_OK)
        s = num(j, "devices_per_node", NULL, 1 << 20, what, &dpn);
    if (s == MT_OK && dpn != (double)(int)dpn)
        s = mt_error(MT_EINPUT, "%s: field devices_per_node is %g: must be a whole number", what, dpn);
    const MtJson *dev = mt_json_get(j, "device");
    if (s == MT_OK && mt_json_type(dev) != MT_JSON_OBJECT)
        s = mt_error(MT_EINPUT, "%s: missing object device", what);
    if (s == MT_OK)
        s = num(dev, "peak_tflops", "fp32", 0, what, &tf32);
    if (s == MT_OK)
        s = num(dev, "peak_tflops", "bf16", 0, what, &tbf16);
    if (s == MT_OK)
        s = num(dev, "memory_bytes", NULL, 0, what, &cl->mem_bytes);
    if (s == MT_OK)
        s = num(dev, "memory_bw_gbs", NULL, 0, what, &cl->mem_bw);
    if (s == MT_OK)
        s = num(dev, "memory_efficiency", NULL, 1.0, what, &cl->mem_eff);
    if (s == MT_OK)
        s = num(j, "intra_node", "bw_gbs", 0, what, &cl->intra.bw);
    if (s == MT_OK)
        s = num(j, "intra_node", "latency_us", 0, what, &cl->intra.lat);
    if (s == MT_OK)
        s = num(j, "inter_node", "bw_gbs", 0, what, &cl->inter.bw);
    if (s == MT_OK)
        s = num(j, "inter_node", "latency_us", 0, what, &cl->inter.lat);
    if (s == MT_OK)
        s = num(j, "efficiency", "gemm_max", 1.0, what, &cl->gemm_max);
    if (s == MT_OK)
        s = num(j, "efficiency", "gemm_half_dim", 0, what, &cl->gemm_half);
    if (s == MT_OK)
        s = num(j, "efficiency", "network", 1.0, what, &cl->net_eff);
    const char *opt[] = {"attention_forward", "attention_backward"};
    double *optv[] = {&cl->attn_fwd, &cl->attn_bwd};
    for (int i = 0; i < 2 && s == MT_OK; i++)
        if (mt_json_get(mt_json_get(j, "efficiency"), opt[i]))
            s = num(j, "efficiency", opt[i], 1.0, what, optv[i]);
    if (s == MT_OK && mt_json_get(dev, "elementwise_bw_gbs"))
        s = num(dev, "elementwise_bw_gbs", NULL, 0, what, &cl->ew_bw);
    if (s == MT_OK && mt_json_get(dev, "node_full_speed"))
        s = num(dev, "node_full_speed", NULL, 1.0, what, &cl->node_full);
    if (s == MT_OK && mt_json_get(dev, "node_full_memory_speed"))
        s = num(dev, "node_full_memory_speed", NULL, 1.0, what, &cl->node_full_mem);
    double threads = 1;
    if (s == MT_OK && mt_json_get(dev, "threads"))
        s = num(dev, "threads", NULL, 1024, what, &threads);
    if (s == MT_OK && (threads != (double)(int)threads || threads < 1))
        s = mt_error(MT_EINPUT, "%s: field device.threads is %g: must be a whole number >= 1", what, threads);
    cl->threads = (int)threads;
    const MtJson *tab = mt_json_get(mt_json_get(j, "efficiency"), "gemm_table");
    if (s == MT_OK && tab && (mt_json_type(tab) != MT_JSON_ARRAY || mt_json_len(tab) > MT_CLUSTER_MAX_GEMM))
        s = mt_error(MT_EINPUT, "%s: field efficiency.gemm_table must be an array of at most %d entries", what,
                     MT_CLUSTER_MAX_GEMM);
    for (int i = 0; s == MT_OK && i < mt_json_len(tab); i++) {
        const MtJson *e = mt_json_at(tab, i);
        double v[6];
        int ok = mt_json_type(e) == MT_JSON_ARRAY && mt_json_len(e) == 6;
        for (int k = 0; ok && k < 6; k++) {
            v[k] = mt_json_num(mt_json_at(e, k));
            ok = mt_json_type(mt_json_at(e, k)) == MT_JSON_NUMBER && (k < 2 ? v[k] == 0 || v[k] == 1 : v[k] > 0);
        }
        if (!ok) {
            s = mt_error(MT_EINPUT, "%s: efficiency.gemm_table entry %d must be [ta, tb, m, n, k, gflops] (ta, tb 0 "
                         "or 1; the rest positive)", what, i);
            break;
        }
        cl->gemm[i].ta = (int)v[0], cl->gemm[i].tb = (int)v[1];
        cl->gemm[i].m = v[2], cl->gemm[i].n = v[3], cl->gemm[i].k = v[4], cl->gemm[i].rate = v[5] * 1e9;
        cl->ngemm = i + 1;
    }
    if (s == MT_OK) {
        snprintf(cl->name, sizeof cl->name, "%s", name);
        cl->devices_per_node = (int)dpn;
        cl->peak[MT_PREC_FP32] = tf32 * 1e12;
        cl->peak[MT_PREC_BF16] = tbf16 * 1e12;
        cl->mem_bw *= 1e9;
        cl->ew_bw *= 1e9;
        cl->intra.bw *= 1e9;
        cl->inter.bw *= 1e9;
        cl->intra.lat *= 1e-6;
        cl->inter.lat *= 1e-6;
    }
    mt_json_free(j);
    return s;
}

MtStatus mt_cluster_load(const char *name, MtCluster *cl)
{
    size_t n = strlen(name);
    if (!strchr(name, '/') && !(n > 5 && strcmp(name + n - 5, ".json") == 0)) {
        const char *text = mt_cluster_builtin_text(name);
        if (!text)
            return mt_error(MT_EINPUT, "--cluster %s: unknown cluster (built in: %s; this-machine, measured by meshtrain calibrate; or a cluster file's path, "
                            "docs/planner.md)", name, mt_cluster_builtin_names());
        return mt_cluster_parse(text, strlen(text), name, cl);
    }
    return mt_cluster_read(name, cl);
}

MtStatus mt_cluster_read(const char *path, MtCluster *cl)
{
    const char *name = path;
    unsigned char *text;
    int64_t len;
    MtStatus s = mt_file_read(name, &text, &len);
    if (s != MT_OK)
        return mt_error_prefix(s, "--cluster");
    s = mt_cluster_parse((const char *)text, (size_t)len, name, cl);
    free(text);
    return s;
}
