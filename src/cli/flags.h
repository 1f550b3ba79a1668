/* flags.h - a table-driven command-line flag parser for the subcommands.
 * `--name value` or `--name=value`; booleans take no value.  Any unknown flag, missing
 * value or malformed number is MT_EINPUT with one line naming the flag. */
#ifndef MT_FLAGS_H
#define MT_FLAGS_H

#include <stdint.h>

#include "mt_core.h"

typedef enum { FLAG_INT, FLAG_FLOAT, FLAG_STR, FLAG_BOOL, FLAG_U64 } FlagType;

typedef struct Flag {
    const char *name; /* without the leading dashes */
    FlagType type;
    void *dst;        /* int*, float*, const char**, int*, uint64_t* */
    const char *help;
    int set;          /* filled by the parser: given on the command line */
} Flag;

MtStatus mt_flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help);
void mt_flags_usage(const Flag *flags, int n, const char *cmd, const char *summary);
const Flag *mt_flag_find(const Flag *flags, int n, const char *name);

#endif
