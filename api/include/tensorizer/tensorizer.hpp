// tensorizer/tensorizer.hpp: the installed C++ API of libtensorizer. Open a .tensors or safetensors
// model by path or URI (http(s)://, s3://, redis://), list its tensors, load all / some / one of them
// into host memory, into caller memory or onto a CUDA device, verify it, decrypt it.
//
// Only the standard library appears here: the engine's types (Asio, Boost, tz::) stay inside the
// library, behind pimpl handles, so this header is stable against engine changes. Errors are values
// (result<T>); nothing here throws except result<T>::value() on an error and std::bad_alloc.
// Thread safety: a model may be used from several threads at once (loads run concurrently); the
// objects a load returns are immutable and may be read from any thread.
#pragma once

#include "tensorizer/version.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tensorizer {

// What kind of failure an error is. The numbers are those of the C ABI's tz_status (tensorizer.h).
enum class errc : int {
  io = 1,            // the OS or a source failed to read
  format,            // the bytes are not a valid .tensors / safetensors file
  hash_mismatch,     // a stored CRC32 / SHA-256 does not match the data
  crypto,            // missing / wrong key, MAC failure, encrypted-ness mismatch
  not_found,         // a file, object, key or named tensor does not exist
  invalid_argument,  // the caller asked for something impossible (bad option, wrong buffer size)
  network,           // a remote source failed after its retry budget
  auth,              // credentials were rejected
  timeout,           // a time limit passed
  cuda,              // a CUDA runtime call failed
  no_device,         // no usable GPU (none present, or this build has no CUDA stage)
  unsupported,       // a valid input this build cannot handle
  cancelled,         // the operation was cancelled
  internal = 99,     // a bug or resource exhaustion inside the library (e.g. out of memory)
};

// Short lower-case name of an error kind ("hash_mismatch"); "unknown" for other values.
const char* errc_name(errc code) noexcept;

// A failure: its kind and a complete message naming the source, tensor, offset, expected and
// actual values where they apply.
struct error {
  errc code = errc::io;
  std::string message;
};

// Thrown only by result<T>::value() on an error.
class exception : public std::runtime_error {
 public:
  explicit exception(const error& e) : std::runtime_error(e.message), code_(e.code) {}
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

// A value or an error. Test it (if (r) / r.has_value()), then use *r / r-> or r.error().
template <class T>
class result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(tensorizer::error e) : v_(std::in_place_index<1>, std::move(e)) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  // The value; throws tensorizer::exception when this holds an error.
  T& value() & { return check(), std::get<0>(v_); }
  const T& value() const& { return check(), std::get<0>(v_); }
  T&& value() && { return check(), std::get<0>(std::move(v_)); }
  // Unchecked access: precondition has_value().
  T& operator*() noexcept { return *std::get_if<0>(&v_); }
  const T& operator*() const noexcept { return *std::get_if<0>(&v_); }
  T* operator->() noexcept { return std::get_if<0>(&v_); }
  const T* operator->() const noexcept { return std::get_if<0>(&v_); }
  // The error: precondition !has_value().
  const tensorizer::error& error() const noexcept { return *std::get_if<1>(&v_); }

 private:
  void check() const {
    if (!has_value()) throw exception(error());
  }
  std::variant<T, tensorizer::error> v_;
};

template <>
class result<void> {
 public:
  result() = default;
  result(tensorizer::error e) : e_(std::move(e)) {}
  bool has_value() const noexcept { return !e_; }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (e_) throw exception(*e_);
  }
  const tensorizer::error& error() const noexcept { return *e_; }

 private:
  std::optional<tensorizer::error> e_;
};

// How to open an encrypted .tensors file. The secret is copied at once into locked memory the
// library zeroes when the last copy of this object (and of every model opened with it) is gone;
// the caller may wipe its own buffer as soon as from_key / from_passphrase returns.
class decryption_key {
 public:
  // Exactly 32 key bytes; opens any encrypted file, passphrase-encrypted or not. Fails with
  // errc::invalid_argument for another length (the message never contains key bytes).
  static result<decryption_key> from_key(std::span<const std::uint8_t> key);
  // A passphrase (UTF-8 bytes, not empty); each tensor's stored Argon2id parameters derive its
  // key (once per distinct parameter set, cached). Fails with errc::invalid_argument when empty.
  static result<decryption_key> from_passphrase(std::string_view passphrase);

