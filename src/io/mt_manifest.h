/* mt_manifest.h - a checkpoint's manifest.json: every other file of the directory with its
 * size and SHA-256 (OpenSSL's), written last, inside the staged directory that the save
 * then swaps in atomically; a resume checks it before it reads anything (docs/failures.md).
 *
 *   {"format": "meshtrain-manifest", "version": 1,
 *    "files": [{"name": "config.json", "bytes": 912, "sha256": "<64 hex digits>"}, ...]}
 *
 * Files are listed by name, in strcmp order; only regular files at the top level count.
 */
#ifndef MT_MANIFEST_H
#define MT_MANIFEST_H

#include "mt_core.h"

#define MT_MANIFEST "manifest.json"

/* Writes dir/manifest.json for the files dir holds now (the manifest itself excepted). */
MtStatus mt_manifest_write(const char *dir);

/* Checks dir against its manifest: MT_OK when every file listed is there with its size and
 * SHA-256 and nothing else but the manifest is; else MT_EINPUT, the message naming the first
 * file that differs ("model.safetensors: 1234 bytes, the manifest says 5678"), and *present
 * tells whether there was a manifest at all (0: "no manifest.json"). */
MtStatus mt_manifest_check(const char *dir, int *present);

#endif
