// The node-local cache's files: layout, locks, atomic publishing and LRU eviction (cache_store.hpp).
#include "cache_store.hpp"

#include "tz/crypto/hash.hpp"
#include "tz/base/posix_io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <span>
#include <system_error>
#include <vector>

namespace tz::cache_store {

namespace fs = std::filesystem;

namespace {

std::string digest_hex(const std::string& text, std::size_t bytes) {
  const auto d = sha256(std::as_bytes(std::span(text.data(), text.size())));
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes && i < d.size(); ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

struct cached_file {
  std::string path;
  std::uint64_t size_bytes = 0;
  struct timespec mtime {};
};

bool older(const cached_file& a, const cached_file& b) {
  return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
}

// A .part file whose object's lock nobody holds was left by a process that died while filling.
bool abandoned_part(const std::string& root, const std::string& name) {
  const auto dash = name.find('-');
  if (dash == std::string::npos) return false;
  auto lock = try_lock(root + "/locks/" + name.substr(0, dash) + ".lock");
  return lock && *lock;
}

}  // namespace

result<std::string> open_root(const std::string& dir) {
  const std::string root = dir + "/tensorizer-cache-v1";
  for (const auto* sub : {"/objects", "/locks"}) {
    std::error_code ec;
    fs::create_directories(root + sub, ec);
    if (ec) return make_error(errc::io, "cache directory " + root + sub + ": cannot create: " + ec.message());
  }
  return root;
}

entry_paths paths_for(const std::string& root, const std::string& key, const std::string& version,
                      std::uint64_t size_bytes) {
  const std::string k = digest_hex(key, 16);
  entry_paths p;
  p.prefix = root + "/objects/" + k + "-";
  p.object = p.prefix + digest_hex(version, 8) + "-" + std::to_string(size_bytes);
  p.part = p.object + ".part";
  p.lock = root + "/locks/" + k + ".lock";
  return p;
}

result<unique_fd> try_lock(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return os_error(errno, "cache lock " + path + ": cannot open");
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return unique_fd();
    if (errno != EINTR) return os_error(errno, "cache lock " + path + ": flock");
  }
  return fd;
}

std::uint64_t default_max_bytes(const std::string& root) {
  struct statvfs st {};
  if (::statvfs(root.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize / 2;
}

result<void> publish(int fd, const entry_paths& paths) {
  if (::fsync(fd) != 0) return os_error(errno, "cache file " + paths.part + ": fsync");
  if (::rename(paths.part.c_str(), paths.object.c_str()) != 0)
    return os_error(errno, "cache file " + paths.part + ": rename to " + paths.object);
  const auto dir = fs::path(paths.object).parent_path().string();
  if (unique_fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d) ::fsync(d.get());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(paths.object).parent_path(), ec)) {
    const auto path = e.path().string();
    if (path.starts_with(paths.prefix) && path != paths.object && !ends_with(path, ".part")) fs::remove(e.path(), ec);
  }
  return {};
}

void touch(const std::string& path) noexcept { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

void evict(const std::string& root, std::uint64_t max_bytes, const std::string& keep) noexcept {
  unique_fd lock(::open((root + "/evict.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) return;
  while (::flock(lock.get(), LOCK_EX) != 0 && errno == EINTR) {
  }
  std::vector<cached_file> files;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/objects", ec)) {
    const auto name = e.path().filename().string();
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (ends_with(name, ".part")) {
      if (abandoned_part(root, name)) fs::remove(e.path(), ec);
      else total += static_cast<std::uint64_t>(st.st_size);  // a fill in progress takes its room
      continue;
    }
    files.push_back({e.path().string(), static_cast<std::uint64_t>(st.st_size), st.st_mtim});
    total += static_cast<std::uint64_t>(st.st_size);
  }
  std::sort(files.begin(), files.end(), older);
  for (const auto& f : files) {
    if (total <= max_bytes) break;
    if (f.path == keep) continue;
    if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) total -= f.size_bytes;
  }
}

}  // namespace tz::cache_store
