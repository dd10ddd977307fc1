// Redis byte source and sink for tensorizer's "virtual file" layout (format/FORMAT.md §13): keys
// "<prefix>:<name>:<offset>" whose values are the file's bytes at that offset.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/format/redis_layout.hpp"
#include "tz/backends/net_options.hpp"

#include <memory>
#include <span>
#include <string>

namespace tz {

// Opens redis://host[:port]/prefix. The key list is built on first use: SCAN "<prefix>:*", keys
// sorted by the integer after their last ':', STRLEN of each; size() is the end of the last key.
// Keys are sent as binary-safe argv, so names with spaces or quotes work. All blocking hiredis
// calls run on the source's own worker threads; the awaiting coroutine is resumed on its executor.
// Errors: errc::not_found (no keys under the prefix, or a gap in the byte layout),
// errc::timeout (naming the timeout that fired), errc::network (after the retry budget),
// errc::invalid_argument (bad URL, read past the end).
result<std::unique_ptr<byte_source>> open_redis_source(const redis_options& options, std::string url);

// One key of a virtual file; the layout itself is format::redis_layout's.
using redis_range = format::redis_range;

// Writes ranges as keys under url's prefix (SET, then APPEND in piece_bytes pieces, pipelined), on
// a worker thread of its own. The format layer decides the ranges (header block, per-tensor header,
// per-tensor data). The keys are staged under a prefix no reader lists (with a one-day TTL), then one
// MULTI/EXEC replaces the previous file's keys by them: readers see the old file or the new one.
// Completes when Redis acknowledged the EXEC.
task<result<void>> write_virtual_file(const redis_options& options, std::string url,
                                      std::span<const redis_range> ranges);

}  // namespace tz
