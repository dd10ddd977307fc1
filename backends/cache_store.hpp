// The node-local cache's files (backends/CACHE.md): where an object's entry lives, the per-object
// fill lock, publishing a filled entry, and LRU eviction. The byte_source that uses them is
// cache.cpp; this part knows nothing of sources or coroutines.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/unique_fd.hpp"

#include <cstdint>
#include <string>

namespace tz::cache_store {

// The paths of one version of one object under the cache root.
struct entry_paths {
  std::string object;  // <root>/objects/<K>-<V>-<size>: the published copy
  std::string part;    // object + ".part": the copy being filled (only by the lock holder)
  std::string lock;    // <root>/locks/<K>.lock: held (flock) by the process filling K
  std::string prefix;  // <root>/objects/<K>-: every version of this object starts so
};

// Creates <dir>/tensorizer-cache-v1/{objects,locks} when missing and returns that root.
result<std::string> open_root(const std::string& dir);

// K = 128 bits of SHA-256(key), V = 64 bits of SHA-256(version), both hex.
entry_paths paths_for(const std::string& root, const std::string& key, const std::string& version,
                      std::uint64_t size_bytes);

// Takes the exclusive lock at `path` without waiting; an empty fd when another process holds it.
result<unique_fd> try_lock(const std::string& path);

// The bound a max_bytes of 0 stands for: half the size of the file system holding `root`.
std::uint64_t default_max_bytes(const std::string& root);

// Makes the filled `part` (open as `fd`) the published copy: fsync, rename over the object path,
// fsync of the directory; then removes the object's other (stale) versions.
result<void> publish(int fd, const entry_paths& paths);

// Marks a published copy as just used (its mtime is the LRU clock; atime is often not kept).
void touch(const std::string& path) noexcept;

// Removes the least recently used published copies until the cache holds at most max_bytes
// (never `keep`), and the .part files of fills whose process is gone. Serialised across
// processes by <root>/evict.lock. Best effort: a file that vanishes meanwhile is skipped.
void evict(const std::string& root, std::uint64_t max_bytes, const std::string& keep) noexcept;

}  // namespace tz::cache_store
