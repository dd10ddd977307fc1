// Decryption on the device: flag and scratch memory, the kernels launched behind a range's copies,
// and the flags read back at the end of the load.
#include "device_open.hpp"

#include "tz/cuda/secretbox.hpp"

#include <algorithm>

namespace tz {

namespace {

constexpr std::uint64_t min_chunk_bytes = 1024;  // format/FORMAT.md §9.4: validated per tensor
constexpr std::uint64_t scratch_align = 256;

std::uint64_t scratch_offset(std::uint64_t flag_capacity) {
  return (flag_capacity + scratch_align - 1) / scratch_align * scratch_align;
}

// The kernels' jobs for chunks [first, last) of `chunks`, all opened with one key.
std::vector<cuda::secretbox_job> jobs_of(std::span<const device_chunk> chunks, std::byte* device_base,
                                         std::span<const std::uint64_t> tensor_offsets) {
  std::vector<cuda::secretbox_job> jobs;
  jobs.reserve(chunks.size());
  for (const auto& c : chunks) {
    cuda::secretbox_job j;
    j.device_data = device_base + tensor_offsets[c.tensor] + c.chunk.offset_bytes;
    j.size_bytes = c.chunk.size_bytes;
    std::copy(c.chunk.nonce.begin(), c.chunk.nonce.end(), j.nonce.begin());
    std::copy(c.chunk.mac.begin(), c.chunk.mac.end(), j.mac.begin());
    jobs.push_back(j);
  }
  return jobs;
}

}  // namespace

result<std::unique_ptr<device_opener>> device_opener::create(device_context& ctx,
                                                            std::span<const format::tensor_entry* const> selected) {
  std::uint64_t capacity = 0;
  for (const auto* e : selected) capacity += e->data_length / min_chunk_bytes + 1;
  const int streams = ctx.uploader().stream_count();
  const std::uint64_t bytes = scratch_offset(capacity) + static_cast<std::uint64_t>(streams) * cuda::secretbox_scratch_bytes;
  TZ_TRY(aux, ctx.take_device_buffer(bytes));
  return std::unique_ptr<device_opener>(new device_opener(std::move(aux), capacity, streams));
}

void* device_opener::scratch(int stream_index) const noexcept {
  return static_cast<std::byte*>(aux_.get().data()) + scratch_offset(flag_capacity_) +
         static_cast<std::uint64_t>(stream_index) * cuda::secretbox_scratch_bytes;
}

result<cuda::after_copies_fn> device_opener::opener_for(std::vector<device_chunk> sealed, std::byte* device_base,
                                                        std::span<const std::uint64_t> tensor_offsets) {
  const std::uint64_t first = next_flag_.fetch_add(sealed.size());
  if (first + sealed.size() > flag_capacity_)  // cannot happen for validated headers; a guard all the same
    return make_error(errc::format, "decryption on the device: more cipher chunks than the tensors' sizes allow");
  auto chunks = std::make_shared<const std::vector<device_chunk>>(std::move(sealed));
  {
    std::lock_guard lock(mutex_);
    batches_.push_back({first, chunks});
  }
  std::vector<std::uint64_t> offsets(tensor_offsets.begin(), tensor_offsets.end());
  return cuda::after_copies_fn([this, first, chunks, device_base, offsets = std::move(offsets)](
                                   void* stream, int stream_index) -> result<void> {
    // The pooled buffer holds an earlier load's flags: cleared first, on this stream, so that a
    // flag no kernel of this load wrote reads as a failed chunk, never as an earlier success.
    TZ_CHECK(cuda::zero_async(flags() + first, chunks->size(), stream));
    // One launch per run of chunks sharing a key (one key per file unless passphrases differ).
    std::span<const device_chunk> all(*chunks);
    for (std::size_t begin = 0; begin < all.size();) {
      std::size_t end = begin + 1;
      while (end < all.size() && all[end].key == all[begin].key) ++end;
      const auto jobs = jobs_of(all.subspan(begin, end - begin), device_base, offsets);
      TZ_CHECK(cuda::launch_secretbox_open(jobs, all[begin].key->bytes(), flags() + first + begin,
                                           scratch(stream_index), stream));
      begin = end;
    }
    return {};
  });
}

result<void> device_opener::check(const std::string& source) const {
  const std::uint64_t used = next_flag_.load();
  if (used == 0) return {};
  std::vector<std::uint8_t> host(used);
  TZ_CHECK(cuda::download(aux_.get(), 0, std::as_writable_bytes(std::span(host))));
  std::lock_guard lock(mutex_);
  for (const auto& b : batches_) {
    for (std::size_t i = 0; i < b.chunks->size(); ++i) {
      if (host[b.first_flag + i] == 1) continue;
      const auto& c = (*b.chunks)[i];
      return format::chunk_mac_error(*c.header, c.chunk.index, source);
    }
  }
  return {};
}

}  // namespace tz
