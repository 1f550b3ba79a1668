/* flags.h - a table-driven command-line flag parser for the subcommands.
 * `--name value` or `--name=value`; booleans take no value.  Any unknown flag, missing
 * value or malformed number is MT_EINPUT with one line naming the flag.
 *
 * The table is the one source of a subcommand's flags: the parser reads it, `--help` prints
 * it (each flag's default is the value its variable holds before parsing, so the printed
 * default is the one used), and `--dry-run` prints the values after the command has
 * resolved them (what a 0 stands for becomes the number the run uses). */
#ifndef MT_FLAGS_H
#define MT_FLAGS_H

#include <stdint.h>

#include "mt_core.h"

typedef enum { FLAG_INT, FLAG_FLOAT, FLAG_STR, FLAG_BOOL, FLAG_U64, FLAG_STRS } FlagType;

/* FLAG_STRS: one or more values, `--name a b c` (up to the next argument that starts with
 * "--"), into a FlagStrs. */
#define FLAG_STRS_MAX 64
typedef struct {
    const char *v[FLAG_STRS_MAX];
    int n;
} FlagStrs;

enum { FLAG_REQUIRED = 1, FLAG_COMPUTED = 2 };

typedef struct Flag {
    const char *name; /* without the leading dashes */
    FlagType type;
    void *dst;        /* int*, float*, const char**, int*, uint64_t*, FlagStrs* */
    const char *help; /* says what 0 (or another special value) means where it means more than 0 */
    const char *meta; /* the value's name in the help (DIR, FILE, ...); NULL: N, X or S by type */
    int required;     /* FLAG_REQUIRED: the help says "required" instead of a default;
                       * FLAG_COMPUTED: the default follows other flags, as the help says */
    int set;          /* filled by the parser: given on the command line */
} Flag;

MtStatus mt_flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help);
void mt_flags_usage(const Flag *flags, int n, const char *cmd, const char *summary);
const Flag *mt_flag_find(const Flag *flags, int n, const char *name);
/* "3,2,2" (flag --name's value) -> at most max numbers into out, their count in *n;
 * MT_EINPUT with one line ("--name TEXT: ...", no command) on anything else. */
MtStatus mt_flags_int_list(const char *name, const char *text, int *out, int max, int *n);
/* Every flag's current value, one `--name value` line each (booleans: on or off, strings
 * not given: "-"): what a dry run prints once the command has resolved its settings. */
void mt_flags_print(const Flag *flags, int n);

#endif
