// Sharded checkpoints: several safetensors files opened as one loader. Their indexes become one
// (offsets moved onto one address space, each shard at a 4 KiB boundary) over a source that sends
// each read to the shard holding those bytes, so plans, pipelines and sinks see a single file.
#include "tz/base/clock.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/wait_group.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

namespace tz {

namespace {

constexpr std::uint64_t shard_align_bytes = 4096;

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

// The shards back to back. A read is cut where shards end: each piece goes to its shard at the
// shard's own offsets (so its errors name the shard and a real offset); the padding between
// shards reads as zeros (only a plan reading through a gap touches it).
class shard_set_source final : public byte_source {
 public:
  shard_set_source(std::string name, std::vector<std::shared_ptr<byte_source>> sources,
                   std::shared_ptr<const std::vector<shard_span>> spans, std::uint64_t bytes)
      : name_(std::move(name)), sources_(std::move(sources)), spans_(std::move(spans)), bytes_(bytes) {}

  const std::string& name() const noexcept override { return name_; }
  task<result<std::uint64_t>> size() override { co_return bytes_; }
  unsigned read_concurrency() const noexcept override {
    unsigned most = 0;
    for (const auto& s : sources_) most = std::max(most, s->read_concurrency());
    return most;
  }

  task<result<void>> read(std::uint64_t offset, scatter_list dst) override {
    std::uint64_t length = 0;
    for (const auto& d : dst) length += d.size();
    if (offset > bytes_ || bytes_ - offset < length)
      co_return make_error(errc::io, name_ + ": read of " + std::to_string(length) + " bytes at offset " +
                                         std::to_string(offset) + " runs past the end (" + std::to_string(bytes_) + ")");
    std::size_t span_at = 0, byte_at = 0;  // position in dst
    while (length > 0) {
      // The shard holding `offset`, or the padding before the next one.
      auto next = std::upper_bound(spans_->begin(), spans_->end(), offset,
                                   [](std::uint64_t off, const shard_span& s) { return off < s.base; });
      const shard_span* in = next == spans_->begin() ? nullptr : &*(next - 1);
      const bool inside = in != nullptr && offset < in->base + in->bytes;
      const std::uint64_t end = inside ? in->base + in->bytes : next == spans_->end() ? bytes_ : next->base;
      const std::uint64_t piece = std::min(length, end - offset);
      std::vector<std::span<std::byte>> part = take(dst, span_at, byte_at, piece);
      if (inside) {
        TZ_CO_CHECK(co_await sources_[static_cast<std::size_t>(in - spans_->data())]->read(offset - in->base, part));
      } else {
        for (auto& s : part) std::memset(s.data(), 0, s.size());
      }
      offset += piece;
      length -= piece;
    }
    co_return result<void>{};
  }

 private:
  // The next `n` bytes of dst from (span_at, byte_at) as a scatter list; advances the position.
  static std::vector<std::span<std::byte>> take(scatter_list dst, std::size_t& span_at, std::size_t& byte_at,
                                                std::uint64_t n) {
    std::vector<std::span<std::byte>> out;
    while (n > 0) {
      const auto& s = dst[span_at];
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, s.size() - byte_at));
      if (k > 0) out.push_back(s.subspan(byte_at, k));
      n -= k;
      byte_at += k;
      if (byte_at == s.size()) ++span_at, byte_at = 0;
    }
    return out;
  }

  std::string name_;
  std::vector<std::shared_ptr<byte_source>> sources_;
  std::shared_ptr<const std::vector<shard_span>> spans_;
  std::uint64_t bytes_;
};

// Opens every shard's index at once, one coroutine per shard on the workers.
task<std::vector<result<loader>>> open_each(scheduler& sched, const std::vector<shard_file>& shards) {
  std::vector<result<loader>> out(shards.size(), make_error(errc::io, "not opened"));
  co_await run_on_workers(
      sched, shards.size(),
      [&](std::size_t i) -> task<void> { out[i] = co_await loader::async_open(shards[i].source); },
      [&](std::size_t i, std::exception_ptr) {
        out[i] = make_error(errc::io, shards[i].source->name() + ": opening failed");
      });
  co_return out;
}