  struct impl;
  std::shared_ptr<const impl> state;  // opaque to callers
};

// Where a load is: bytes and tensors done out of the total of this load (verify(): of the whole check).
struct progress {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::size_t tensors_done = 0;
  std::size_t tensors_total = 0;
};

struct tensor_info;

// One tensor of a load, handed over as soon as it is ready (options::on_tensor).
struct ready_tensor {
  std::size_t index = 0;     // the model's tensor index: tensors()[index]
  std::size_t position = 0;  // its place in the load's result (file order)
  const tensor_info* info = nullptr;
  std::span<const std::byte> host;  // host loads (load, load_one, load_into): its bytes
  void* device_data = nullptr;      // device loads: its device address, on `device`
  int device = -1;
  // Keeps the tensor's memory alive for whoever holds a copy, also after a load that failed later.
  // Null for load_into, whose memory is the caller's.
  std::shared_ptr<const void> owner;
  double seconds = 0;  // from the load call
};

// How a model is opened and loaded. The defaults load a local file with every core.
struct options {
  // Worker threads. 0: the model shares the process-wide scheduler (one worker per core, each with
  // its own io_uring ring; created with the first such model and kept until the process exits, so
  // models opened one after another reuse it). N > 0: the model gets a private scheduler of N
  // workers, stopped when the model and its loads are gone.
  unsigned threads = 0;
  // Reads in flight per load; 0 = automatic (two per worker, or 64 against http(s):// and s3://).
  unsigned readers = 0;
  // Check each tensor's stored CRC32 / SHA-256 during every load (.tensors; safetensors has none).
  bool verify = false;
  // Required for encrypted files, refused for plain ones (errc::crypto at the first load).
  std::optional<decryption_key> decryption;

  // Remote sources. Time limits in seconds, unset = the engine's default (connect 5, first byte
  // 10, stall 10, give up after 20 s of failed attempts, no deadline; 0 turns the last two off).
  std::optional<double> connect_timeout_s, first_byte_timeout_s, stall_timeout_s, give_up_after_s, deadline_s;
  std::string ca_file;          // https: trust this CA bundle (default: the system store)
  bool verify_tls = true;       // false: do not verify certificates (explicit insecure opt-out)
  unsigned connections = 0;     // connections one read of >= 16 MiB is split over, 1..256; 0 = 4
  // s3://. Unset fields follow the AWS chain (s3cmd config, AWS_* variables, ~/.aws/credentials).
  std::string s3_endpoint;      // e.g. "https://object.example.com" (an explicit http:// is honoured)
  std::string s3_region;        // SigV4 region (default AWS_REGION, else us-east-1)
  std::optional<std::string> s3_access_key_id, s3_secret_access_key;  // both "": unsigned requests
  std::string s3_session_token;
  std::string s3_config_path;   // an s3cmd config file (default ~/.s3cfg)
  bool s3_virtual_host = false; // https://bucket.host/key addressing
  // Node-local cache for http(s):// and s3:// objects (backends/CACHE.md): a load keeps a copy in
  // cache_dir, keyed by URI + ETag, and later opens of the unchanged object read it. Empty dir:
  // TENSORIZER_CACHE_DIR when set, else no cache. max_bytes 0: TENSORIZER_CACHE_MAX_SIZE, else half
  // the file system holding the directory.
  std::string cache_dir;
  std::uint64_t cache_max_bytes = 0;

  // Called during loads from a worker thread, after each completed range, never concurrently with
  // itself for one load. Keep it short; it must not call back into the model. An exception it
  // throws is swallowed and the callback is not called again for that load.
  std::function<void(const progress&)> on_progress;

