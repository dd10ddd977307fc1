// Private to engine/: uploads straight from a file's pages in the page cache (device_direct.cpp),
// the direct path of a load to device memory.
#pragma once

#include "tz/cuda.hpp"
#include "tz/error.hpp"
#include "tz/scheduler.hpp"
#include "tz/task.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tz {

// A local file mapped read-only and shared: its pages are the page cache's own, so the mapping
// costs address space, not memory. Move-only; the destructor unmaps it.
class page_cache_file {
 public:
  // Maps `path` whole. Fails with errc::not_found / errc::io naming the path and the OS error.
  static result<page_cache_file> open(const std::string& path);
  page_cache_file(page_cache_file&& other) noexcept;
  page_cache_file& operator=(page_cache_file&&) = delete;
  page_cache_file(const page_cache_file&) = delete;
  page_cache_file& operator=(const page_cache_file&) = delete;
  ~page_cache_file();

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size_bytes() const noexcept { return size_bytes_; }
  // The file's bytes (never write through them: the mapping is read-only).
  std::span<const std::byte> bytes() const noexcept { return {data_, size_bytes_}; }
  // How many of the pages holding [offset_bytes, offset_bytes + length_bytes) are in the page
  // cache right now (mincore), and how many there are.
  result<std::pair<std::uint64_t, std::uint64_t>> resident_pages(std::uint64_t offset_bytes,
                                                                  std::uint64_t length_bytes) const;

 private:
  page_cache_file(std::string path, const std::byte* data, std::uint64_t size_bytes) noexcept
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}
  std::string path_;
  const std::byte* data_ = nullptr;
  std::uint64_t size_bytes_ = 0;
};

// Stored bytes [file_offset_bytes, + length_bytes) of the file go to device_offset_bytes.
struct direct_piece {
  std::uint64_t file_offset_bytes = 0;
  std::uint64_t length_bytes = 0;
  std::uint64_t device_offset_bytes = 0;
};

struct direct_upload_options {
  std::uint64_t chunk_bytes = 32u << 20;    // pinned per registration (a multiple of the page size)
  std::uint64_t pinned_bytes = 256u << 20;  // pinned at once, at most (at least one chunk)
};

struct direct_upload_stats {
  std::int64_t register_ns = 0;  // worker time pinning and unpinning
  std::int64_t wait_ns = 0;      // worker time waiting for copies to complete
  std::uint64_t pinned_bytes_max = 0;
};

// Copies every piece (in file order, not overlapping) from `file` into `dst`: the pieces are cut
// into page-aligned chunks; each chunk is pinned in place, copied on the uploader's next stream,
// and unpinned once its copy has completed, on up to one pump per worker of `sched` (blocking CUDA
// calls, so the pumps run as plain jobs on the workers). Completes when every copy has completed
// and every page is unpinned, whatever failed; fails with the first error.
task<result<direct_upload_stats>> upload_from_page_cache(scheduler& sched, cuda::uploader& up, cuda::device_buffer& dst,
                                                         const page_cache_file& file, std::span<const direct_piece> pieces,
                                                         const direct_upload_options& options);

}  // namespace tz
