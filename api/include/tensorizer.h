/* tensorizer.h: the C ABI of libtensorizer, for C programs and for other languages' FFI (Rust
 * bindgen, Go cgo, ...). The same engine as the C++ API (tensorizer/tensorizer.hpp), behind opaque
 * handles: open a model by path or URI, list its tensors, load them to host memory, caller memory
 * or a CUDA device, verify, decrypt, follow progress.
 *
 * Conventions, for every function below:
 * - Functions that can fail return a tz_status: TZ_OK (0), or an error code. The complete message
 *   (naming the source, tensor, offset, expected and actual values) is then available from
 *   tz_last_error_message() on the same thread until the next failing call on that thread.
 * - Out-parameters are written only on success. Pointers documented as "may be NULL" are optional;
 *   every other pointer must be valid (NULL gives TZ_ERR_INVALID_ARGUMENT).
 * - Strings are NUL-terminated UTF-8. Strings and arrays returned by the library are owned by the
 *   handle they came from and stay valid until that handle is freed.
 * - Handles may be used from several threads at once, except that a handle must not be freed
 *   while another thread uses it. Blocking calls must not be made from a progress callback.
 * - No function throws or aborts on bad input; out of memory is TZ_ERR_INTERNAL. */
#ifndef TENSORIZER_H
#define TENSORIZER_H

#include "tensorizer/version.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes; the numbers match tensorizer::errc of the C++ API. */
typedef enum tz_status {
  TZ_OK = 0,
  TZ_ERR_IO = 1,               /* the OS or a source failed to read */
  TZ_ERR_FORMAT = 2,           /* not a valid .tensors / safetensors file */
  TZ_ERR_HASH_MISMATCH = 3,    /* a stored CRC32 / SHA-256 does not match the data */
  TZ_ERR_CRYPTO = 4,           /* missing / wrong key, MAC failure, encrypted-ness mismatch */
  TZ_ERR_NOT_FOUND = 5,        /* a file, object, key or named tensor does not exist */
  TZ_ERR_INVALID_ARGUMENT = 6, /* a bad argument, option or buffer size */
  TZ_ERR_NETWORK = 7,          /* a remote source failed after its retry budget */
  TZ_ERR_AUTH = 8,             /* credentials were rejected */
  TZ_ERR_TIMEOUT = 9,          /* a time limit passed */
  TZ_ERR_CUDA = 10,            /* a CUDA runtime call failed */
  TZ_ERR_NO_DEVICE = 11,       /* no usable GPU (none present, or a build without CUDA) */
  TZ_ERR_UNSUPPORTED = 12,     /* a valid input this build cannot handle */
  TZ_ERR_CANCELLED = 13,       /* the operation was cancelled */
  TZ_ERR_INTERNAL = 99         /* a bug or resource exhaustion in the library (out of memory) */
} tz_status;

/* Opaque handles. */
typedef struct tz_options tz_options;               /* how to open and load; tz_options_new */
typedef struct tz_model tz_model;                   /* an opened model; tz_model_open */
typedef struct tz_host_tensors tz_host_tensors;     /* one host load's memory; tz_model_load */
typedef struct tz_device_tensors tz_device_tensors; /* one device load's memory */

/* One tensor. Its pointers are owned by the handle it was read from. */
typedef struct tz_tensor_info {
  const char* name;      /* display name, e.g. "layer.0.weight" */
  const char* dtype;     /* "float32", "bfloat16", "int8", ... */
  const uint64_t* shape; /* ndim dimensions (NULL when ndim is 0) */
  size_t ndim;
  uint64_t size_bytes;   /* what a load yields: elements * item size */
  uint64_t offset;       /* where its stored data starts in the file */
} tz_tensor_info;

/* Where the time of a load went, in seconds. Wall clock: open_s (at open), prepare_s, transfer_s,
 * total_s = prepare_s + transfer_s; the others are summed over parallel readers. */
typedef struct tz_timings {
  double open_s, prepare_s, transfer_s, total_s;
  double read_s, verify_s, decrypt_s, upload_s, wait_s;
} tz_timings;

