// The node-local cache of remote objects: a load from http(s):// or s3:// also writes the bytes it
// reads into a cache directory, and the next load of the same unchanged object reads them from there
// at local-file speed. Opt-in (remote_options::cache, CLI --cache-dir, Python cache_dir=,
// TENSORIZER_CACHE_DIR). Design and guarantees: backends/CACHE.md.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tz {

struct cache_options {
  // The cache directory (created when missing); empty: no cache.
  std::string dir;
  // Bound on the bytes the cache holds; least recently used objects are evicted past it. An object
  // larger than the bound is not cached. 0: half the size of the file system holding `dir`.
  std::uint64_t max_bytes = 0;
  // How long a load waits for another process that is filling the same entry without its file
  // growing before it gives up waiting and reads the remote object itself (uncached).
  std::chrono::milliseconds wait_stall{10'000};
};

// The environment's cache settings: TENSORIZER_CACHE_DIR and TENSORIZER_CACHE_MAX_SIZE (bytes, or
// with a K/M/G/T suffix, powers of 1024). Empty dir when unset; errc::invalid_argument for a bad size.
result<cache_options> cache_options_from_env();

// Parses "1073741824", "512M", "20G", "1.5T" (powers of 1024) into bytes.
result<std::uint64_t> parse_byte_size(std::string_view text);

// Wraps `remote` (a source whose version() is known after size(): HTTP/S3) in the cache. `key`
// names the object independently of its version (the URI plus the endpoint it is fetched from).
// Nothing happens until size(): it asks `remote` for the size and version, then reads a cached copy
// of that version when there is one, else fills one while the load reads (published atomically
// once every byte of the object has been read), or waits while another process fills it. A source
// without a version is read directly. Fails with errc::io when the directory cannot be created.
result<std::shared_ptr<byte_source>> open_cached(std::shared_ptr<byte_source> remote, std::string key,
                                                 const cache_options& options);

// What the cache did for `source` (a source open_cached returned), one line for load reports:
// "hit: PATH", "filled, being published: PATH" (every byte is in, the copy is being made durable),
// "filled: PATH", "filling (...)", "bypassed: WHY", "not kept: WHY". Empty for a source that is not
// cached. Destroying the source waits until a copy being published is.
std::string cache_status(const byte_source& source);

}  // namespace tz
