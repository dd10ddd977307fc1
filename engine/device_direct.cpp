// The direct path of a load to device memory: a warm file's pages are pinned in place, chunk by
// chunk, and copied to the device from there, so each byte crosses host memory once (the DMA read).
#include "device_direct.hpp"

#include "tz/wait_group.hpp"


#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace tz {

namespace {

std::uint64_t os_page_bytes() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

error os_error(errc code, const std::string& what, int err) {
  return make_error(code, what + ": " + std::strerror(err));
}

}  // namespace

result<page_cache_file> page_cache_file::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return os_error(err == ENOENT ? errc::not_found : errc::io, "file " + path + ": cannot open", err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return os_error(errc::io, "file " + path + ": cannot stat", err);
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return os_error(errc::io, "file " + path + ": cannot map " + std::to_string(size) + " bytes", err);
    }
  }
  ::close(fd);  // the mapping keeps the file open
  return page_cache_file(path, static_cast<const std::byte*>(data), size);
}

page_cache_file::page_cache_file(page_cache_file&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

page_cache_file::~page_cache_file() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_bytes_);
}

result<std::pair<std::uint64_t, std::uint64_t>> page_cache_file::resident_pages(std::uint64_t offset_bytes,
                                                                                 std::uint64_t length_bytes) const {
  const std::uint64_t page = os_page_bytes();
  if (offset_bytes > size_bytes_ || length_bytes > size_bytes_ - offset_bytes) {
    return make_error(errc::invalid_argument, "file " + path_ + ": range at " + std::to_string(offset_bytes) + " of " +
                                                  std::to_string(length_bytes) + " bytes is past its end");
  }
  if (length_bytes == 0) return std::pair<std::uint64_t, std::uint64_t>{0, 0};
  const std::uint64_t first = offset_bytes / page;
  const std::uint64_t end = (offset_bytes + length_bytes + page - 1) / page;
  // A bounded vector, walked a window at a time: a huge file needs no huge allocation here.
  constexpr std::uint64_t window_pages = 1 << 16;
  std::vector<unsigned char> flags(window_pages);
  std::uint64_t resident = 0;
  for (std::uint64_t p = first; p < end; p += window_pages) {
    const std::uint64_t n = std::min(window_pages, end - p);
    if (::mincore(const_cast<std::byte*>(data_) + p * page, n * page, flags.data()) != 0) {
      return os_error(errc::io, "file " + path_ + ": mincore at offset " + std::to_string(p * page), errno);
    }
    for (std::uint64_t k = 0; k < n; ++k) resident += flags[k] & 1;
  }
  return std::pair<std::uint64_t, std::uint64_t>{resident, end - first};
}

namespace {

using direct_clock = std::chrono::steady_clock;

std::int64_t ns_since(direct_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(direct_clock::now() - t0).count();
}

// One registration: the page-aligned range [begin_bytes, end_bytes) of the file and the copies
// reading from it. Chunks never share a page (each lies in its own chunk-sized window).
struct direct_chunk {
  std::uint64_t begin_bytes = 0;
  std::uint64_t end_bytes = 0;
  std::vector<cuda::upload_piece> pieces;
};

// Cuts the pieces at multiples of `chunk_bytes` of the file offset.
std::vector<direct_chunk> cut_chunks(const page_cache_file& file, std::span<const direct_piece> pieces,
                                     std::uint64_t chunk_bytes) {
  const std::uint64_t page = os_page_bytes();
  const std::span<const std::byte> bytes = file.bytes();
  std::vector<direct_chunk> chunks;
  std::uint64_t window = ~std::uint64_t{0};
  for (const direct_piece& p : pieces) {
    for (std::uint64_t done = 0; done < p.length_bytes;) {
      const std::uint64_t at = p.file_offset_bytes + done;
      const std::uint64_t take = std::min(p.length_bytes - done, (at / chunk_bytes + 1) * chunk_bytes - at);
      if (at / chunk_bytes != window) {
        window = at / chunk_bytes;
        chunks.push_back({at / page * page, 0, {}});
      }
      direct_chunk& c = chunks.back();
      c.pieces.push_back({bytes.subspan(at, take), p.device_offset_bytes + done});
      c.end_bytes = std::min((at + take + page - 1) / page * page, (window + 1) * chunk_bytes);
      done += take;
    }
  }
  return chunks;
}

// What the pumps share.
struct direct_run {
  cuda::uploader& up;
  cuda::device_buffer& dst;
  const page_cache_file& file;
  std::vector<direct_chunk> chunks;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::optional<error> first_error;
  std::atomic<std::int64_t> register_ns{0};
  std::atomic<std::int64_t> wait_ns{0};
  std::atomic<std::uint64_t> pinned_now{0};
  std::atomic<std::uint64_t> pinned_max{0};

