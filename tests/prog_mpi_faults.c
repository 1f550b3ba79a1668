/* prog_mpi_faults.c - scenarios for tests/sh_mpi_faults.sh, run under mpiexec:
 *   mismatch  rank 1 calls a different collective than the others (check on)
 *   kill      rank 1 kills itself (SIGKILL) in the middle of a loop of all-reduces
 *   stall     rank 1 stops calling collectives and sleeps; the others wait
 *   trace     a few collectives on every rank, then the Chrome trace, read back and checked
 * Options: the scenario name, then the watchdog timeout in seconds and the trace path. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_comm.h"
#include "mt_json.h"

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "trace";
    MtCommOptions opt = {.check = 1, .timeout_s = argc > 2 ? atof(argv[2]) : 60, .trace = 1};
    MtComm *c = mt_comm_init(&argc, &argv, &opt);
    int me = mt_comm_rank(c), N = mt_comm_size(c);
    MtLayout l = {.dp = N, .tp = 1, .pp = 1};
    mt_comm_mesh(c, &l);
    float buf[1024] = {0}, out[1024];
    if (strcmp(what, "mismatch") == 0) {
        mt_allreduce(c, MT_GROUP_DP, buf, 1024, 0);
        if (me == 1)
            mt_allgather(c, MT_GROUP_DP, buf, out, 512);
        else
            mt_allreduce(c, MT_GROUP_DP, buf, 1024, 0);
    } else if (strcmp(what, "kill") == 0) {
        for (int i = 0; i < 1000000; i++) {
            if (me == 1 && i == 20)
                raise(SIGKILL);
            mt_allreduce(c, MT_GROUP_DP, buf, 1024, 0);
        }
    } else if (strcmp(what, "stall") == 0) {
        mt_allreduce(c, MT_GROUP_DP, buf, 1024, 0);
        if (me == 1)
            sleep(600);
        mt_allreduce(c, MT_GROUP_DP, buf, 1024, 0);
    } else {
        const char *path = argc > 3 ? argv[3] : "trace.json";
        for (int i = 0; i < 3; i++) {
            mt_allreduce(c, MT_GROUP_WORLD, buf, 1024, i == 2);
            mt_allgather(c, MT_GROUP_DP, buf, out, 1000);
        }
        if (mt_comm_write_trace(c, path) != MT_OK) {
            fprintf(stderr, "%s\n", mt_error_msg());
            mt_comm_finalize(c);
            return 1;
        }
        int rc = 0;
        if (me == 0) { /* read it back: valid JSON, one named row per rank, 6 events each */
            FILE *f = fopen(path, "rb");
            char *text = calloc(1, 1 << 20);
            size_t len = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
            if (f)
                fclose(f);
            MtJson *j = NULL;
            if (mt_json_parse(text, len, &j) != MT_OK) {
                fprintf(stderr, "trace is not JSON: %s\n", mt_error_msg());
                rc = 1;
            } else {
                const MtJson *ev = mt_json_get(j, "traceEvents");
                int rows = 0, *per = calloc((size_t)N, sizeof(int));
                for (int i = 0; i < mt_json_len(ev); i++) {
                    const MtJson *e = mt_json_at(ev, i);
                    const char *ph = mt_json_str(mt_json_get(e, "ph"));
                    int tid = (int)mt_json_num(mt_json_get(e, "tid"));
                    if (ph && strcmp(ph, "M") == 0)
                        rows++;
                    else if (ph && strcmp(ph, "X") == 0 && tid >= 0 && tid < N)
                        per[tid]++;
                }
                for (int r = 0; r < N; r++)
                    if (per[r] != 6) {
                        fprintf(stderr, "rank %d has %d events in the trace, want 6\n", r, per[r]);
                        rc = 1;
                    }
                if (rows != N) {
                    fprintf(stderr, "trace has %d rows, want %d\n", rows, N);
                    rc = 1;
                }
                printf("trace ok: %d rows, %d events\n", rows, mt_json_len(ev));
                free(per);
            }
            mt_json_free(j);
            free(text);
        }
        mt_comm_finalize(c);
        return rc;
    }
    mt_comm_finalize(c);
    return 0;
}
