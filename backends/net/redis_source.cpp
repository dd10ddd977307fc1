// Redis byte source and virtual-file sink (format/FORMAT.md §13) on blocking hiredis worker threads.
#include "tz/backends/redis_source.hpp"

#include "redis_client.hpp"
#include "redis_reply.hpp"
#include "parallel.hpp"
#include "scatter.hpp"
#include "tz/backends/uri.hpp"

#include <hiredis/hiredis.h>

#include <boost/asio/deferred.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <random>
#include <utility>

namespace tz {
namespace {

namespace asio = boost::asio;
using net::redis_pool;

struct key_entry {
  std::string key;
  std::uint64_t offset_bytes = 0;
  std::uint64_t size_bytes = 0;
};

// SCAN's MATCH is a glob: escape the prefix so that only the literal prefix matches.
std::string glob_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::optional<std::uint64_t> offset_of(std::string_view key) {
  auto colon = key.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == key.size()) return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(key.data() + colon + 1, key.data() + key.size(), value);
  if (ec != std::errc{} || end != key.data() + key.size()) return std::nullopt;
  return value;
}

// Bounds on a listing, so that a hostile or broken server cannot keep a load scanning forever or
// growing the key list without end: 2^20 rounds of COUNT 1000 cover a billion keys; a model is
// stored in far fewer than 2^20 keys.
constexpr std::size_t scan_rounds_max = std::size_t{1} << 20;
constexpr std::size_t listed_keys_max = std::size_t{1} << 20;

// SCAN <prefix>:* then STRLEN each key (pipelined); keys sorted by offset, each once (SCAN may
// return a key more than once while the server rehashes).
result<void> list_keys(redisContext& ctx, const std::string& prefix, std::vector<key_entry>& out) {
  out.clear();
  std::string cursor = "0", pattern = glob_escape(prefix) + ":*";
  std::size_t rounds = 0;
  do {
    if (++rounds > scan_rounds_max)
      return make_error(errc::network, "SCAN " + pattern + ": not done after " + std::to_string(scan_rounds_max) + " rounds");
    auto reply = net::redis_command(ctx, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (!reply) return make_error(errc::network, "SCAN: " + net::redis_failure(ctx, reply.get()));
    auto page = net::scan_page_of(*reply);
    if (!page) return make_error(page.error().code, "SCAN: " + page.error().message);
    cursor = std::move(page->cursor);
    for (auto& key : page->keys)
      if (auto offset = offset_of(key)) out.push_back({std::move(key), *offset, 0});
    if (out.size() > listed_keys_max)
      return make_error(errc::network, "SCAN " + pattern + ": " + std::to_string(out.size()) + " keys after " +
                                           std::to_string(rounds) + " rounds, more than the " +
                                           std::to_string(listed_keys_max) + " a listing may hold");
  } while (cursor != "0");
  std::sort(out.begin(), out.end(), [](const key_entry& a, const key_entry& b) { return a.key < b.key; });
  out.erase(std::unique(out.begin(), out.end(), [](const key_entry& a, const key_entry& b) { return a.key == b.key; }),
            out.end());
  for (const auto& k : out) net::redis_append(ctx, {"STRLEN", k.key});
  for (auto& k : out) {
    auto reply = net::redis_next_reply(ctx);
    if (!reply) return make_error(errc::network, "STRLEN " + k.key + ": " + net::redis_failure(ctx, nullptr));
    auto size = net::strlen_of(*reply);
    if (!size) return make_error(size.error().code, "STRLEN " + k.key + ": " + size.error().message);
    k.size_bytes = *size;
  }
  std::sort(out.begin(), out.end(), [](const key_entry& a, const key_entry& b) {
    return a.offset_bytes != b.offset_bytes ? a.offset_bytes < b.offset_bytes : a.size_bytes < b.size_bytes;
  });
  return {};
}

struct piece {
  const key_entry* key;
  std::uint64_t start;  // within the key's value
  std::uint64_t length;
};

// Pipelined GETRANGEs, a few in flight, each reply copied into dst at its place. done counts the
// pieces delivered and outlives a failed attempt: the retry resumes at the first piece not yet
// delivered (a long multi-key read is not lost to one reset, and cannot starve under faults).
result<void> read_pieces(redisContext& ctx, const std::vector<piece>& pieces, scatter_list dst, std::size_t& done) {
  constexpr std::size_t window = 4;
  std::uint64_t skip = 0;
  for (std::size_t i = 0; i < done; ++i) skip += pieces[i].length;
  const auto rest = net::scatter_slice(dst, skip, net::scatter_size(dst) - skip);
  net::scatter_cursor cursor(rest);
  std::size_t sent = done;
  for (; done < pieces.size(); ++done) {
    for (; sent < pieces.size() && sent < done + window; ++sent) {
      const auto& p = pieces[sent];
      net::redis_append(ctx, {"GETRANGE", p.key->key, std::to_string(p.start), std::to_string(p.start + p.length - 1)});
    }
    auto reply = net::redis_next_reply(ctx);
    const auto& p = pieces[done];
    std::string what = "GETRANGE " + p.key->key + " " + std::to_string(p.start);
    if (!reply) return make_error(errc::network, what + ": " + net::redis_failure(ctx, nullptr));
    auto bytes = net::getrange_bytes_of(*reply, p.length);
    if (!bytes) return make_error(bytes.error().code, what + ": " + bytes.error().message);
    cursor.copy_in(*bytes);
  }
  return {};
}

class redis_source final : public byte_source {
 public:
  redis_source(std::string url, parsed_uri uri, const redis_options& options)
      : name_(std::move(url)), prefix_(uri.target), options_(options),
        pool_(uri.host, uri.port, options), workers_(std::max<std::size_t>(options.connections, 1)) {}
  ~redis_source() override { workers_.join(); }

  const std::string& name() const noexcept override { return name_; }

  task<result<std::uint64_t>> size() override {
    TZ_CO_CHECK(co_await ensure_index());
    co_return keys_.empty() ? 0 : keys_.back().offset_bytes + keys_.back().size_bytes;
  }

  task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) override;

 private:
  task<result<void>> ensure_index();
  result<std::vector<piece>> plan(std::uint64_t offset_bytes, std::uint64_t length) const;
  task<result<void>> read_part(std::uint64_t offset_bytes, std::vector<std::span<std::byte>> dst);

  std::string name_;
  std::string prefix_;
  redis_options options_;
  redis_pool pool_;
  asio::thread_pool workers_;
  std::mutex mutex_;
  bool indexed_ = false;
  std::vector<key_entry> keys_;
};

task<result<void>> redis_source::ensure_index() {
  {
    std::lock_guard lock(mutex_);
    if (indexed_) co_return result<void>{};
  }
  auto listed = co_await net::run_blocking<result<std::vector<key_entry>>>(workers_, [this]() -> result<std::vector<key_entry>> {
    std::vector<key_entry> keys;
    auto r = pool_.with_connection([&](redisContext& ctx) { return list_keys(ctx, prefix_, keys); }, "listing keys");
    if (!r) return r.error();
    return keys;
  });
  if (!listed) co_return make_error(listed.error().code, name_ + ": " + listed.error().message);
  if (listed->empty()) co_return make_error(errc::not_found, name_ + ": no keys match '" + prefix_ + ":<name>:<offset>'");
  std::lock_guard lock(mutex_);
  if (!indexed_) keys_ = std::move(*listed);
  indexed_ = true;
  co_return result<void>{};
}

// The GETRANGE pieces covering [offset, offset + length), or an error naming the first gap.
result<std::vector<piece>> redis_source::plan(std::uint64_t offset_bytes, std::uint64_t length) const {
  std::vector<piece> pieces;
  // Keys are sorted by (offset, size), so their ends never decrease.
  auto it = std::partition_point(keys_.begin(), keys_.end(),
                                 [&](const key_entry& k) { return k.offset_bytes + k.size_bytes <= offset_bytes; });
  std::uint64_t at = offset_bytes, end = offset_bytes + length;
  for (; at < end && it != keys_.end(); ++it) {
    if (it->size_bytes == 0 || it->offset_bytes + it->size_bytes <= at) continue;
    if (it->offset_bytes > at) break;  // gap
    std::uint64_t stop = std::min(end, it->offset_bytes + it->size_bytes);
    for (std::uint64_t p = at; p < stop; p += options_.piece_bytes)
      pieces.push_back({&*it, p - it->offset_bytes, std::min(options_.piece_bytes, stop - p)});
    at = stop;
  }
  if (at < end)
    return make_error(errc::not_found, name_ + ": no key holds byte offset " + std::to_string(at) + " (reading " +
                                           std::to_string(length) + " bytes at offset " + std::to_string(offset_bytes) + ")");
  return pieces;
}

task<result<void>> redis_source::read_part(std::uint64_t offset_bytes, std::vector<std::span<std::byte>> dst) {
  TZ_CO_TRY(pieces, plan(offset_bytes, net::scatter_size(dst)));
  std::size_t done = 0;
  auto r = co_await net::run_blocking<result<void>>(workers_, [&]() -> result<void> {
    return pool_.with_connection([&](redisContext& ctx) { return read_pieces(ctx, pieces, dst, done); }, "GETRANGE");
  });
  if (!r) co_return make_error(r.error().code, name_ + ": reading at offset " + std::to_string(offset_bytes) + ": " + r.error().message);
  co_return r;
}

task<result<void>> redis_source::read(std::uint64_t offset_bytes, scatter_list dst) {
  TZ_CO_TRY(size_bytes, co_await size());
  const std::uint64_t total = net::scatter_size(dst);
  if (offset_bytes > size_bytes || total > size_bytes - offset_bytes)
    co_return make_error(errc::invalid_argument, name_ + ": read of " + std::to_string(total) + " bytes at offset " +
                                                     std::to_string(offset_bytes) + " is past the end (size " +
                                                     std::to_string(size_bytes) + ")");
  std::uint64_t parts = std::clamp<std::uint64_t>(total / (2 * options_.piece_bytes), 1, std::max<std::size_t>(options_.connections, 1));
  if (parts == 1) co_return co_await read_part(offset_bytes, net::scatter_slice(dst, 0, total));
  auto ex = co_await asio::this_coro::executor;
  using op_type = decltype(asio::co_spawn(ex, read_part(0, {}), asio::deferred));
  std::vector<op_type> ops;
  const std::uint64_t part_bytes = (total + parts - 1) / parts;
  for (std::uint64_t skip = 0; skip < total; skip += part_bytes) {
    auto length = std::min(part_bytes, total - skip);
    ops.push_back(asio::co_spawn(ex, read_part(offset_bytes + skip, net::scatter_slice(dst, skip, length)), asio::deferred));
  }
  co_return co_await net::all_succeed(std::move(ops));
}

result<parsed_uri> parse_redis_url(const std::string& url) {
  TZ_TRY(uri, parse_uri(url));
  if (uri.scheme != "redis") return make_error(errc::invalid_argument, "'" + url + "' is not a redis:// URL");
  if (uri.target.empty()) return make_error(errc::invalid_argument, "'" + url + "' has no key prefix");
  return uri;
}

// Upload keys are first written under a staging prefix that no reader lists (SCAN <prefix>:* cannot
// match it), with a day's TTL so that an upload cut off (process killed, attempts spent) leaves no
// lasting garbage; then one MULTI/EXEC deletes the old file's keys and renames the staged ones into
// place. Readers so see the previous file or the new one, never a half-written one (the cost: old
// and new coexist in memory until the EXEC).
constexpr std::string_view staging_ttl_s = "86400";

std::string staging_prefix() {
  std::random_device rd;
  char text[40];
  std::snprintf(text, sizeof text, "tz-staging-%08x%08x:", rd(), rd());
  return text;
}

// Reads count pipelined replies; the first error (or lost connection) names what.
result<void> expect_replies(redisContext& ctx, std::size_t count, const std::string& what) {
  for (std::size_t i = 0; i < count; ++i) {
    auto reply = net::redis_next_reply(ctx);
    if (!reply || reply->type == REDIS_REPLY_ERROR) return make_error(errc::network, what + ": " + net::redis_failure(ctx, reply.get()));
  }
  return {};
}

// How many of the staged keys exist: all of them before a publish, none after one.
result<std::size_t> staged_present(redisContext& ctx, const std::string& staged, const std::vector<std::string>& keys) {
  std::vector<std::string> names;
  for (const auto& k : keys) names.push_back(staged + k);
  std::vector<std::string_view> argv{"EXISTS"};
  argv.insert(argv.end(), names.begin(), names.end());
  auto reply = net::redis_command(ctx, argv);
  if (!reply || reply->type != REDIS_REPLY_INTEGER) return make_error(errc::network, "EXISTS (staged keys): " + net::redis_failure(ctx, reply.get()));
  return static_cast<std::size_t>(reply->integer);
}

// MULTI, DEL every key of the old file, RENAME + PERSIST every staged key, EXEC; first checked:
// every staged key must exist (MULTI does not roll back: a RENAME failing inside it would leave
// the DELs done). retried: an earlier attempt sent the EXEC but lost its answer; no staged key left
// then means that EXEC went through.
result<void> publish_staged(redisContext& ctx, const std::string& prefix, const std::string& staged,
                            const std::vector<std::string>& keys, bool retried) {
  TZ_TRY(present, staged_present(ctx, staged, keys));
  if (present == 0 && retried) return {};
  if (present != keys.size())
    return make_error(errc::io, "publishing " + prefix + ": " + std::to_string(keys.size() - present) + " of " +
                                    std::to_string(keys.size()) + " staged keys are gone (expired?); nothing replaced");
  std::vector<key_entry> old;
  TZ_CHECK(list_keys(ctx, prefix, old));
  net::redis_append(ctx, {"MULTI"});
  for (const auto& k : old) net::redis_append(ctx, {"DEL", k.key});
  for (const auto& k : keys) {
    const std::string from = staged + k;
    net::redis_append(ctx, {"RENAME", from, k});
    net::redis_append(ctx, {"PERSIST", k});
  }
  net::redis_append(ctx, {"EXEC"});
  TZ_CHECK(expect_replies(ctx, 1 + old.size() + 2 * keys.size(), "MULTI (publishing " + prefix + ")"));
  auto reply = net::redis_next_reply(ctx);
  if (!reply || reply->type != REDIS_REPLY_ARRAY)
    return make_error(errc::network, "EXEC (publishing " + prefix + "): " + net::redis_failure(ctx, reply.get()));
  for (std::size_t i = 0; i < reply->elements; ++i)
    if (reply->element[i]->type == REDIS_REPLY_ERROR)
      return make_error(errc::network, "EXEC (publishing " + prefix + "): " + std::string(reply->element[i]->str, reply->element[i]->len));
  return {};
}

// An upload: the staged keys' commands (SET the first piece of a value with the staging TTL, APPEND
// the rest) and how far Redis acknowledged them, kept across attempts: a retry resumes at the SET
// of the first value not wholly acknowledged (a value's commands are all sent again, in order, so
// an APPEND that went through unacknowledged is overwritten by the SET).
struct staged_upload {
  struct command {
    std::string key;
    bool first;
    std::span<const std::byte> bytes;
  };
  std::string prefix, staged = staging_prefix();
  std::vector<std::string> keys;
  std::vector<command> commands;
  std::size_t resume = 0;
  bool publish_sent = false;
};

staged_upload plan_upload(const std::string& prefix, std::span<const redis_range> ranges, std::uint64_t piece_bytes) {
  staged_upload up;
  up.prefix = prefix;
  for (const auto& r : ranges) {
    up.keys.push_back(prefix + ":" + r.name + ":" + std::to_string(r.offset_bytes));
    for (std::uint64_t at = 0; at == 0 || at < r.bytes.size(); at += piece_bytes)
      up.commands.push_back({up.staged + up.keys.back(), at == 0, r.bytes.subspan(at, std::min<std::uint64_t>(piece_bytes, r.bytes.size() - at))});
  }
  return up;
}

// The commands from up.resume on, with a window in flight; then publish.
result<void> write_staged(redisContext& ctx, staged_upload& up) {
  constexpr std::size_t window = 8;
  const auto& commands = up.commands;
  std::size_t sent = up.resume;
  for (std::size_t done = up.resume; done < commands.size(); ++done) {
    for (; sent < commands.size() && sent < done + window; ++sent) {
      const auto& c = commands[sent];
      std::string_view value(reinterpret_cast<const char*>(c.bytes.data()), c.bytes.size());
      if (c.first) net::redis_append(ctx, {"SET", c.key, value, "EX", staging_ttl_s});
      else net::redis_append(ctx, {"APPEND", c.key, value});
    }
    auto reply = net::redis_next_reply(ctx);
    if (!reply || reply->type == REDIS_REPLY_ERROR)
      return make_error(errc::network, (commands[done].first ? "SET " : "APPEND ") + commands[done].key + ": " +
                                           net::redis_failure(ctx, reply.get()));
    if (done + 1 == commands.size() || commands[done + 1].first) up.resume = done + 1;
  }
  const bool retried = std::exchange(up.publish_sent, true);
  return publish_staged(ctx, up.prefix, up.staged, up.keys, retried);
}

}  // namespace

result<std::unique_ptr<byte_source>> open_redis_source(const redis_options& options, std::string url) {
  TZ_TRY(uri, parse_redis_url(url));
  return std::unique_ptr<byte_source>(std::make_unique<redis_source>(std::move(url), std::move(uri), options));
}

task<result<void>> write_virtual_file(const redis_options& options, std::string url, std::span<const redis_range> ranges) {
  TZ_CO_TRY(uri, parse_redis_url(url));
  redis_pool pool(uri.host, uri.port, options);
  asio::thread_pool worker(1);
  auto r = co_await net::run_blocking<result<void>>(worker, [&]() -> result<void> {
    auto up = plan_upload(uri.target, ranges, options.piece_bytes);
    return pool.with_connection([&](redisContext& ctx) { return write_staged(ctx, up); }, "writing the virtual file");
  });
  worker.join();
  if (!r) co_return make_error(r.error().code, url + ": " + r.error().message);
  co_return r;
}

}  // namespace tz