  // Tensors as they land: load(), load_one(), load_into() and load_to_device() call it once per
  // tensor as soon as every byte of it is in place and checked (verified, decrypted; on a device,
  // copied: the data is there, no stream needs to wait), so a caller can run its first layers while
  // the rest arrives. From a worker thread, never concurrently with itself for one load; keep it
  // short (the load waits) and do not call back into the model. In file order (a tensor after every
  // earlier one) unless on_tensor_in_file_order is false. Nothing is handed over after a load
  // failed (the load's error names what failed), and a tensor handed over is never written again.
  // An exception it throws ends that load's handovers, not the load. Device loads with it decrypt
  // and check on the host's cores (the device kernels report only at the end).
  std::function<void(const ready_tensor&)> on_tensor;
  bool on_tensor_in_file_order = true;

  // Signed models (OpenSSF model signing, as `model_signing sign` or `tensorizer sign` make them):
  // every load of a model opened from a local file checks this signature in the load's own pass -
  // the loaded file hashed as it is read, the model's other files (configs, tokenizers) beside it -
  // and fails (errc::hash_mismatch, naming the file and both digests; errc::crypto for a signature
  // that does not verify) unless every file of the model matches. Who signed: the PEM public key
  // (key signatures) or trusted PEM certificates the signing certificate must chain to. The model is
  // the loaded file's directory, or the file alone when the signature covers one file, or
  // signature_model_root. Keyless Sigstore signatures are refused (errc::unsupported).
  std::string signature_file, signature_public_key_file, signature_certificate_chain_file, signature_model_root;

  // Load-latency research: every load writes its timeline to this file as Chrome trace-event JSON
  // (open it in ui.perfetto.dev), replacing what an earlier load wrote; per range its read, check
  // and upload spans, ring waits, the device allocation, the first copy done. Empty: no trace.
  std::string trace_file;
};

// One tensor of a model.
struct tensor_info {
  std::string name;                  // display name ("layer.0.weight")
  std::string dtype;                 // "float32", "bfloat16", "int8", ...
  std::vector<std::uint64_t> shape;  // empty for a scalar
  std::uint64_t size_bytes = 0;      // what a load yields: elements * item size
  std::uint64_t offset = 0;          // where its stored data starts in the file
};

// Where the time of a load went, in seconds (engine/DESIGN.md, "Timings and rates"). Wall clock: open_s
// (at model::open), prepare_s, transfer_s, total_s = prepare_s + transfer_s. The others are
// worker-seconds summed over readers, so they can exceed total_s.
struct load_timings {
  double open_s = 0, prepare_s = 0, transfer_s = 0, total_s = 0;
  double read_s = 0, verify_s = 0, decrypt_s = 0, upload_s = 0, wait_s = 0;
};

// The tensors of one host load, in one allocation owned by this object (freed with it; moving it
// keeps the bytes where they are). Positions follow the file's order.
class host_tensors {
 public:
  host_tensors(host_tensors&&) noexcept;
  host_tensors& operator=(host_tensors&&) noexcept;
  ~host_tensors();

  std::size_t size() const noexcept;
  const tensor_info& info(std::size_t i) const;      // precondition i < size()
  // The bytes of tensor i: dense C-order, info(i).size_bytes long (zeros for data-less tensors).
  // Writable: the memory belongs to this object and nothing else reads it.
  std::span<std::byte> data(std::size_t i) const;    // precondition i < size()
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  const load_timings& timings() const noexcept;
  std::uint64_t bytes() const noexcept;              // sum of the tensors' size_bytes

  struct impl;

 private:
  friend class model;
  explicit host_tensors(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> p_;
};

// The tensors of one device load: one device allocation owned by this object (cudaFree'd with it).
class device_tensors {
 public:
  device_tensors(device_tensors&&) noexcept;
  device_tensors& operator=(device_tensors&&) noexcept;
  ~device_tensors();

  std::size_t size() const noexcept;
  const tensor_info& info(std::size_t i) const;      // precondition i < size()
  // A device address (never dereference it on the host), 256-byte aligned; info(i).size_bytes long.
  void* data(std::size_t i) const;                   // precondition i < size()
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  int device() const noexcept;
  const load_timings& timings() const noexcept;

