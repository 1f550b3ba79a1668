/* flags.c - the flag parser of flags.h. */
#include "flags.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const Flag *mt_flag_find(const Flag *flags, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0)
            return &flags[i];
    return NULL;
}

static MtStatus set_value(Flag *f, const char *v, const char *cmd)
{
    char *end;
    errno = 0;
    switch (f->type) {
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno || x < -2147483647L || x > 2147483647L)
            return mt_error(MT_EINPUT, "meshtrain %s: --%s needs an integer, got '%s'", cmd, f->name, v);
        *(int *)f->dst = (int)x;
        break;
    }
    case FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *v == '-' || *end || errno)
            return mt_error(MT_EINPUT, "meshtrain %s: --%s needs a non-negative integer, got '%s'",
                            cmd, f->name, v);
        *(uint64_t *)f->dst = x;
        break;
    }
    case FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x))
            return mt_error(MT_EINPUT, "meshtrain %s: --%s needs a number, got '%s'", cmd, f->name, v);
        if (fabs(x) > FLT_MAX) /* finite as a double, inf as the float it is kept in */
            return mt_error(MT_EINPUT, "meshtrain %s: --%s %s is beyond the float range (%g)", cmd, f->name, v,
                            (double)FLT_MAX);
        *(float *)f->dst = (float)x;
        break;
    }
    case FLAG_STR:
        *(const char **)f->dst = v;
        break;
    case FLAG_BOOL:
        *(int *)f->dst = 1;
        break;
    case FLAG_STRS: {
        FlagStrs *l = f->dst;
        if (l->n == FLAG_STRS_MAX)
            return mt_error(MT_EINPUT, "meshtrain %s: --%s takes at most %d values", cmd, f->name, FLAG_STRS_MAX);
        l->v[l->n++] = v;
        break;
    }
    }
    f->set = 1;
    return MT_OK;
}

MtStatus mt_flags_int_list(const char *name, const char *text, int *out, int max, int *n)
{
    *n = 0;
    const char *q = text;
    while (*q) {
        char *end;
        long v = strtol(q, &end, 10);
        if (end == q || v < -1000000 || v > 1000000 || *n >= max || (*end && *end != ','))
            return mt_error(MT_EINPUT, "--%s %s: want numbers separated by commas", name, text);
        out[(*n)++] = (int)v;
        q = *end ? end + 1 : end;
    }
    if (*n == 0)
        return mt_error(MT_EINPUT, "--%s is empty", name);
    return MT_OK;
}

MtStatus mt_flags_parse(Flag *flags, int n, int argc, char **argv, const char *cmd, int *help)
{
    *help = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = 1;
            return MT_OK;
        }
        if (strncmp(a, "--", 2) != 0)
            return mt_error(MT_EINPUT, "meshtrain %s: unexpected argument '%s' (flags start with --)",
                            cmd, a);
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name)
            return mt_error(MT_EINPUT, "meshtrain %s: unknown flag '%s'", cmd, a);
        memcpy(name, a + 2, len);
        name[len] = 0;
        Flag *f = (Flag *)mt_flag_find(flags, n, name);
        if (!f)
            return mt_error(MT_EINPUT, "meshtrain %s: unknown flag --%s (see meshtrain %s --help)",
                            cmd, name, cmd);
        if (f->set)
            return mt_error(MT_EINPUT, "meshtrain %s: --%s given twice", cmd, name);
        if (f->type == FLAG_BOOL) {
            if (eq)
                return mt_error(MT_EINPUT, "meshtrain %s: --%s takes no value", cmd, name);
            MT_TRY(set_value(f, "", cmd));
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v)
            return mt_error(MT_EINPUT, "meshtrain %s: --%s needs a value", cmd, name);
        MT_TRY(set_value(f, v, cmd));
        while (f->type == FLAG_STRS && !eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            MT_TRY(set_value(f, argv[++i], cmd)); /* the list's further values */
    }
    return MT_OK;
}

/* a flag's value as the help and the dry run print it: "" for a string not given */
static void value_text(const Flag *f, char *out, size_t n)
{
    switch (f->type) {
    case FLAG_INT: snprintf(out, n, "%d", *(int *)f->dst); break;
    case FLAG_U64: snprintf(out, n, "%llu", (unsigned long long)*(uint64_t *)f->dst); break;
    case FLAG_FLOAT: snprintf(out, n, "%g", *(float *)f->dst); break;
    case FLAG_STR: snprintf(out, n, "%s", *(const char **)f->dst ? *(const char **)f->dst : ""); break;
    case FLAG_BOOL: snprintf(out, n, "%s", *(int *)f->dst ? "on" : "off"); break;
    case FLAG_STRS: {
        const FlagStrs *l = f->dst;
        size_t k = 0;
        out[0] = 0;
        for (int i = 0; i < l->n && k < n; i++)
            k += (size_t)snprintf(out + k, n - k, "%s%s", i ? " " : "", l->v[i]);
        break;
    }
    }
}

/* text from column `indent` (the cursor is there), broken at spaces before column `width`;
 * a \1 is a space that does not break */
static void wrap(const char *text, int indent, int width)
{
    int col = indent, fresh = 1;
    const char *w = text;
    while (*w) {
        const char *e = strchr(w, ' ');
        int len = e ? (int)(e - w) : (int)strlen(w);
        if (!fresh && col > indent && col + 1 + len > width) {
            printf("\n%*s", indent, "");
            col = indent;
            fresh = 1;
        }
        if (!fresh)
            putchar(' '), col++;
        for (int k = 0; k < len; k++)
            putchar(w[k] == 1 ? ' ' : w[k]);
        col += len;
        fresh = 0;
        w += len;
        while (*w == ' ')
            w++;
    }
    printf("\n");
}

void mt_flags_usage(const Flag *flags, int n, const char *cmd, const char *summary)
{
    printf("usage: meshtrain %s [flags]\n%s\n\nflags:\n", cmd, summary);
    for (int i = 0; i < n; i++) {
        const Flag *f = &flags[i];
        char def[256] = "", lhs[64];
        const char *meta = f->meta ? f->meta : f->type == FLAG_INT || f->type == FLAG_U64 ? "N"
                         : f->type == FLAG_FLOAT ? "X" : f->type == FLAG_STR ? "S" : "";
        snprintf(lhs, sizeof lhs, "--%s%s%s", f->name, meta[0] ? " " : "", meta);
        if (f->type != FLAG_BOOL && !f->required)
            value_text(f, def, sizeof def);
        char text[1024];
        snprintf(text, sizeof text, "%s%s%s%s", f->help, f->required == FLAG_REQUIRED ? " (required)"
                 : def[0] ? " (default:\1" : "",
                 f->required ? "" : def, !f->required && def[0] ? ")" : "");
        printf("  %-26s ", lhs);
        wrap(text, 29, 100);
    }
}

void mt_flags_print(const Flag *flags, int n)
{
    for (int i = 0; i < n; i++) {
        char v[4200];
        value_text(&flags[i], v, sizeof v);
        printf("--%s %s\n", flags[i].name, v[0] ? v : "-");
    }
}