/* Progress of a load: bytes done out of total. Called from a library worker thread after each
 * completed range, never concurrently with itself for one load. Must return quickly and must not
 * call blocking functions of this library. */
typedef void (*tz_progress_fn)(uint64_t done_bytes, uint64_t total_bytes, void* user);

/* One tensor of a load, handed over as soon as it is ready (tz_options_set_on_tensor). */
typedef struct tz_ready_tensor {
  size_t index;          /* the model's tensor index (tz_model_tensor_info) */
  size_t position;       /* its place in the load's result (file order) */
  const char* name;      /* display name, valid while the model is open */
  const void* host;      /* host loads: its bytes (size_bytes of them); NULL for device loads */
  void* device_data;     /* device loads: its device address on `device`; NULL for host loads */
  int device;            /* -1 for host loads */
  uint64_t size_bytes;
  double seconds;        /* from the load call */
} tz_ready_tensor;
/* Tensors as they land: called once per tensor of a load, as soon as every byte of it is in place
 * and checked (verified, decrypted; on a device, copied). From a library worker thread, never
 * concurrently with itself for one load; must return quickly and must not call this library's
 * blocking functions. The bytes stay valid until the load returns, and after it while its result
 * lives (a failed load frees them when it returns). The tensor pointed to is valid during the call. */
typedef void (*tz_tensor_fn)(const tz_ready_tensor* tensor, void* user);

/* ---- Library ------------------------------------------------------------------------------ */

/* The runtime library's version, "major.minor.patch" (static storage). Compare its major with
 * TENSORIZER_VERSION_MAJOR to catch a header/library mismatch. Never fails. */
const char* tz_version(void);
/* The message of the last failing call on this thread ("" if none). Valid until the next failing
 * call on this thread. Never fails. */
const char* tz_last_error_message(void);
/* The short name of a status ("ok", "hash_mismatch", ...); "unknown" for other values. */
const char* tz_status_name(tz_status status);

/* ---- Options ------------------------------------------------------------------------------ */

/* New options with the defaults (local files, every core, no verification). Returns NULL only when
 * out of memory. Free with tz_options_free. tz_model_open copies what it needs: options may be
 * freed or changed right after it returns. */
tz_options* tz_options_new(void);
/* Frees options (NULL is fine), zeroing any key or passphrase they hold. */
void tz_options_free(tz_options* options);
/* Worker threads: 0 (default) shares the process-wide scheduler (one worker per core); N gives the
 * model a private scheduler of N workers. */
tz_status tz_options_set_threads(tz_options* options, unsigned threads);
/* Reads in flight per load; 0 = automatic. */
tz_status tz_options_set_readers(tz_options* options, unsigned readers);
/* Nonzero: check each tensor's stored CRC32 / SHA-256 during every load. */
tz_status tz_options_set_verify(tz_options* options, int verify);
/* Load-latency research: every load writes its timeline to `path` as Chrome trace-event JSON
 * (ui.perfetto.dev opens it), replacing an earlier load's; NULL or "": no trace. A load whose
 * trace cannot be written fails with the write's error (TZ_ERR_NOT_FOUND: no such directory). */
tz_status tz_options_set_trace(tz_options* options, const char* path);
/* Signed models (OpenSSF model signing): every load checks `signature` (a path) in its own pass and
 * fails unless every file of the model matches it (TZ_ERR_HASH_MISMATCH naming the file and both
 * digests; TZ_ERR_CRYPTO for a signature that does not verify). Who signed: `public_key` (a PEM
 * file) or `certificate_chain` (trusted PEM certificates); either may be NULL, not both.
 * `model_root`: the signed model's directory (NULL: the loaded file's, or the file alone when the
 * signature covers one file). signature NULL or "": no check. Local models only. */
tz_status tz_options_set_signature(tz_options* options, const char* signature, const char* public_key,
                                   const char* certificate_chain, const char* model_root);
/* Decrypt with exactly 32 key bytes. The key is copied into locked memory that is zeroed when the
 * last user is freed; the caller may wipe `key` when this returns. TZ_ERR_INVALID_ARGUMENT for
 * another length. Replaces an earlier key or passphrase. */
