// The node-local cache as a byte source (tz/cache.hpp, backends/CACHE.md): a remote object is read
// from its published local copy when that version is cached, else read remotely while every byte
// read is also written into the copy being filled, which is published once the whole object has
// been read. Trouble with the cache itself (a full disk, a stalled filler) never fails a load: the
// load goes on from the remote object and status() says why the copy was not used.
#include "tz/backends/cache.hpp"

#include "cache_store.hpp"
#include "tz/backends/file_source.hpp"
#include "tz/base/posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tz {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

task<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(use_task);
}

// The byte ranges of an object written into the copy being filled: disjoint [begin, end) ranges.
class coverage {
 public:
  void add(std::uint64_t begin, std::uint64_t end) {
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      covered_ -= it->second - it->first;
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
    covered_ += end - begin;
  }
  std::uint64_t covered() const noexcept { return covered_; }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> gaps(std::uint64_t size_bytes) const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    std::uint64_t at = 0;
    for (const auto& [b, e] : ranges_) {
      if (b > at) out.emplace_back(at, b);
      at = e;
    }
    if (at < size_bytes) out.emplace_back(at, size_bytes);
    return out;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;
  std::uint64_t covered_ = 0;
};

// Gaps no load reads (padding, bytes before the first tensor) are fetched by the cache itself once
// a load has read everything else: at most this many bytes, or 1/64 of the object.
constexpr std::uint64_t gap_fill_min_bytes = 4ull << 20;
constexpr std::uint64_t gap_chunk_bytes = 16ull << 20;

enum class mode { opening, hit, fill, direct };

class cached_source final : public byte_source {
 public:
  cached_source(std::shared_ptr<byte_source> remote, std::string key, cache_options options, std::string root)
      : remote_(std::move(remote)), key_(std::move(key)), options_(std::move(options)), root_(std::move(root)) {}
  ~cached_source() override {
    if (publisher_.joinable()) publisher_.join();
    abandon_fill("");
  }

  const std::string& name() const noexcept override { return remote_->name(); }
  std::string version() const override { return remote_->version(); }
  // A hit reads the local copy at the engine's local-file default; a fill and a direct read go remote.
  unsigned read_concurrency() const noexcept override {
    return mode_.load() == mode::hit ? 0 : remote_->read_concurrency();
  }
  task<result<std::uint64_t>> size() override {
    TZ_CO_CHECK(co_await ready());
    co_return size_;
  }
  task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) override {
    TZ_CO_CHECK(co_await ready());
    switch (mode_.load()) {
      case mode::hit: co_return co_await local_->read(offset_bytes, dst);
      case mode::fill: co_return co_await fill_read(offset_bytes, dst);
      default: co_return co_await remote_->read(offset_bytes, dst);
    }
  }
  std::string status() const {
    std::lock_guard lock(mutex_);
    return status_;
  }

 private:
  task<result<void>> ready();
  task<result<void>> open_entry();
  bool try_hit(const char* how);
  void start_fill(unique_fd lock);
  task<result<void>> fill_read(std::uint64_t offset_bytes, scatter_list dst);
  result<void> write_part(std::uint64_t offset_bytes, scatter_list src);
  task<void> complete_fill();
  void publish();
  void abandon_fill(const std::string& why);
  void set_status(std::string s) {
    std::lock_guard lock(mutex_);
    status_ = std::move(s);
  }

  std::shared_ptr<byte_source> remote_;
  std::string key_;
  cache_options options_;
  std::string root_;
  std::atomic<bool> opening_{false};
  std::atomic<bool> opened_{false};
  result<void> open_result_;
  std::uint64_t size_ = 0;
  cache_store::entry_paths paths_;
  std::atomic<mode> mode_{mode::opening};
  std::shared_ptr<file_source> local_;
  mutable std::mutex mutex_;  // guards what follows
  std::string status_ = "not opened";
  unique_fd lock_;            // the fill lock, held while filling
  unique_fd part_;            // the copy being filled; closed only by the destructor (writers use it)
  coverage written_;
  unsigned in_flight_ = 0;
  bool filling_ = false;      // part_ is being filled and not yet published or abandoned
  bool completing_ = false;
  std::thread publisher_;     // fsync + rename + eviction after the last byte arrived
};

