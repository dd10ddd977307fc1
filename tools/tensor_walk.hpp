// Walks every tensor of a model (a .tensors file, safetensors, a sharded checkpoint) in index
// order through the engine's load pipeline, in batches of bounded size: plaintext bytes, stored
// hashes checked, .tensors headers kept.
#pragma once

#include "cli.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/sources/checkpoint.hpp"

#include <functional>
#include <optional>
#include <span>

namespace tz::cli {

struct walk_options {
  bool verify = true;                           // check the stored CRC32 / SHA-256 of every tensor
  std::optional<format::decryption> decryption;  // required for encrypted files
  // The most tensor bytes loaded at once (a larger tensor is loaded alone): bounds memory for any
  // model size while each batch still loads with parallel reads and checks.
  std::uint64_t batch_bytes = 256ull << 20;
  // The index positions to visit, in this order (each once); empty: every tensor in index order.
  // Batches are cut in this order, so a writer that needs another order still streams.
  std::vector<std::size_t> order;
};

// Calls visit(i, entry, header, plaintext) for each tensor of `l` in index order (or options.order), decrypted and
// (verify) checked by the pipeline first. `header` is the tensor's parsed header for a .tensors
// file and null for safetensors (which has none). Data-less (meta, zero-size) tensors get an
// empty span: their stored bytes. Stops at the first error from the load or from visit.
using tensor_visitor = std::function<result<void>(std::size_t, const format::tensor_entry&,
                                                  const format::tensor_header*, std::span<const std::byte>)>;
result<void> walk_tensors(scheduler& sched, loader& l, const walk_options& options, const tensor_visitor& visit);

// A walked tensor as the .tensors writer takes it (module index 0 without a header).
format::tensor_write as_write(const format::tensor_entry& e, const format::tensor_header* h,
                              std::span<const std::byte> data);

// Opens the command's model inputs (tz::open_checkpoint: a FILE or URI, an index, a directory, a
// prefix, several files) as a loader on `sched`.
result<loader> open_loader(scheduler& sched, std::span<const std::string> inputs, const remote_options& remote);

// Reads the remote options of `a` and opens its positionals as the model (inspect, hash, verify).
result<loader> open_model(scheduler& sched, const args& a);

// A command's usage text followed by the MODEL and FILE-or-URI options every command shares.
std::string help_of(const char* own);

}  // namespace tz::cli
