// The CLI's tensor walk: batches of whole tensors loaded through the same pipeline as `load`.
#include "tensor_walk.hpp"
#include "remote_args.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

namespace tz::cli {

namespace {

// Loads tensors `which` and visits them in the order given.
result<void> visit_batch(scheduler& sched, loader& l, std::vector<std::size_t> which, const walk_options& options,
                         const tensor_visitor& visit) {
  load_options o;
  o.verify = options.verify;
  o.decryption = options.decryption;
  o.keep_headers = l.kind() == file_kind::tensorizer;
  o.huge_pages = false;  // batches are short-lived; 4 KiB pages are pre-faulted by the readers
  const std::vector<std::size_t> positions = which;
  TZ_TRY(loaded, l.load(sched, std::move(which), std::move(o)));
  // The load holds the batch in index order: the k-th smallest position is its k-th tensor.
  std::vector<std::size_t> sorted = positions;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t position : positions) {
    const auto k = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), position) - sorted.begin());
    // What is stored: data-less (meta, zero-size) tensors get an empty span, as writers expect.
    const auto data = loaded.entry(k).data_length == 0 ? std::span<const std::byte>() : loaded.data(k);
    TZ_CHECK(visit(position, loaded.entry(k), loaded.header(k), data));
  }
  return {};
}

}  // namespace

result<void> walk_tensors(scheduler& sched, loader& l, const walk_options& options, const tensor_visitor& visit) {
  const auto& tensors = l.index().tensors;
  std::vector<std::size_t> order = options.order;
  if (order.empty()) {
    order.resize(tensors.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  for (std::size_t i : order)
    if (i >= tensors.size()) return make_error(errc::invalid_argument, l.source().name() + ": no tensor at position " + std::to_string(i));
  for (auto& batch : batches_by_bytes(l.index(), order, options.batch_bytes))
    TZ_CHECK(visit_batch(sched, l, std::move(batch), options, visit));
  return {};
}

format::tensor_write as_write(const format::tensor_entry& e, const format::tensor_header* h,
                              std::span<const std::byte> data) {
  return format::tensor_write{e.path, e.type, h ? h->module_index : std::uint16_t{0}, e.dtype, e.shape, data,
                              e.is_meta()};
}

result<loader> open_loader(scheduler& sched, std::span<const std::string> inputs, const remote_options& remote) {
  return open_checkpoint(sched, inputs, {remote, false});
}

result<loader> open_model(scheduler& sched, const args& a) {
  TZ_TRY(remote, remote_options_from(a));
  return open_loader(sched, a.positional, remote);
}

std::string help_of(const char* own) { return std::string(own) + model_help + remote_help; }

}  // namespace tz::cli
