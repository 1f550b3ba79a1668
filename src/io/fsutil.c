/* fsutil.c - staging, durable atomic commit and removal of directories (Linux). */
#define _GNU_SOURCE
#include "mt_fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* The raw system call: works whatever the glibc version (renameat2() is 2.28+). */
static int exchange_paths(const char *a, const char *b)
{
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}

int mt_path_exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Removes the contents of the open directory `fd` (consumed: closed on return). */
static MtStatus remove_contents(int fd, const char *path)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return mt_error(MT_EIO, "cannot read directory %s: %s", path, strerror(errno));
    }
    MtStatus st = MT_OK;
    struct dirent *ent;
    while (st == MT_OK && (errno = 0, ent = readdir(d)) != NULL) {
        const char *nm = ent->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        struct stat sb;
        if (fstatat(dirfd(d), nm, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            st = mt_error(MT_EIO, "cannot stat %s/%s: %s", path, nm, strerror(errno));
            break;
        }
        if (S_ISDIR(sb.st_mode)) {
            int sub = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                st = mt_error(MT_EIO, "cannot open %s/%s: %s", path, nm, strerror(errno));
                break;
            }
            char subpath[4096];
            snprintf(subpath, sizeof subpath, "%s/%s", path, nm);
            if ((st = remove_contents(sub, subpath)) != MT_OK)
                break;
        }
        if (unlinkat(dirfd(d), nm, S_ISDIR(sb.st_mode) ? AT_REMOVEDIR : 0) != 0)
            st = mt_error(MT_EIO, "cannot remove %s/%s: %s", path, nm, strerror(errno));
    }
    if (st == MT_OK && errno != 0)
        st = mt_error(MT_EIO, "cannot read directory %s: %s", path, strerror(errno));
    closedir(d);
    return st;
}

MtStatus mt_dir_remove(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return MT_OK;
        if (errno == ENOTDIR || errno == ELOOP)
            return mt_error(MT_EINPUT, "cannot remove %s: not a directory", dir);
        return mt_error(MT_EIO, "cannot open %s: %s", dir, strerror(errno));
    }
    MT_TRY(remove_contents(fd, dir));
    if (rmdir(dir) != 0)
        return mt_error(MT_EIO, "cannot remove %s: %s", dir, strerror(errno));
    return MT_OK;
}

/* final_dir without trailing slashes ("/" stays "/"); 0 if it does not fit. */
static int strip_slashes(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in);
    while (n > 1 && in[n - 1] == '/')
        n--;
    if (n + 1 > cap)
        return 0;
    memcpy(out, in, n);
    out[n] = 0;
    return 1;
}

MtStatus mt_dir_stage(const char *final_dir, char *tmp_out, size_t tmp_cap)
{
    char base[4096];
    if (!strip_slashes(final_dir, base, sizeof base) || base[0] == 0 || strcmp(base, "/") == 0)
        return mt_error(MT_EINPUT, "cannot stage %s: bad directory name", final_dir);
    int n = snprintf(tmp_out, tmp_cap, "%s.tmp-%ld", base, (long)getpid());
    if (n < 0 || (size_t)n >= tmp_cap)
        return mt_error(MT_EINPUT, "cannot stage %s: path too long", final_dir);
    MT_TRY(mt_dir_remove(tmp_out));
    if (mkdir(tmp_out, 0755) != 0)
        return mt_error(MT_EIO, "cannot create %s: %s", tmp_out, strerror(errno));
    return MT_OK;
}

