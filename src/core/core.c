/* core.c - status messages, fatal errors, clock, string hash. */
#include "mt_core.h"
#include "mt_testhooks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char err_msg[1024];
static char rank_label[64] = "rank 0/1";

MtTestHooks mt_test_hooks; /* all off; only the test build of the command sets them */

MtStatus mt_error(MtStatus status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return status;
}

MtStatus mt_error_prefix(MtStatus status, const char *fmt, ...)
{
    char prefix[512], old[sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    snprintf(err_msg, sizeof err_msg, "%.400s: %.600s", prefix, old);
    return status;
}

const char *mt_error_msg(void) { return err_msg[0] ? err_msg : "unknown error"; }
void mt_error_clear(void) { err_msg[0] = 0; }

int mt_exit_code(MtStatus status)
{
    switch (status) {
    case MT_OK: return 0;
    case MT_EINPUT: return 2;
    default: return 1;
    }
}

void mt_set_rank_label(const char *label)
{
    snprintf(rank_label, sizeof rank_label, "%s", label);
}

void mt_fatal_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s] %s:%d: %s\n", rank_label, file, line, msg);
    fflush(stderr);
    abort();
}

double mt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t mt_hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}
