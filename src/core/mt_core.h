/* mt_core.h - status codes, error messages, assertions, small utilities.
 *
 * Errors travel upwards as MtStatus values.  The function that detects a problem
 * records one human-readable line with mt_error(); callers either add nothing and
 * pass the status on, or prepend context with mt_error_prefix().  The command line
 * prints mt_error_msg() once and exits with mt_exit_code(status).
 *
 * Invariant: MT_OK is 0; MT_EINPUT maps to exit status 2 (bad flags, files, layouts).
 */
#ifndef MT_CORE_H
#define MT_CORE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MT_OK = 0,
    MT_EINPUT = 2,    /* bad input: flags, layout, files.  Exit status 2. */
    MT_EIO = 3,       /* an I/O operation failed at run time */
    MT_ENOMEM = 4,    /* an allocation failed */
    MT_EINTERNAL = 5, /* a broken invariant */
} MtStatus;

/* Records the message for the current thread and returns `status`. */
MtStatus mt_error(MtStatus status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "<prefix>: " to the current message; returns `status` unchanged. */
MtStatus mt_error_prefix(MtStatus status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *mt_error_msg(void);
void mt_error_clear(void);
int mt_exit_code(MtStatus status);

/* Propagate a failing status: MT_TRY(mt_foo(...)); */
#define MT_TRY(expr)                   \
    do {                               \
        MtStatus mt_try_s_ = (expr);   \
        if (mt_try_s_ != MT_OK)        \
            return mt_try_s_;          \
    } while (0)

/* Broken invariant: print "[rank r/n] file:line: message" and abort the job. */
void mt_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define MT_ASSERT(cond, ...)                                        \
    do {                                                            \
        if (!(cond))                                                \
            mt_fatal_at(__FILE__, __LINE__, __VA_ARGS__);           \
    } while (0)

/* The rank label used in fatal messages; set once by the launcher. */
void mt_set_rank_label(const char *label);

/* Wall-clock time in seconds (monotonic). */
double mt_now(void);

/* FNV-1a 64-bit hash of a string (parameter names -> rng streams). */
uint64_t mt_hash_str(const char *s);

#endif