// The first caller decides how the object is read; concurrent first callers wait for it.
task<result<void>> cached_source::ready() {
  if (!opened_.load(std::memory_order_acquire)) {
    if (!opening_.exchange(true)) {
      auto r = co_await open_entry();
      {
        std::lock_guard lock(mutex_);
        open_result_ = r;
      }
      opened_.store(true, std::memory_order_release);
    } else {
      while (!opened_.load(std::memory_order_acquire)) co_await sleep_for(1ms);
    }
  }
  std::lock_guard lock(mutex_);
  co_return open_result_;
}

task<result<void>> cached_source::open_entry() {
  TZ_CO_TRY(size_bytes, co_await remote_->size());
  size_ = size_bytes;
  const auto version = remote_->version();
  auto bypass = [&](const std::string& why) {
    mode_ = mode::direct;
    set_status("bypassed: " + why);
    return result<void>();
  };
  const auto max_bytes = options_.max_bytes ? options_.max_bytes : cache_store::default_max_bytes(root_);
  if (version.empty()) co_return bypass("the server gave no ETag to key the copy by");
  if (size_ > max_bytes)
    co_return bypass(std::to_string(size_) + " bytes exceed the cache bound of " + std::to_string(max_bytes));
  paths_ = cache_store::paths_for(root_, key_, version, size_);
  struct stat last {};
  auto last_progress = std::chrono::steady_clock::now();
  for (bool waited = false;; waited = true) {
    if (try_hit(waited ? "hit after waiting for another process" : "hit")) co_return result<void>();
    auto lock = cache_store::try_lock(paths_.lock);
    if (!lock) co_return bypass(lock.error().message);
    if (*lock) {
      if (!try_hit("hit after waiting for another process")) start_fill(std::move(*lock));
      co_return result<void>();
    }
    // Another process fills this object: wait while its copy grows, read remotely if it stalls.
    struct stat now {};
    if (::stat(paths_.part.c_str(), &now) == 0 &&
        (now.st_blocks != last.st_blocks || now.st_mtim.tv_nsec != last.st_mtim.tv_nsec ||
         now.st_mtim.tv_sec != last.st_mtim.tv_sec)) {
      last = now;
      last_progress = std::chrono::steady_clock::now();
    }
    if (std::chrono::steady_clock::now() - last_progress > options_.wait_stall)
      co_return bypass("another process filling " + paths_.part + " made no progress for " +
                       std::to_string(options_.wait_stall.count()) + " ms");
    co_await sleep_for(20ms);
  }
}

