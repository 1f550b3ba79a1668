/* series.c - a folder of saves, and what a resume reads (mt_series.h). */
#include "mt_series.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_fsutil.h"
#include "mt_json.h" /* MtBuf */
#include "mt_manifest.h"

void mt_series_path(const char *dir, int64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/step-%08lld", dir, (long long)step);
}

/* the step of a save's name ("step-" and digits only), else -1 */
static int64_t step_of(const char *name)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5] || strlen(name) > 5 + 18)
        return -1;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = 10 * v + (*p - '0');
    }
    return v;
}

static int by_step(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int mt_series_steps(const char *dir, int64_t *steps, int cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        struct stat sb;
        int64_t s = step_of(ent->d_name);
        if (s >= 0 && n < cap && fstatat(dirfd(d), ent->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
            steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, by_step);
    return n;
}

MtStatus mt_series_check_target(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? MT_OK : mt_error(MT_EINPUT, "cannot stat %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return mt_error(MT_EINPUT, "%s exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return mt_error(MT_EINPUT, "cannot read %s: %s", dir, strerror(errno));
    MtStatus s = MT_OK;
    struct dirent *ent;
    while (s == MT_OK && (ent = readdir(d)) != NULL)
        if (ent->d_name[0] != '.' && strncmp(ent->d_name, "step-", 5) != 0) /* saves, and their stages (.tmp-) */
            s = mt_error(MT_EINPUT, "%s holds %s, which is not a save (step-NNNNNNNN); refusing to write saves "
                         "beside it", dir, ent->d_name);
    closedir(d);
    return s;
}

MtStatus mt_series_prune(const char *dir, int keep)
{
    enum { CAP = 4096 };
    int64_t *steps = malloc(sizeof(int64_t) * CAP);
    if (!steps)
        return mt_error(MT_ENOMEM, "out of memory listing %s", dir);
    int n = mt_series_steps(dir, steps, CAP);
    MtStatus s = MT_OK;
    for (int i = 0; i < n - keep && s == MT_OK; i++) {
        char path[4200];
        mt_series_path(dir, steps[i], path, sizeof path);
        s = mt_dir_remove(path);
    }
    free(steps);
    return s;
}

MtStatus mt_ckpt_resolve(const char *dir, char *out, size_t cap, FILE *notes, int *unverified)
{
    char path[4200];
    *unverified = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (access(path, F_OK) == 0) { /* a checkpoint */
        int present;
        MtStatus s = mt_manifest_check(dir, &present);
        if (s != MT_OK && present)
            return mt_error_prefix(s, "%s is damaged", dir);
        *unverified = s != MT_OK;
        snprintf(out, cap, "%s", dir);
        return MT_OK;
    }
    enum { CAP = 4096 };
    int64_t *steps = malloc(sizeof(int64_t) * CAP);
    if (!steps)
        return mt_error(MT_ENOMEM, "out of memory listing %s", dir);
    int n = mt_series_steps(dir, steps, CAP);
    if (n <= 0) {
        free(steps);
        return mt_error(MT_EINPUT, "%s is neither a checkpoint (no config.json) nor a folder of saves "
                        "(no step-NNNNNNNN)", dir);
    }
    /* the newest intact save; the damaged ones newer than it are named once it is found (none
     * found: one line says so), each checked once */
    MtStatus s = MT_EINPUT;
    MtBuf said;
    mt_buf_init(&said);
    char newest[1200] = "";
    for (int i = n - 1; i >= 0; i--) {
        int present;
        mt_series_path(dir, steps[i], path, sizeof path);
        if ((s = mt_manifest_check(path, &present)) == MT_OK) {
            snprintf(out, cap, "%s", path);
            break;
        }
        if (!newest[0])
            snprintf(newest, sizeof newest, "%s: %s", strrchr(path, '/') + 1, mt_error_msg());
        mt_buf_printf(&said, "meshtrain train: --resume %s: %s is damaged (%s); taking the save before it\n", dir,
                      strrchr(path, '/') + 1, mt_error_msg());
    }
    if (s == MT_OK && notes && said.data)
        fputs(said.data, notes);
    mt_buf_free(&said);
    if (s != MT_OK)
        s = mt_error(MT_EINPUT, "%s: none of its %d saves is intact (the newest, %s)", dir, n, newest);
    free(steps);
    return s;
}