tz_status tz_options_set_decryption_key(tz_options* options, const uint8_t* key, size_t key_bytes);
/* Decrypt with a passphrase of `length` bytes (UTF-8, not empty); handled like a key. */
tz_status tz_options_set_decryption_passphrase(tz_options* options, const char* passphrase, size_t length);
/* A time limit of remote sources, in seconds, by name: "connect_timeout", "first_byte_timeout",
 * "stall_timeout" (positive), "give_up_after", "deadline" (0 = none). TZ_ERR_INVALID_ARGUMENT for
 * an unknown name or a value out of range (checked at tz_model_open). */
tz_status tz_options_set_time_limit(tz_options* options, const char* name, double seconds);
/* https: trust the CA bundle `ca_file` (may be NULL: the system store); verify == 0 turns
 * certificate verification off (explicit insecure opt-out). */
tz_status tz_options_set_tls(tz_options* options, const char* ca_file, int verify);
/* Parallel connections per remote source, 1..256 (0 = default 4). */
tz_status tz_options_set_connections(tz_options* options, unsigned connections);
/* s3:// settings; each may be NULL (unset: the AWS chain of s3cmd config, AWS_* variables,
 * ~/.aws/credentials decides). Both keys "" means unsigned requests. */
tz_status tz_options_set_s3(tz_options* options, const char* endpoint, const char* region,
                            const char* access_key_id, const char* secret_access_key, const char* session_token);
/* Node-local cache of http(s):// and s3:// objects in directory `dir` (NULL or "":
 * TENSORIZER_CACHE_DIR when set, else no cache), bounded by max_bytes (0: TENSORIZER_CACHE_MAX_SIZE,
 * else half the directory's file system). */
tz_status tz_options_set_cache(tz_options* options, const char* dir, uint64_t max_bytes);
/* Calls fn(done, total, user) during loads (NULL fn: no progress). `user` is passed through and
 * must stay valid while models opened with these options load. */
tz_status tz_options_set_progress(tz_options* options, tz_progress_fn fn, void* user);
/* Calls fn(tensor, user) as each tensor of a load is ready (NULL fn: none), in file order (a
 * tensor after every earlier one) when in_file_order is nonzero, else as each completes. Nothing
 * is handed over after a load failed; a tensor handed over is never written again. `user` must
 * stay valid while models opened with these options load. */
tz_status tz_options_set_on_tensor(tz_options* options, tz_tensor_fn fn, int in_file_order, void* user);

/* ---- Models ------------------------------------------------------------------------------- */

/* Opens a local path or an http(s)://, s3:// or redis:// URI and reads its index (.tensors or
 * safetensors, by magic). `options` may be NULL (defaults). Completes when the index is parsed and
 * checked; *out then owns the model (free with tz_model_free). Fails with TZ_ERR_NOT_FOUND,
 * TZ_ERR_FORMAT, TZ_ERR_INVALID_ARGUMENT or a remote error. */
tz_status tz_model_open(const char* path_or_uri, const tz_options* options, tz_model** out);
/* Frees a model (NULL is fine). Loads already returned stay valid. */
void tz_model_free(tz_model* model);
/* Number of tensors in the file (0 for NULL). */
size_t tz_model_tensor_count(const tz_model* model);
/* Tensor `index` (file order); TZ_ERR_INVALID_ARGUMENT when out of range. */
tz_status tz_model_tensor_info(const tz_model* model, size_t index, tz_tensor_info* out);
/* Position of the tensor named `name`; TZ_ERR_NOT_FOUND when absent. */
tz_status tz_model_find(const tz_model* model, const char* name, size_t* index);
/* Nonzero when the file is encrypted (needs a decryption key or passphrase). */
int tz_model_encrypted(const tz_model* model);
/* What the node-local cache did for the model's source (see tensorizer::model::cache_status), as a
 * NUL-terminated string copied into buf (truncated to size - 1 bytes; buf may be NULL when size is
 * 0). Returns the full length, without the NUL; 0 when the source is not cached. */
