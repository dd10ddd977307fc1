// Walks every tensor of a .tensors file in file order through the engine's load pipeline, in
// batches of bounded size: plaintext bytes, stored hashes checked, headers kept.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/loader.hpp"
#include "tz/scheduler.hpp"
#include "tz/sources.hpp"

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
};

// Calls visit(i, entry, header, plaintext) for each tensor of `l` (a .tensors file) in file order,
// decrypted and (verify) checked by the pipeline first. Data-less (meta, zero-size) tensors get an
// empty span: their stored bytes. Stops at the first error from the load or from visit.
using tensor_visitor = std::function<result<void>(std::size_t, const format::tensor_entry&,
                                                  const format::tensor_header&, std::span<const std::byte>)>;
result<void> walk_tensors(scheduler& sched, loader& l, const walk_options& options, const tensor_visitor& visit);

// Opens FILE or URI (tz::open_any) as a loader on `sched`.
result<loader> open_loader(scheduler& sched, const std::string& file_or_uri, const remote_options& remote);

}  // namespace tz::cli