  struct impl;

 private:
  friend class model;
  explicit device_tensors(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> p_;
};

// Caller memory for load_into: the tensor named `name` lands in `bytes`, exactly its size_bytes long.
struct destination {
  std::string name;
  std::span<std::byte> bytes;
};

// Partial loads, for partitioned and tensor-parallel loads (docs/distributed.md): a stretch of one
// tensor's data, bytes [begin_bytes, begin_bytes + length_bytes) of tensor `index` (its position in
// model::tensors()). The library reads; moving bytes between ranks is the caller's collective.
struct tensor_part {
  std::size_t index = 0;
  std::uint64_t begin_bytes = 0;
  std::uint64_t length_bytes = 0;
};

// Caller memory for load_parts: the part lands in `bytes`, exactly length_bytes long.
struct part_destination {
  tensor_part part;
  std::span<std::byte> bytes;
};

// A model's data cut into `world` shares balanced by bytes: the tensors' data back to back in
// index order (the "flat" model); rank r owns flat bytes [begin[r], begin[r + 1]) as parts[r].
struct partition {
  std::vector<std::uint64_t> begin;             // world + 1 entries; begin[world] = total
  std::vector<std::vector<tensor_part>> parts;  // per rank, in flat order
  std::vector<std::uint64_t> flat_offset;       // per tensor (index order)
};

// One stretch of a slice: `part`, landing at out_offset_bytes of the dense slice.
struct slice_part {
  tensor_part part;
  std::uint64_t out_offset_bytes = 0;
};

struct part_load_result {
  load_timings timings;
  std::uint64_t read_bytes = 0;  // bytes read from the source (headers, whole cipher chunks included)
};

// Device memory the caller owns for load_parts_to_device: the part lands at `device_address`
// (a device address, never dereferenced on the host), exactly length_bytes long.
struct device_part_destination {
  tensor_part part;
  void* device_address = nullptr;
};

struct device_part_load_result : part_load_result {
  std::uint64_t pinned_bytes = 0;  // the pinned ring the load read through (bounded, whatever the parts)
};

// [begin, end) along a dimension of `size` of part k of n, as torch.chunk(x, n)[k] cuts it.
std::pair<std::uint64_t, std::uint64_t> chunk_bounds(std::uint64_t size, std::uint64_t parts, std::uint64_t k) noexcept;

// An opened model: its index (read and validated at open) and its source. Cheap to keep; copies
// share the same open source. Loads block the calling thread, which must not be one of the
// library's own workers (so: not from inside on_progress).
class model {
 public:
  // Opens a local path, or an http(s)://, s3:// or redis:// URI, and reads its index: completes
  // when the index is parsed and checked. A sharded safetensors checkpoint opens as one model:
  // pass its *.safetensors.index.json (path or URI; the shards are read beside it), a directory
  // holding one, or an http(s)/s3 prefix ending in '/'; every shard's tensors load in one pipeline. Fails with errc::not_found (no such file / object),
  // errc::format (naming the source and offset), errc::invalid_argument (bad URI or option), or
  // the remote errors (network, auth, timeout).
  static result<model> open(const std::string& path_or_uri, const options& opts = {});

  const std::string& source_name() const noexcept;   // the path or URI, for messages
  bool is_safetensors() const noexcept;
  bool encrypted() const noexcept;
  double open_seconds() const noexcept;
  // What the node-local cache did for this model's source: "hit: PATH", "filled: PATH",
  // "filled, being published: PATH", "filling (...)", "bypassed: WHY", "not kept: WHY"; empty when
  // the source is not cached (local files, Redis, no cache directory).
  std::string cache_status() const;
  // Every tensor, in file order. Valid as long as this model (or a copy of it) lives.
  const std::vector<tensor_info>& tensors() const noexcept;
  std::optional<std::size_t> find(std::string_view name) const noexcept;

