// _C.Source: a byte source (local file, HTTP(S), S3, Redis, or an in-memory copy) and its scheduler.
#pragma once

#include "common.hpp"
#include "tz/base/byte_source.hpp"

#include <memory>
#include <mutex>
#include <optional>

namespace tz::py {

struct source_handle {
  std::shared_ptr<scheduler> sched;  // declared first: destroyed after the source
  std::shared_ptr<byte_source> source;
  std::mutex size_mutex;
  std::optional<std::uint64_t> size_bytes;

  // The object's size (one round trip for remote sources, then cached). Call without the GIL.
  result<std::uint64_t> size();
};

}  // namespace tz::py
