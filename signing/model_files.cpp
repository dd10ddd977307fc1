// A model on disk as model signing sees it: its files (ignore rules, symlinks), their digests taken
// on N threads, and the comparison of two manifests (model_signing.hpp).
#include "tz/signing/model_signing.hpp"

#include "tz/base/posix_io.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace tz::signing {
namespace fs = std::filesystem;
namespace {

// model signing's default: git's files are never part of a model.
constexpr const char* git_paths[] = {".git", ".gitattributes", ".github", ".gitignore"};

// Whether `relative` is `ignored` or lies under it (pathlib's is_relative_to).
bool under(const fs::path& relative, const fs::path& ignored) {
  auto r = relative.begin();
  for (auto i = ignored.begin(); i != ignored.end(); ++i, ++r)
    if (r == relative.end() || *r != *i) return false;
  return true;
}

// Path order by components, as pathlib orders the names model signing sorts.
bool name_less(const std::string& a, const std::string& b) {
  return std::lexicographical_compare(fs::path(a).begin(), fs::path(a).end(), fs::path(b).begin(), fs::path(b).end());
}

// SHA-256 of [start, end) of the file at `path`, read in 8 MiB pieces.
result<sha256_digest> hash_range(const fs::path& path, std::uint64_t start, std::uint64_t end) {
  TZ_TRY(fd, open_read_only(path.string()));
  sha256_hasher h;
  std::vector<std::byte> buffer(std::min<std::uint64_t>(8 << 20, std::max<std::uint64_t>(end - start, 1)));
  for (std::uint64_t at = start; at < end;) {
    const auto n = std::min<std::uint64_t>(buffer.size(), end - at);
    TZ_CHECK(pread_full(fd.get(), std::span(buffer.data(), n), at, path.string()));
    h.update(std::span<const std::byte>(buffer.data(), n));
    at += n;
  }
  return h.finish();
}

}  // namespace

std::string model_name_of(const fs::path& root) {
  auto name = root.filename().string();
  if (name.empty() || name == "." || name == "..") name = fs::weakly_canonical(root).filename().string();
  return name;
}

result<std::vector<model_file>> list_model(const fs::path& root, const serialization& how, const fs::path& signature) {
  std::error_code ec;
  const auto status = fs::symlink_status(root, ec);
  if (ec) return make_error(errc::not_found, root.string() + ": " + ec.message());
  if (fs::is_symlink(status) && !how.allow_symlinks)
    return make_error(errc::invalid_argument, root.string() + ": a symbolic link (the signature does not allow them)");
  std::vector<model_file> files;
  if (fs::is_regular_file(root)) {
    files.push_back({".", root, fs::file_size(root)});
    return files;
  }
  if (!fs::is_directory(root)) return make_error(errc::invalid_argument, root.string() + ": neither a file nor a directory");
  std::vector<fs::path> ignored;
  for (auto p : how.ignore_paths) {  // ".git/" names the same directory as ".git"
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    ignored.emplace_back(fs::path(p).lexically_normal());
  }
  ignored.insert(ignored.end(), std::begin(git_paths), std::end(git_paths));
  const auto sig = fs::weakly_canonical(signature, ec).lexically_relative(fs::weakly_canonical(root, ec));
  if (!sig.empty() && *sig.begin() != "..") ignored.push_back(sig);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto relative = it->path().lexically_relative(root);
    if (std::any_of(ignored.begin(), ignored.end(), [&](const fs::path& i) { return under(relative, i); })) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink() && !how.allow_symlinks)
      return make_error(errc::invalid_argument, it->path().string() + ": a symbolic link in the model (the signature does not allow them)");
    if (it->is_directory()) continue;
    if (!it->is_regular_file())
      return make_error(errc::invalid_argument, it->path().string() + ": neither a file nor a directory");
    files.push_back({relative.generic_string(), it->path(), it->file_size()});
  }
  if (ec) return make_error(errc::io, root.string() + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end(), [](const model_file& a, const model_file& b) { return name_less(a.name, b.name); });
  return files;
}

result<manifest> hash_files(const std::string& model_name, std::span<const model_file> files, const serialization& how,
                            unsigned threads) {
  struct job {
    std::string name;
    const model_file* file;
    std::uint64_t start, end;
  };
  std::vector<job> jobs;
  for (const auto& f : files) {
    if (how.method != "shards") {
      jobs.push_back({f.name, &f, 0, f.size_bytes});
      continue;
    }
    for (std::uint64_t start = 0; start < f.size_bytes; start += how.shard_size) {
      const auto end = std::min(f.size_bytes, start + how.shard_size);
      jobs.push_back({f.name + ":" + std::to_string(start) + ":" + std::to_string(end), &f, start, end});
    }
  }
  // Largest first: a big file started last would run alone at the end.
  std::sort(jobs.begin(), jobs.end(), [](const job& a, const job& b) { return a.end - a.start > b.end - b.start; });
  std::vector<std::optional<result<sha256_digest>>> done(jobs.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) done[i] = hash_range(jobs[i].file->path, jobs[i].start, jobs[i].end);
  };
  std::vector<std::jthread> pool;
  for (unsigned t = 1; t < std::clamp<std::size_t>(threads, 1, std::max<std::size_t>(jobs.size(), 1)); ++t) pool.emplace_back(work);
  work();
  pool.clear();
  manifest m{model_name, how, {}};
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (!*done[i]) return done[i]->error();
    m.digests.emplace(jobs[i].name, **done[i]);
  }
  return m;
}

result<void> compare(const manifest& expected, const manifest& actual) {
  for (const auto& [name, digest] : expected.digests) {
    auto it = actual.digests.find(name);
    if (it == actual.digests.end())
      return make_error(errc::hash_mismatch, "model '" + actual.model_name + "': '" + name + "' is signed but missing");
    if (it->second != digest)
      return make_error(errc::hash_mismatch, "model '" + actual.model_name + "': '" + name + "' does not match its signature: signed sha256 " +
                                                 to_hex(digest) + ", read " + to_hex(it->second));
  }
  for (const auto& [name, digest] : actual.digests)
    if (!expected.digests.contains(name))
      return make_error(errc::hash_mismatch, "model '" + actual.model_name + "': '" + name + "' is not in the signature (an extra file)");
  return {};
}

}  // namespace tz::signing