  // Loads every tensor (names empty) or the named ones into one library-owned host allocation.
  // Completes when every byte is in memory, decrypted and (with options::verify) checked. Fails
  // with errc::not_found for an unknown name, errc::invalid_argument for a name given twice, the
  // source's errors, errc::format, errc::hash_mismatch (naming the tensor), errc::crypto.
  result<host_tensors> load(const std::vector<std::string>& names = {}) const;
  // One tensor, read on its own (its header and data in one read): for lazy access.
  result<host_tensors> load_one(std::string_view name) const;
  // Loads the destinations' tensors straight into caller memory, which must stay valid until the
  // call returns; nothing is allocated for the data. Same failures as load(), plus
  // errc::invalid_argument for a buffer of the wrong size. On failure the buffers hold partial data.
  result<load_timings> load_into(const std::vector<destination>& dst) const;
  // Loads every tensor (names empty) or the named ones into one allocation on CUDA device `device`
  // through a bounded ring of pinned staging buffers. Completes when every copy has finished. The
  // process's context of that device (CUDA streams, their completion threads, the pinned ring) is
  // made by the first device load, or by prepare_device(), and reused by every later one, from any
  // model and thread; loads may run concurrently. Fails as load() does, plus errc::no_device (no
  // GPU, or a build without CUDA) and errc::cuda.
  result<device_tensors> load_to_device(int device, const std::vector<std::string>& names = {}) const;
  // Reads every tensor (names empty) or the named ones, decrypting and checking each stored hash,
  // through a bounded reused buffer (at most 256 MiB, or the largest tensor): nothing is kept.
  // Succeeds when all match; fails with the first mismatch (errc::hash_mismatch naming the tensor
  // and both hashes) or load()'s errors. Safetensors stores no hashes: only the reads are checked.
  result<load_timings> verify(const std::vector<std::string>& names = {}) const;

  // Cuts every tensor's data into `world` shares balanced by bytes (pure: no I/O). Cuts fall inside
  // tensors on 4 KiB multiples (2 MiB cipher chunks for encrypted models), or between tensors with
  // `whole_tensors` (then each tensor's stored hash can be checked by the rank that reads it).
  result<partition> plan_partition(unsigned world, bool whole_tensors = false) const;
  // The stretches holding elements [start, stop) along dimension `dim` of tensor `index`: one for
  // dimension 0, one per outer row otherwise (merged when adjacent). Pure. errc::invalid_argument
  // for a bad index, dimension or bounds.
  result<std::vector<slice_part>> plan_slice(std::size_t index, unsigned dim, std::uint64_t start,
                                             std::uint64_t stop) const;
  // Reads each part into its caller memory (valid until the call returns): whole tensors as
  // load_into does; parts of tensors alone (encrypted ones as the whole cipher chunks around them,
  // decrypted). Fails as load_into, plus errc::unsupported with options::verify and a part that is
  // not a whole tensor (a stored hash covers the whole tensor).
  result<part_load_result> load_parts(const std::vector<part_destination>& dst) const;
  // The same into device memory of CUDA device `device` that the caller owns (valid until the call
  // returns; work queued on it must be done): the reads land in the process's bounded ring of
  // pinned slots, are checked and decrypted there, and are copied to their places, so a share
  // takes no pinned memory of its size. Fails as load_parts, plus errc::no_device.
  result<device_part_load_result> load_parts_to_device(int device, const std::vector<device_part_destination>& dst) const;

  struct impl;

 private:
  explicit model(std::shared_ptr<const impl> p) noexcept : p_(std::move(p)) {}
  std::shared_ptr<const impl> p_;
};

// Makes this process's context of CUDA device `device` now: the CUDA context, streams, completion
// threads and a pinned staging ring (for verified loads too when `verify`), so that the first
// load_to_device finds them ready. Optional: call it at start-up, or on a thread of its own once
// model::open has returned; not beside the first open of a fresh process, whose engine workers
// start then (pinning the ring beside that delayed the open by 10-20 ms on an H100 host).
// Thread-safe; a second call costs nothing. Fails with errc::no_device (no GPU, a build without
// CUDA, a device that does not exist) and errc::cuda.
result<void> prepare_device(int device, bool verify = false);

}  // namespace tensorizer
