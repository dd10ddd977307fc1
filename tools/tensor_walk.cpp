// The CLI's tensor walk: batches of whole tensors loaded through the same pipeline as `load`.
#include "tensor_walk.hpp"

#include "tz/sources.hpp"

#include <vector>

namespace tz::cli {

namespace {

// Loads tensors `which` and visits them in order.
result<void> visit_batch(scheduler& sched, loader& l, std::vector<std::size_t> which, const walk_options& options,
                         const tensor_visitor& visit) {
  load_options o;
  o.verify = options.verify;
  o.decryption = options.decryption;
  o.keep_headers = true;
  o.huge_pages = false;  // batches are short-lived; 4 KiB pages are pre-faulted by the readers
  const std::vector<std::size_t> positions = which;
  TZ_TRY(loaded, l.load(sched, std::move(which), std::move(o)));
  for (std::size_t k = 0; k < loaded.size(); ++k) {
    const format::tensor_header* h = loaded.header(k);
    if (h == nullptr) return make_error(errc::format, l.source().name() + ": tensor headers were not kept");
    // What is stored: data-less (meta, zero-size) tensors get an empty span, as writers expect.
    const auto data = loaded.entry(k).data_length == 0 ? std::span<const std::byte>() : loaded.data(k);
    TZ_CHECK(visit(positions[k], loaded.entry(k), *h, data));
  }
  return {};
}

}  // namespace

result<void> walk_tensors(scheduler& sched, loader& l, const walk_options& options, const tensor_visitor& visit) {
  if (l.kind() != file_kind::tensorizer) {
    return make_error(errc::unsupported, l.source().name() + ": expected a .tensors file (this is safetensors)");
  }
  const auto& tensors = l.index().tensors;
  std::vector<std::size_t> batch;
  std::uint64_t batch_bytes = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!batch.empty() && batch_bytes + tensors[i].deserialized_bytes > options.batch_bytes) {
      TZ_CHECK(visit_batch(sched, l, std::move(batch), options, visit));
      batch.clear();
      batch_bytes = 0;
    }
    batch.push_back(i);
    batch_bytes += tensors[i].deserialized_bytes;
  }
  if (!batch.empty()) TZ_CHECK(visit_batch(sched, l, std::move(batch), options, visit));
  return {};
}

result<loader> open_loader(scheduler& sched, const std::string& file_or_uri, const remote_options& remote) {
  TZ_TRY(source, open_any(file_or_uri, remote));
  return loader::open(sched, std::move(source));
}

}  // namespace tz::cli