error shard_error(const std::string& name, const std::string& what) { return make_error(errc::format, name + ": " + what); }

// Checks the shards' tensors against each other and against the index, when there is one.
result<void> check_names(const std::string& name, const std::vector<shard_file>& shards,
                         const std::vector<loader>& opened, const std::optional<format::shard_index>& index) {
  std::unordered_map<std::string_view, std::size_t> holder;  // tensor -> shard holding it
  for (std::size_t s = 0; s < opened.size(); ++s) {
    for (const auto& t : opened[s].index().tensors) {
      auto [it, fresh] = holder.emplace(t.name, s);
      if (!fresh)
        return shard_error(name, "tensor \"" + t.name + "\" is in two shards: " + shards[it->second].name + " and " +
                                     shards[s].name);
    }
  }
  if (!index) return {};
  std::unordered_map<std::string_view, std::size_t> listed;  // tensor -> shard the index names
  for (const auto& [tensor, at] : index->weight_map) listed[tensor] = at;
  for (const auto& [tensor, at] : listed) {
    const std::string& named = index->shards[at];
    auto it = holder.find(tensor);
    if (it == holder.end())
      return shard_error(name, "the index lists tensor \"" + std::string(tensor) + "\" in " + named +
                                   ", but no shard holds it (" + named + " does not)");
    if (shards[it->second].name != named)
      return shard_error(name, "tensor \"" + std::string(tensor) + "\" is in " + shards[it->second].name +
                                   ", but the index lists it in " + named);
  }
  for (const auto& [tensor, s] : holder) {
    if (!listed.count(tensor))
      return shard_error(name, "tensor \"" + std::string(tensor) + "\" in " + shards[s].name +
                                   " is not listed in the index");
  }
  return {};
}

}  // namespace

task<result<loader>> loader::async_open_shards(scheduler& sched, std::string name, std::vector<shard_file> shards,
                                               std::optional<format::shard_index> index) {
  const auto t0 = std::chrono::steady_clock::now();
  if (shards.empty()) co_return make_error(errc::invalid_argument, name + ": a checkpoint needs at least one shard");
  std::vector<result<loader>> each = co_await open_each(sched, shards);
  std::vector<loader> opened;
  for (std::size_t s = 0; s < each.size(); ++s) {
    if (!each[s]) co_return each[s].error();
    if (each[s]->kind() != file_kind::safetensors)
      co_return make_error(errc::unsupported, shards[s].source->name() +
                                                  ": a shard of a sharded checkpoint must be a safetensors file, this is "
                                                  "a .tensors file");
    opened.push_back(std::move(*each[s]));
  }
  TZ_CO_CHECK(check_names(name, shards, opened, index));
  auto spans = std::make_shared<std::vector<shard_span>>();
  format::file_index all;
  all.source = name;
  std::uint64_t base = 0;
  std::vector<std::shared_ptr<byte_source>> sources;
  for (std::size_t s = 0; s < opened.size(); ++s) {
    const format::file_index& one = opened[s].index();
    spans->push_back({shards[s].name, opened[s].source().name(), base, one.file_bytes, all.tensors.size(),
                      one.tensors.size(), one.st_metadata, shards[s].source});
    for (format::tensor_entry e : one.tensors) {
      e.header_offset += base;
      e.data_offset += base;
      all.tensors.push_back(std::move(e));
    }
    all.header.tensor_count += one.header.tensor_count;
    all.header.tensor_size += one.header.tensor_size;
    sources.push_back(shards[s].source);
    base = align_up(base + one.file_bytes, shard_align_bytes);
  }
  all.file_bytes = spans->back().base + spans->back().bytes;
  loader l;
  l.kind_ = file_kind::safetensors;
  l.source_ = std::make_shared<shard_set_source>(name, std::move(sources), spans, all.file_bytes);
  l.index_ = std::make_shared<const format::file_index>(std::move(all));
  l.shards_ = std::move(spans);
  l.open_s_ = seconds_since(t0);
  co_return l;
}

result<loader> loader::open_shards(scheduler& sched, std::string name, std::vector<shard_file> shards,
                                   std::optional<format::shard_index> index) {
  return run(sched, async_open_shards(sched, std::move(name), std::move(shards), std::move(index)));
}

}  // namespace tz
