/* manifest.c - a checkpoint's manifest.json (mt_manifest.h): sizes and SHA-256 of its files. */
#include "mt_manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* OpenSSL's SHA-256 itself, not through EVP: EVP's first digest sets up the provider machinery,
 * 2.3 MiB resident on this machine (VmHWM, measured) against 0.3 MiB, and a save's resident
 * growth is checked (sh_mpi_ckpt).  The low-level calls are deprecated in 3.0, not removed. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include "mt_fsutil.h"
#include "mt_json.h"

/* the SHA-256 of path, as 64 hex digits, and its size */
static MtStatus sha256_file(const char *path, char hex[65], int64_t *bytes)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mt_error(MT_EINPUT, "cannot open %s: %s", path, strerror(errno));
    SHA256_CTX ctx;
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = malloc(CHUNK);
    MtStatus s = buf && SHA256_Init(&ctx) == 1 ? MT_OK : mt_error(MT_ENOMEM, "cannot start a SHA-256 of %s", path);
    int64_t total = 0;
    while (s == MT_OK) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            s = mt_error(MT_EIO, "reading %s: %s", path, strerror(errno));
        else if (n == 0)
            break;
        else if (SHA256_Update(&ctx, buf, (size_t)n) != 1)
            s = mt_error(MT_EIO, "SHA-256 of %s failed", path);
        total += n > 0 ? n : 0;
    }
    unsigned char md[SHA256_DIGEST_LENGTH];
    if (s == MT_OK && SHA256_Final(md, &ctx) != 1)
        s = mt_error(MT_EIO, "SHA-256 of %s failed", path);
    for (int i = 0; s == MT_OK && i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    *bytes = total;
    free(buf);
    close(fd);
    return s;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the regular files at dir's top level but the manifest, sorted; *n of them (free with names_free) */
static MtStatus list_files(const char *dir, char ***out, int *n)
{
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return mt_error(MT_EINPUT, "cannot read %s: %s", dir, strerror(errno));
    int cap = 0;
    char **names = NULL;
    MtStatus s = MT_OK;
    struct dirent *ent;
    while (s == MT_OK && (ent = readdir(d)) != NULL) {
        struct stat sb;
        if (strcmp(ent->d_name, MT_MANIFEST) == 0 || fstatat(dirfd(d), ent->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, sizeof(char *) * (size_t)cap);
            if (!nn) {
                s = mt_error(MT_ENOMEM, "out of memory listing %s", dir);
                break;
            }
            names = nn;
        }
        if (!(names[*n] = strdup(ent->d_name)))
            s = mt_error(MT_ENOMEM, "out of memory listing %s", dir);
        else
            (*n)++;
    }
    closedir(d);
    if (*n > 1)
        qsort(names, (size_t)*n, sizeof *names, by_name);
    *out = names;
    return s;
}

static void names_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

MtStatus mt_manifest_write(const char *dir)
{
    char **names;
    int n;
    MtStatus s = list_files(dir, &names, &n);
    MtBuf b;
    mt_buf_init(&b);
    mt_buf_printf(&b, "{\"format\": \"meshtrain-manifest\", \"version\": 1, \"files\": [");
    char path[4352], hex[65];
    for (int i = 0; s == MT_OK && i < n; i++) {
        int64_t bytes;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if ((s = sha256_file(path, hex, &bytes)) != MT_OK)
            break;
        mt_buf_printf(&b, "%s\n  {\"name\": ", i ? "," : "");
        mt_buf_json_str(&b, names[i]);
        mt_buf_printf(&b, ", \"bytes\": %lld, \"sha256\": \"%s\"}", (long long)bytes, hex);
    }
    mt_buf_printf(&b, "\n]}\n");
    names_free(names, n);
    if (s == MT_OK && b.failed)
        s = mt_error(MT_ENOMEM, "out of memory writing %s/%s", dir, MT_MANIFEST);
    if (s == MT_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, MT_MANIFEST);
        FILE *f = fopen(path, "wb");
        int ok = f && fwrite(b.data, 1, b.len, f) == b.len;
        int err = errno;
        ok = f && fclose(f) == 0 && ok;
        if (!ok)
            s = mt_error(MT_EIO, "cannot write %s: %s", path, strerror(err ? err : EIO));
    }
    mt_buf_free(&b);
    return s;
}

MtStatus mt_manifest_check(const char *dir, int *present)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, MT_MANIFEST);
    *present = 0;
    unsigned char *text;
    int64_t len;
    if (access(path, F_OK) != 0)
        return mt_error(MT_EINPUT, "no %s", MT_MANIFEST);
    *present = 1;
    MT_TRY(mt_file_read(path, &text, &len));
    MtJson *j = NULL;
    MtStatus s = mt_json_parse((const char *)text, (size_t)len, &j);
    free(text);
    if (s != MT_OK)
        return mt_error_prefix(MT_EINPUT, "%s", MT_MANIFEST);
    const MtJson *files = mt_json_get(j, "files");
    if (mt_json_type(j) != MT_JSON_OBJECT || !mt_json_str(mt_json_get(j, "format")) ||
        strcmp(mt_json_str(mt_json_get(j, "format")), "meshtrain-manifest") != 0 ||
        mt_json_type(files) != MT_JSON_ARRAY)
        s = mt_error(MT_EINPUT, "%s: not a meshtrain manifest", MT_MANIFEST);
    char **names = NULL;
    int n = 0;
    if (s == MT_OK)
        s = list_files(dir, &names, &n);
    if (s == MT_OK && n != mt_json_len(files))
        s = mt_error(MT_EINPUT, "%d files beside %s, which lists %d", n, MT_MANIFEST, mt_json_len(files));
    for (int i = 0; s == MT_OK && i < mt_json_len(files); i++) {
        const MtJson *e = mt_json_at(files, i);
        const char *name = mt_json_str(mt_json_get(e, "name")), *want = mt_json_str(mt_json_get(e, "sha256"));
        int64_t bytes = -1, have;
        char hex[65];
        if (!name || !want || strchr(name, '/') || mt_json_i64(mt_json_get(e, "bytes"), &bytes) != MT_OK) {
            s = mt_error(MT_EINPUT, "%s: entry %d is not {name, bytes, sha256}", MT_MANIFEST, i);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat sb;
        if (stat(path, &sb) != 0)
            s = mt_error(MT_EINPUT, "%s: missing (the manifest lists it)", name);
        else if ((int64_t)sb.st_size != bytes)
            s = mt_error(MT_EINPUT, "%s: %lld bytes, the manifest says %lld", name, (long long)sb.st_size,
                         (long long)bytes);
        else if ((s = sha256_file(path, hex, &have)) == MT_OK && strcmp(hex, want) != 0)
            s = mt_error(MT_EINPUT, "%s: its SHA-256 is not the manifest's", name);
    }
    names_free(names, n);
    mt_json_free(j);
    return s;
}
