// The byte-source interface: every backend (file, HTTP, S3, Redis, in-memory fake) is one of these.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/task.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tz {

// A scatter list: consecutive bytes of one range land in these spans, in order.
using scatter_list = std::span<const std::span<std::byte>>;

// A random-access source of bytes. Two verbs: its size and "read this range into these spans".
// Implementations hide retries, timeouts, range splitting and connection pools. They may be used
// from several engine threads at once; read() must be safe to call concurrently.
class byte_source {
 public:
  virtual ~byte_source() = default;

  // What the source is, for error messages: "file /models/a.tensors", "https://host/a.tensors".
  virtual const std::string& name() const noexcept = 0;

  // Total size of the object in bytes. Completes when known (may need a round trip).
  virtual task<result<std::uint64_t>> size() = 0;

  // Reads exactly sum(dst[i].size()) bytes starting at offset_bytes into dst, in order. Short
  // reads are resubmitted internally; completes when every byte has arrived, or with an error
  // naming the source and the offset at which it failed (including EOF before the end). The
  // spans must stay valid until the task completes.
  virtual task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) = 0;

  // What identifies this version of the object's bytes, once size() has completed: a new value
  // whenever the bytes change (HTTP/S3: the ETag the source pinned). Empty when the source cannot
  // tell (local files, Redis): the node-local cache (tz/cache.hpp) then does not keep the object.
  virtual std::string version() const { return {}; }

  // How many reads the source wants in flight to keep its link full: a remote store, where every
  // response starts late and each connection is capped, needs bandwidth x latency in flight, far
  // more than a local disk. 0: no preference (the engine keeps its local-file default).
  virtual unsigned read_concurrency() const noexcept { return 0; }
};

}  // namespace tz