  void fail(error e) {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::move(e);
    failed = true;
  }
  void pinned(std::uint64_t bytes) {
    const std::uint64_t now = pinned_now.fetch_add(bytes) + bytes;
    std::uint64_t seen = pinned_max.load(std::memory_order_relaxed);
    while (now > seen && !pinned_max.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
};

// A chunk whose copy is in flight: unpinned only after its ticket is done.
struct in_flight {
  cuda::host_registration pages;
  cuda::upload_ticket ticket;
};

// Waits for the oldest copy of this pump, then unpins its pages (also after a failed copy).
void retire(direct_run& run, std::deque<in_flight>& flight) {
  in_flight& f = flight.front();
  auto t0 = direct_clock::now();
  auto done = run.up.wait(f.ticket);
  run.wait_ns += ns_since(t0);
  if (!done) run.fail(done.error());
  const std::uint64_t bytes = f.pages.size_bytes();
  t0 = direct_clock::now();
  flight.pop_front();  // cudaHostUnregister
  run.register_ns += ns_since(t0);
  run.pinned_now -= bytes;
}

// Pins a chunk and enqueues its copies. On a failed enqueue some copies may already be on a
// stream: the uploader is drained before the pages are unpinned.
void start_chunk(direct_run& run, const direct_chunk& c, std::deque<in_flight>& flight) {
  // Built from the pointer: the last chunk may end at the page end just past the file's last byte.
  const std::span<const std::byte> range(run.file.bytes().data() + c.begin_bytes, c.end_bytes - c.begin_bytes);
  auto t0 = direct_clock::now();
  auto pages = cuda::register_read_only(run.up.device(), range);
  run.register_ns += ns_since(t0);
  if (!pages) {
    run.fail(make_error(pages.error().code, "file " + run.file.path() + ": at offset " + std::to_string(c.begin_bytes) +
                                                ": " + pages.error().message));
    return;
  }
  run.pinned(range.size());
  auto ticket = run.up.upload(c.pieces, run.dst, cuda::upload_callback());
  if (!ticket) {
    run.fail(ticket.error());
    static_cast<void>(run.up.synchronize());
    run.pinned_now -= range.size();
    return;
  }
  flight.push_back({std::move(*pages), std::move(*ticket)});
}

// One pump: at most `depth` chunks in flight, so pinning chunk i+1 overlaps the copy of chunk i.
// Never throws: a pump runs as a plain job on a worker, and its pages must stay pinned until their
// copies have completed whatever happens.
void pump(direct_run& run, std::size_t depth) noexcept {
  std::deque<in_flight> flight;
  try {
    for (std::size_t i; !run.failed.load(std::memory_order_relaxed) && (i = run.next++) < run.chunks.size();) {
      if (flight.size() >= depth) retire(run, flight);
      start_chunk(run, run.chunks[i], flight);
    }
  } catch (const std::exception& e) {
    run.fail(make_error(errc::io, "file " + run.file.path() + ": direct upload failed: " + e.what()));
  }
  while (!flight.empty()) retire(run, flight);
}

}  // namespace

task<result<direct_upload_stats>> upload_from_page_cache(cuda::uploader& up, cuda::device_buffer& dst,
                                                         const page_cache_file& file, std::vector<direct_piece> pieces,
                                                         direct_upload_options options) {
  const std::uint64_t page = os_page_bytes();
  const std::uint64_t chunk_bytes = std::max(page, (options.chunk_bytes + page - 1) / page * page);
  for (const direct_piece& p : pieces) {
    if (p.file_offset_bytes > file.size_bytes() || p.length_bytes > file.size_bytes() - p.file_offset_bytes) {
      co_return make_error(errc::format, "file " + file.path() + ": " + std::to_string(p.length_bytes) +
                                             " bytes at offset " + std::to_string(p.file_offset_bytes) +
                                             " lie past its end (" + std::to_string(file.size_bytes()) + " bytes)");
    }
  }
  direct_run run{up, dst, file, cut_chunks(file, pieces, chunk_bytes)};
  // The pinned budget in chunks, shared as pumps x depth: two chunks per pump where it allows.
  const std::uint64_t budget = std::max<std::uint64_t>(1, options.pinned_bytes / chunk_bytes);
  const auto pumps = static_cast<unsigned>(std::max<std::uint64_t>(
      1, std::min<std::uint64_t>({options.threads, std::max<std::uint64_t>(1, budget / 2), run.chunks.size()})));
  const std::size_t depth = std::max<std::uint64_t>(1, budget / pumps);
  if (run.chunks.empty()) co_return direct_upload_stats{};
  wait_group group;
  std::vector<std::thread> threads;
  threads.reserve(pumps);
  try {
    for (unsigned k = 0; k < pumps; ++k) {
      group.add();
      threads.emplace_back([&run, &group, depth] {
        pump(run, depth);
        group.done();
      });
    }
  } catch (const std::system_error& e) {
    group.done();  // the pump that could not start
    run.fail(make_error(errc::io, "file " + file.path() + ": cannot start a direct upload thread: " + e.what()));
  }
  co_await group.wait();
  for (auto& t : threads) t.join();  // each has called done(): the joins return at once
  if (run.first_error) co_return *run.first_error;
  co_return direct_upload_stats{run.register_ns.load(), run.wait_ns.load(), run.pinned_max.load()};
}

namespace {

// Why the direct path cannot apply to this load, or nothing when it can.
std::optional<std::string> direct_refusal(const loader& opened, const device_load_options& o) {
  if (o.local_file.empty()) return "no local file is named (device_load_options::local_file)";
  if (o.verify) return "verification needs the bytes on the host";
  if (o.decryption || (opened.kind() == file_kind::tensorizer && opened.index().header.has_crypt_info())) {
    return "the file is encrypted";
  }
  return std::nullopt;
}

}  // namespace

task<result<std::optional<page_cache_file>>> choose_direct_file(cuda::uploader& up, const loader& opened,
                                                                byte_source& source, const device_load_options& o) {
  using none = std::optional<page_cache_file>;
  const bool required = o.direct_from_page_cache == direct_mode::on;
  auto refuse = [&](const std::string& why) -> result<none> {
    if (!required) return none();
    return make_error(errc::invalid_argument, source.name() + ": cannot load straight from the page cache: " + why);
  };
  if (o.direct_from_page_cache == direct_mode::off) co_return none();
  if (auto why = direct_refusal(opened, o)) co_return refuse(*why);
  auto supported = cuda::read_only_register_supported(up.device());
  if (!supported) co_return supported.error();
  if (!*supported) co_return refuse("cuda:" + std::to_string(up.device()) + " cannot pin read-only host memory");
  auto file = page_cache_file::open(o.local_file);
  if (!file) co_return refuse(file.error().message);
  auto size = co_await source.size();
  if (!size) co_return size.error();
  if (*size != file->size_bytes()) {
    co_return refuse(o.local_file + " has " + std::to_string(file->size_bytes()) + " bytes, the source " +
                     std::to_string(*size));
  }
  co_return none(std::move(*file));
}

result<bool> mostly_cached(const page_cache_file& file, std::span<const direct_piece> pieces) {
  std::uint64_t resident = 0;
  std::uint64_t total = 0;
  for (const auto& p : pieces) {
    TZ_TRY(counts, file.resident_pages(p.file_offset_bytes, p.length_bytes));
    resident += counts.first;
    total += counts.second;
  }
  return resident * 10 >= total * 9;
}

std::vector<direct_piece> range_pieces(const device_load_state& st, std::size_t first, std::size_t last) {
  std::vector<direct_piece> pieces;
  for (std::size_t i = first; i < last; ++i) {
    for (const device_piece& p : st.plan.ranges[i].pieces) {
      if (p.header || p.length_bytes == 0) continue;
      pieces.push_back({p.offset_bytes, p.length_bytes, st.plan.device_offset[p.slot] + p.data_begin_bytes});
    }
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const auto& a, const auto& b) { return a.file_offset_bytes < b.file_offset_bytes; });
  return pieces;
}

std::size_t direct_split(const device_plan& plan, double fraction) {
  const double share = std::clamp(fraction, 0.0, 1.0) * static_cast<double>(plan.read_bytes);
  std::size_t first = plan.ranges.size();
  double taken = 0;
  while (first > 0 && taken + static_cast<double>(plan.ranges[first - 1].length_bytes) / 2 <= share) {
    taken += static_cast<double>(plan.ranges[--first].length_bytes);
  }
  return first;
}

}  // namespace tz