bool cached_source::try_hit(const char* how) {
  struct stat st {};
  if (::stat(paths_.object.c_str(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != size_) return false;
  auto file = file_source::open(paths_.object);
  if (!file) return false;
  local_ = std::move(*file);
  cache_store::touch(paths_.object);
  mode_ = mode::hit;
  set_status(std::string(how) + ": " + paths_.object);
  return true;
}

void cached_source::start_fill(unique_fd lock) {
  unique_fd part(::open(paths_.part.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!part || ::ftruncate(part.get(), static_cast<off_t>(size_)) != 0) {
    mode_ = mode::direct;
    set_status("bypassed: cannot create " + paths_.part + ": " + std::strerror(errno));
    if (part) ::unlink(paths_.part.c_str());
    return;
  }
  std::lock_guard guard(mutex_);
  lock_ = std::move(lock);
  part_ = std::move(part);
  filling_ = true;
  status_ = "filling (not all of the object read yet): " + paths_.part;
  mode_ = mode::fill;
}

task<result<void>> cached_source::fill_read(std::uint64_t offset_bytes, scatter_list dst) {
  {
    std::lock_guard lock(mutex_);
    ++in_flight_;
  }
  auto r = co_await remote_->read(offset_bytes, dst);
  std::uint64_t length = 0;
  for (const auto& s : dst) length += s.size();
  bool writing = false;
  {
    std::lock_guard lock(mutex_);
    writing = r && filling_;
  }
  auto written = writing ? write_part(offset_bytes, dst) : result<void>();
  if (!written) abandon_fill(written.error().message);
  bool complete = false;
  {
    std::lock_guard lock(mutex_);
    --in_flight_;
    if (writing && written && filling_) written_.add(offset_bytes, offset_bytes + length);
    const auto missing = size_ - written_.covered();
    complete = filling_ && !completing_ && in_flight_ == 0 && missing <= std::max(gap_fill_min_bytes, size_ / 64);
    completing_ = completing_ || complete;
  }
  if (complete) co_await complete_fill();
  co_return r;
}

result<void> cached_source::write_part(std::uint64_t offset_bytes, scatter_list src) {
  for (const auto& s : src) {
    TZ_CHECK(pwrite_full(part_.get(), s, offset_bytes, "cache file " + paths_.part));
    offset_bytes += s.size();
  }
  return {};
}

// Fetches the few bytes no load read, then has the copy published and reads switched to it.
task<void> cached_source::complete_fill() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> gaps;
  {
    std::lock_guard lock(mutex_);
    gaps = written_.gaps(size_);
  }
  std::vector<std::byte> buffer;
  for (auto [begin, end] : gaps) {
    for (auto at = begin; at < end; at += gap_chunk_bytes) {
      buffer.resize(std::min(gap_chunk_bytes, end - at));
      std::span<std::byte> one[] = {buffer};
      auto got = co_await remote_->read(at, one);
      if (got) got = write_part(at, one);
      if (!got) co_return abandon_fill(got.error().message);
    }
  }
  // Making the copy durable (fsync) runs at disk speed, several times slower than loads arrive
  // (1 GiB: ~3.5 s here against ~0.7 s over loopback HTTP), so it happens beside the load, which has
  // its bytes already; the lock is held until the copy is published, and destruction waits for it.
  set_status("filled, being published: " + paths_.object);
  publisher_ = std::thread([this] { publish(); });
}

void cached_source::publish() {
  auto published = cache_store::publish(part_.get(), paths_);
  if (!published) return abandon_fill(published.error().message);
  {
    std::lock_guard lock(mutex_);
    filling_ = false;
    lock_ = unique_fd();
    status_ = "filled: " + paths_.object;
  }
  if (auto file = file_source::open(paths_.object); file) {
    local_ = std::move(*file);
    mode_ = mode::hit;
  }
  const auto max_bytes = options_.max_bytes ? options_.max_bytes : cache_store::default_max_bytes(root_);
  cache_store::evict(root_, max_bytes, paths_.object);
}

// Gives the unfinished copy up (a write failed, or this source is going away before every byte
// was read): removes it and releases the lock, so the next load, here or elsewhere, fills anew.
void cached_source::abandon_fill(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!filling_) return;
  filling_ = false;
  ::unlink(paths_.part.c_str());
  lock_ = unique_fd();
  if (!why.empty()) status_ = "not kept: " + why;
}

}  // namespace

result<std::uint64_t> parse_byte_size(std::string_view text) {
  double value = 0;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  std::uint64_t unit = 1;
  if (ec == std::errc() && p + 1 == end) {
    const char s = static_cast<char>(*p | 0x20);
    unit = s == 'k' ? 1ull << 10 : s == 'm' ? 1ull << 20 : s == 'g' ? 1ull << 30 : s == 't' ? 1ull << 40 : 0;
    ++p;
  }
  if (ec != std::errc() || p != end || unit == 0 || !(value >= 0) || value * static_cast<double>(unit) >= 1.8e19)
    return make_error(errc::invalid_argument, "expected a size in bytes (e.g. 1073741824, 512M, 20G), got '" +
                                                  std::string(text) + "'");
  return static_cast<std::uint64_t>(value * static_cast<double>(unit));
}

result<cache_options> cache_options_from_env() {
  cache_options o;
  if (const char* dir = std::getenv("TENSORIZER_CACHE_DIR")) o.dir = dir;
  if (const char* max = std::getenv("TENSORIZER_CACHE_MAX_SIZE"); max && *max) {
    auto bytes = parse_byte_size(max);
    if (!bytes) return make_error(errc::invalid_argument, "TENSORIZER_CACHE_MAX_SIZE: " + bytes.error().message);
    o.max_bytes = *bytes;
  }
  return o;
}

result<std::shared_ptr<byte_source>> open_cached(std::shared_ptr<byte_source> remote, std::string key,
                                                 const cache_options& options) {
  if (options.dir.empty()) return remote;
  TZ_TRY(root, cache_store::open_root(options.dir));
  return std::shared_ptr<byte_source>(
      std::make_shared<cached_source>(std::move(remote), std::move(key), options, std::move(root)));
}

std::string cache_status(const byte_source& source) {
  const auto* cached = dynamic_cast<const cached_source*>(&source);
  return cached ? cached->status() : std::string();
}

}  // namespace tz
