// Private to engine/: uploads straight from a file's pages in the page cache (device_direct.cpp),
// the direct path of a load to device memory.
#pragma once

#include "device_load_state.hpp"

#include "tz/cuda.hpp"
#include "tz/error.hpp"
#include "tz/task.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
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
  unsigned threads = 4;                     // pumps, at most (each keeps up to two chunks in flight)
};

struct direct_upload_stats {
  std::int64_t register_ns = 0;  // worker time pinning and unpinning
  std::int64_t wait_ns = 0;      // worker time waiting for copies to complete
  std::uint64_t pinned_bytes_max = 0;
};

// Copies every piece (in file order) from `file` into `dst`: the pieces are cut into page-aligned
// chunks; each chunk is pinned in place, copied on the uploader's next stream, and unpinned once
// its copy has completed. The pumps are threads of their own, not the scheduler's workers: they
// block in CUDA calls, and the workers' readers may be running beside them. Completes when every
// copy has completed and every page is unpinned, whatever failed; fails with the first error.
task<result<direct_upload_stats>> upload_from_page_cache(cuda::uploader& up, cuda::device_buffer& dst,
                                                         const page_cache_file& file, std::vector<direct_piece> pieces,
                                                         direct_upload_options options);

// The mapped file when the direct path may apply to this load (see
// device_load_options::direct_from_page_cache; page residency is checked later, on the plan's
// pieces), nothing when the ring path should run. Fails when direct_mode::on and it cannot apply.
task<result<std::optional<page_cache_file>>> choose_direct_file(cuda::uploader& up, const loader& opened,
                                                                byte_source& source, const device_load_options& o);

// True when at least 90% of the pages holding the pieces are in the page cache: pinning a page
// that is not faults it in from disk one fault at a time, slower than the ring's O_DIRECT reads.
result<bool> mostly_cached(const page_cache_file& file, std::span<const direct_piece> pieces);

// The stored bytes of plan ranges [first, last) and where they go, in file order.
std::vector<direct_piece> range_pieces(const device_load_state& st, std::size_t first, std::size_t last);

// The first range of the direct share: the ranges from there on hold about `fraction` of the bytes.
std::size_t direct_split(const device_plan& plan, double fraction);

}  // namespace tz