size_t tz_model_cache_status(const tz_model* model, char* buf, size_t size);

/* Loads `count` named tensors (names NULL or count 0: all) into one library-owned host allocation.
 * Completes when every byte is in memory, decrypted and checked (with verify). *out owns it (free
 * with tz_host_tensors_free). Fails with TZ_ERR_NOT_FOUND (unknown name), TZ_ERR_HASH_MISMATCH
 * (naming the tensor), TZ_ERR_CRYPTO, TZ_ERR_FORMAT, or the source's errors. */
tz_status tz_model_load(const tz_model* model, const char* const* names, size_t count, tz_host_tensors** out);
/* Loads one tensor on its own (its header and data in one read), for lazy access. */
tz_status tz_model_load_one(const tz_model* model, const char* name, tz_host_tensors** out);
/* Loads `count` named tensors into caller memory: tensor names[i] lands in buffers[i], which must
 * be exactly sizes[i] == its size_bytes long and stay valid until the call returns. Nothing is
 * allocated for the data. `timings` may be NULL. Fails as tz_model_load, plus
 * TZ_ERR_INVALID_ARGUMENT for a wrong size; on failure the buffers hold partial data. */
tz_status tz_model_load_into(const tz_model* model, const char* const* names, void* const* buffers,
                             const uint64_t* sizes, size_t count, tz_timings* timings);
/* Loads `count` named tensors (NULL / 0: all) onto CUDA device `device` through pinned staging
 * buffers. Completes when every copy has finished; *out owns the device memory. The process's
 * context of the device (streams, completion threads, pinned ring) is made by the first device
 * load or by tz_prepare_device and reused by every later one. Fails as tz_model_load, plus
 * TZ_ERR_NO_DEVICE (no GPU, or no CUDA in this build) and TZ_ERR_CUDA. */
tz_status tz_model_load_to_device(const tz_model* model, int device, const char* const* names, size_t count,
                                  tz_device_tensors** out);
/* Reads `count` named tensors (NULL / 0: all), decrypting and checking each stored hash through a
 * bounded reused buffer; keeps nothing. TZ_OK when all match, else the first error
 * (TZ_ERR_HASH_MISMATCH naming the tensor). `timings` may be NULL. */
tz_status tz_model_verify(const tz_model* model, const char* const* names, size_t count, tz_timings* timings);

/* Makes this process's context of CUDA device `device` now (CUDA context, streams, completion
 * threads, a pinned staging ring; for verified loads too when `verify` is non-zero), so that the
 * first tz_model_load_to_device finds it ready. Optional: at start-up, or once tz_model_open
 * has returned (beside the first open of a fresh process it slows that open: both start
 * threads and pin or map memory). Thread-safe; a second call costs nothing. Fails with
 * TZ_ERR_NO_DEVICE or TZ_ERR_CUDA. */
tz_status tz_prepare_device(int device, int verify);

/* ---- Loaded tensors ----------------------------------------------------------------------- */

/* Number of tensors in a host load (0 for NULL); positions follow the file's order. */
size_t tz_host_tensors_count(const tz_host_tensors* loaded);
/* Tensor `index` of the load; TZ_ERR_INVALID_ARGUMENT when out of range. */
tz_status tz_host_tensors_info(const tz_host_tensors* loaded, size_t index, tz_tensor_info* out);
/* The tensor's bytes (dense C-order, writable, size_bytes long), owned by `loaded`. */
tz_status tz_host_tensors_data(const tz_host_tensors* loaded, size_t index, void** data, uint64_t* size_bytes);
/* Position of the tensor named `name` in this load; TZ_ERR_NOT_FOUND when absent. */
tz_status tz_host_tensors_find(const tz_host_tensors* loaded, const char* name, size_t* index);
/* The load's timings. */
tz_status tz_host_tensors_timings(const tz_host_tensors* loaded, tz_timings* out);
/* Frees the load and its memory (NULL is fine). */
void tz_host_tensors_free(tz_host_tensors* loaded);