MtStatus mt_dir_check_writable(const char *final_dir)
{
    struct stat sb;
    if (lstat(final_dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) /* as mt_dir_commit: links are not followed */
        return mt_error(MT_EINPUT, "cannot replace %s: it exists and is not a directory%s", final_dir,
                        S_ISLNK(sb.st_mode) ? " (a symbolic link: the commit replaces the link, not its target)" : "");
    char tmp[4200], probe[4300];
    if (mt_dir_stage(final_dir, tmp, sizeof tmp) != MT_OK)
        return MT_EINPUT; /* with the stage's message: bad input, found before any work */
    snprintf(probe, sizeof probe, "%s/probe", tmp);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int wrote = fd >= 0 && write(fd, "x", 1) == 1, err = errno;
    if (fd >= 0)
        close(fd);
    MtStatus st = mt_dir_remove(tmp);
    if (!wrote)
        return mt_error(MT_EINPUT, "cannot write %s: %s", probe, strerror(err));
    return st == MT_OK ? MT_OK : MT_EINPUT;
}

/* fsyncs every regular file and directory below the open directory `fd`, then `fd`
 * itself (consumed: closed on return). */
static MtStatus sync_tree(int fd, const char *path)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return mt_error(MT_EIO, "cannot read directory %s: %s", path, strerror(errno));
    }
    MtStatus st = MT_OK;
    struct dirent *ent;
    while (st == MT_OK && (errno = 0, ent = readdir(d)) != NULL) {
        const char *nm = ent->d_name;
        struct stat sb;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        if (fstatat(dirfd(d), nm, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            st = mt_error(MT_EIO, "cannot stat %s/%s: %s", path, nm, strerror(errno));
            break;
        }
        if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
            continue;
        int sub = openat(dirfd(d), nm, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            st = mt_error(MT_EIO, "cannot open %s/%s: %s", path, nm, strerror(errno));
            break;
        }
        char subpath[4096];
        snprintf(subpath, sizeof subpath, "%s/%s", path, nm);
        if (S_ISDIR(sb.st_mode))
            st = sync_tree(sub, subpath);
        else {
            if (fsync(sub) != 0)
                st = mt_error(MT_EIO, "cannot fsync %s: %s", subpath, strerror(errno));
            close(sub);
        }
    }
    if (st == MT_OK && errno != 0)
        st = mt_error(MT_EIO, "cannot read directory %s: %s", path, strerror(errno));
    if (st == MT_OK && fsync(dirfd(d)) != 0)
        st = mt_error(MT_EIO, "cannot fsync %s: %s", path, strerror(errno));
    closedir(d);
    return st;
}

MtStatus mt_dir_sync(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return mt_error(MT_EIO, "cannot open %s: %s", dir, strerror(errno));
    return sync_tree(fd, dir);
}

static MtStatus sync_parent(const char *path)
{
    char parent[4096];
    if (!strip_slashes(path, parent, sizeof parent))
        return mt_error(MT_EIO, "cannot fsync the parent of %s: path too long", path);
    char *slash = strrchr(parent, '/');
    if (!slash)
        strcpy(parent, ".");
    else if (slash == parent)
        parent[1] = 0;
    else
        *slash = 0;
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return mt_error(MT_EIO, "cannot open %s: %s", parent, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0)
        return mt_error(MT_EIO, "cannot fsync %s: %s", parent, strerror(err));
    return MT_OK;
}

MtStatus mt_dir_commit(const char *tmp_dir, const char *final_dir)
{
    int fd = open(tmp_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return mt_error(MT_EIO, "cannot open %s: %s", tmp_dir, strerror(errno));
    MT_TRY(sync_tree(fd, tmp_dir));

    struct stat sb;
    if (lstat(final_dir, &sb) != 0) {
        if (errno != ENOENT)
            return mt_error(MT_EIO, "cannot stat %s: %s", final_dir, strerror(errno));
        if (rename(tmp_dir, final_dir) != 0)
            return mt_error(MT_EIO, "cannot rename %s to %s: %s", tmp_dir, final_dir, strerror(errno));
        return sync_parent(final_dir);
    }
    if (!S_ISDIR(sb.st_mode))
        return mt_error(MT_EINPUT, "cannot replace %s: it exists and is not a directory", final_dir);
    if (exchange_paths(tmp_dir, final_dir) != 0) {
        int err = errno;
        return mt_error(MT_EIO, "cannot exchange %s and %s atomically: %s%s", tmp_dir, final_dir, strerror(err),
                        err == EINVAL || err == ENOSYS ? " (the file system lacks RENAME_EXCHANGE)" : "");
    }
    MT_TRY(sync_parent(final_dir));
    return mt_dir_remove(tmp_dir); /* now holds the old contents */
}

MtStatus mt_file_read(const char *path, unsigned char **out, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mt_error(MT_EINPUT, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return mt_error(MT_EINPUT, "%s is not a regular file", path);
    }
    *out = malloc((size_t)st.st_size + 1);
    if (!*out || fread(*out, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(*out);
        fclose(f);
        return mt_error(MT_EINPUT, "cannot read %s", path);
    }
    fclose(f);
    *n = st.st_size;
    return MT_OK;
}
