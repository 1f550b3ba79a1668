/* mt_fsutil.h - atomic replacement of a directory (checkpoints), and small helpers.
 *
 * A writer fills a staging directory from mt_dir_stage(), then mt_dir_commit() makes
 * it durable (fsync of every file, the directory and its parent) and puts it in place
 * with rename() or, over an existing directory, an atomic exchange
 * (renameat2 RENAME_EXCHANGE), so at no moment is the final directory missing or
 * half-written.  A crash leaves at worst a stale "<final>.tmp-<pid>" sibling.
 *
 * Linux only (renameat2).  A file system without RENAME_EXCHANGE support (some network
 * file systems) makes a commit over an existing directory fail with MT_EIO rather than
 * fall back to a non-atomic two-step rename.
 */
#ifndef MT_FSUTIL_H
#define MT_FSUTIL_H

#include <stddef.h>

#include "mt_core.h"

/* Creates a fresh, empty sibling "<final_dir>.tmp-<pid>" (trailing slashes of
 * final_dir ignored), removing a stale one of the same name first, and writes its
 * path into tmp_out.  Failure: MT_EINPUT if the path does not fit in tmp_cap,
 * MT_EIO if it cannot be removed or created. */
MtStatus mt_dir_stage(const char *final_dir, char *tmp_out, size_t tmp_cap);

/* Before a run: would a commit to final_dir succeed?  The same rules as mt_dir_commit
 * (final_dir absent or a directory, links not followed), and the staging directory is
 * created, written (one small file) and removed.  Failure: MT_EINPUT with the reason
 * (a read-only file system, no permission, a symbolic link or a file in the way). */
MtStatus mt_dir_check_writable(const char *final_dir);

/* fsyncs everything in tmp_dir and tmp_dir itself, then moves it to final_dir
 * (exchanging with an existing final_dir, whose old contents are then removed), and
 * fsyncs the parent directory.  Failure: MT_EIO (MT_EINPUT if final_dir exists and
 * is not a directory); final_dir is then either untouched or already the new one. */
MtStatus mt_dir_commit(const char *tmp_dir, const char *final_dir);

/* fsyncs everything in dir and dir itself, as mt_dir_commit does first: a writer can make
 * a staging directory durable early, beside other work (the commit's own fsyncs then find
 * nothing left to write).  Failure: MT_EIO. */
MtStatus mt_dir_sync(const char *dir);

/* Removes a directory and everything in it, recursively, never following symbolic
 * links (a link is removed, not its target).  A missing directory is not an error.
 * Failure: MT_EIO (MT_EINPUT if `dir` is not a directory); part may be removed. */
MtStatus mt_dir_remove(const char *dir);

/* 1 if anything (file, directory, symbolic link, even dangling) exists at path. */
int mt_path_exists(const char *path);
/* The whole regular file `path` into *out (owned by the caller, one spare byte at the end)
 * and its length; MT_EINPUT with one line if it cannot be opened or read. */
MtStatus mt_file_read(const char *path, unsigned char **out, int64_t *n);

#endif