/* The same for a device load; data is a device address (never dereference it on the host). */
size_t tz_device_tensors_count(const tz_device_tensors* loaded);
tz_status tz_device_tensors_info(const tz_device_tensors* loaded, size_t index, tz_tensor_info* out);
tz_status tz_device_tensors_data(const tz_device_tensors* loaded, size_t index, void** device_data,
                                 uint64_t* size_bytes);
/* The CUDA device the load is on (-1 for NULL). */
int tz_device_tensors_device(const tz_device_tensors* loaded);
tz_status tz_device_tensors_timings(const tz_device_tensors* loaded, tz_timings* out);
/* Frees the device memory (NULL is fine). */
void tz_device_tensors_free(tz_device_tensors* loaded);

/* ---- Partial loads: partitioned and tensor-parallel (docs/distributed.md) --------------------
 * The library reads a rank's share or slice; moving bytes between ranks is the caller's collective
 * (NCCL, gloo, MPI). Arrays follow one convention: with `capacity` too small, only *count is
 * written and TZ_ERR_INVALID_ARGUMENT returned, so a call with capacity 0 asks for the size. */

/* Bytes [begin_bytes, begin_bytes + length_bytes) of tensor `index`'s data (index: its position). */
typedef struct tz_tensor_part {
  size_t index;
  uint64_t begin_bytes;
  uint64_t length_bytes;
} tz_tensor_part;

/* [*begin, *end) along a dimension of `size` of part k of `parts`, as torch.chunk(x, parts)[k]. */
void tz_chunk_bounds(uint64_t size, uint64_t parts, uint64_t k, uint64_t* begin, uint64_t* end);
/* Rank `rank`'s share when the model's data (every tensor back to back in index order: the flat
 * model of *total bytes) is cut into `world` shares balanced by bytes, inside tensors on 4 KiB
 * multiples (2 MiB cipher chunks when encrypted) or, with `whole_tensors`, between tensors only.
 * Writes its parts, each part's place in the flat model (flat_offsets, may be NULL), and the share
 * [*begin, *end) of the flat model (begin, end, total may be NULL). Pure: no I/O. */
tz_status tz_model_plan_partition(const tz_model* model, unsigned world, unsigned rank, int whole_tensors,
                                  tz_tensor_part* parts, uint64_t* flat_offsets, size_t capacity, size_t* count,
                                  uint64_t* begin, uint64_t* end, uint64_t* total);
/* The stretches holding elements [start, stop) along dimension `dim` of tensor `index`, and where
 * each lands in the dense slice (out_offsets, may be NULL). Pure. */
tz_status tz_model_plan_slice(const tz_model* model, size_t index, unsigned dim, uint64_t start, uint64_t stop,
                              tz_tensor_part* parts, uint64_t* out_offsets, size_t capacity, size_t* count);
/* Reads parts[i] into buffers[i] (exactly parts[i].length_bytes, valid until the call returns).
 * Whole tensors are checked as tz_model_load_into does; parts of tensors are read alone (encrypted:
 * the whole cipher chunks around them, decrypted). *read_bytes: bytes read from the source (may be
 * NULL). Fails as tz_model_load_into, plus TZ_ERR_UNSUPPORTED with verify and a partial part. */
tz_status tz_model_load_parts(const tz_model* model, const tz_tensor_part* parts, void* const* buffers, size_t count,
                              uint64_t* read_bytes, tz_timings* timings);
/* The same into device memory of CUDA device `device` the caller owns: parts[i] lands at device
 * address device_buffers[i] (valid until the call returns; work queued on it must be done). The
 * reads go through the process's bounded ring of pinned slots, are checked and decrypted there and
 * copied to their places; *pinned_bytes (may be NULL): that ring's size. Fails as
 * tz_model_load_parts, plus TZ_ERR_NO_DEVICE. */
tz_status tz_model_load_parts_to_device(const tz_model* model, int device, const tz_tensor_part* parts,
                                        void* const* device_buffers, size_t count, uint64_t* read_bytes,
                                        uint64_t* pinned_bytes, tz_timings* timings);

#ifdef __cplusplus
}
#endif

#endif /* TENSORIZER_H */
