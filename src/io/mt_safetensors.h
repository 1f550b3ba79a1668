/* mt_safetensors.h - reading and writing .safetensors files (float32 tensors only).
 *
 * Layout: 8-byte little-endian header length N; N bytes of JSON header, an object
 * mapping each tensor name to {"dtype": "F32", "shape": [...], "data_offsets":
 * [begin, end]} plus an optional "__metadata__" object of string -> string; then the
 * data section, with offsets relative to its start.
 *
 * The reader treats the file as untrusted.  Everything is validated before the data
 * section is allocated: sizes against the file size, header at most 100 MB, the JSON,
 * every field of every entry (exactly dtype/shape/data_offsets, F32 only, at most 8
 * non-negative dims, no numel overflow, end - begin == numel * 4), names of 1..255
 * bytes and unique, and the tensors must tile the data section exactly (no overlap,
 * no hole, no trailing bytes).  Every failure is MT_EINPUT with one line
 * "<path>: <problem>".  Because the tiles are contiguous from 0 and each a multiple of
 * 4 bytes, every tensor's data is 4-byte aligned in the (malloc-aligned) buffer.
 *
 * Byte order: tensor data is little-endian in the file and used in place, so the host
 * must be little-endian (checked at compile time).
 */
#ifndef MT_SAFETENSORS_H
#define MT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mt_core.h"
#include "mt_json.h"

#define MT_ST_MAX_DIMS 8
#define MT_ST_MAX_NAME 255
/* Header bytes.  The reference implementation allows 100 MB, which our JSON parser turns into
 * about 88 bytes per number (4.4 GB for a header of numbers).  The largest header meshtrain
 * writes (optimizer.safetensors of 256 layers: 6,152 tensors, 646 KB at width 8) is under 0.8 MB, and Hugging
 * Face GPT-2 files are tens of KB, so 2 MiB bounds the parser (measured: 95 MB peak for a
 * 2 MiB header of numbers). */
#define MT_ST_MAX_HEADER (2 << 20)

typedef struct {
    char *name;                     /* owned by the MtStFile */
    int ndim;                       /* 0 for a scalar */
    int64_t shape[MT_ST_MAX_DIMS];
    int64_t numel;                  /* product of shape (1 for a scalar) */
    int64_t begin, end;             /* byte range in the data section */
} MtStTensor;

typedef struct {
    char *path;
    int ntensors;
    MtStTensor *tensors;  /* in header order */
    unsigned char *buf;   /* the data section */
    size_t buf_len;
    MtJson *meta;         /* the __metadata__ object, or NULL */
    int fd;               /* lazily opened: the open file + 1 (0: none) */
    int64_t data_off;     /* where the data section starts in the file */
} MtStFile;

/* Reads and validates the whole file into `f` (owned by the caller: mt_st_close).
 * Failure: MT_EINPUT ("cannot open <path>: ..." or "<path>: <problem>") or
 * MT_ENOMEM; `f` is left empty and may be closed. */
MtStatus mt_st_open(const char *path, MtStFile *f);
/* The same validation, without reading the data section: tensors are read with
 * mt_st_read (a rank that needs only some of them holds only those). */
MtStatus mt_st_open_lazy(const char *path, MtStFile *f);
/* Elements [first, first + count) of tensor t into dst (any open file).  MT_EINPUT if the
 * file cannot be read. */
MtStatus mt_st_read(const MtStFile *f, const MtStTensor *t, int64_t first, int64_t count, float *dst);
/* The tensor named `name`, or NULL.  Linear search. */
const MtStTensor *mt_st_find(const MtStFile *f, const char *name);
/* The tensor's numel floats, pointing into f->buf (valid until mt_st_close). */
const float *mt_st_f32(const MtStFile *f, const MtStTensor *t);
/* The __metadata__ value for `key`, or NULL if absent. */
const char *mt_st_meta(const MtStFile *f, const char *key);
/* Frees everything; accepts an empty or closed file and can be called twice. */
void mt_st_close(MtStFile *f);

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[MT_ST_MAX_DIMS];
    const float *data; /* numel floats; may be NULL if numel is 0 */
} MtStEntry;

/* Writes `n` tensors (header in the order given, data contiguous in the same order)
 * and `nmeta` metadata pairs (meta_kv[2i] = key, meta_kv[2i+1] = value) to `path`,
 * replacing it.  The header is padded with spaces so the data starts 8-byte aligned.
 * The file is flushed and fsynced; it is written in place, so write into a directory
 * from mt_dir_stage() for an atomic checkpoint.
 * Failure: MT_EINPUT for entries the reader would refuse (empty, long or duplicate
 * names, bad shapes), MT_EIO for a failed write (the partial file is removed),
 * MT_ENOMEM. */
MtStatus mt_st_write(const char *path, const MtStEntry *e, int n, const char *const *meta_kv, int nmeta);

/* Parallel writing: mt_st_create writes the header of the entries (their data unused) and
 * sizes the file to its final length, the data section a hole; any process then writes
 * tensor i's bytes at mt_st_data_start(...) + the bytes of the entries before i (pwrite).
 * Nothing is fsynced (mt_dir_commit does).  mt_st_data_start: -1 for entries the writer
 * would refuse. */
MtStatus mt_st_create(const char *path, const MtStEntry *e, int n, const char *const *meta_kv, int nmeta);
int64_t mt_st_data_start(const MtStEntry *e, int n, const char *const *meta_kv, int nmeta);

#endif
