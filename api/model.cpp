// tensorizer::model: the public facade over tz::open_any, tz::loader and tz::load_to_device. Every
// call converts the engine's errors and exceptions to public error values.
#include "api_detail.hpp"

#include "tz/sources/checkpoint.hpp"

#include <algorithm>
#include <unordered_set>

namespace tensorizer {

namespace {

using detail::from_tz;

// Positions of `names` in the model's index (file order kept by the engine); errc::not_found for an
// unknown name and errc::invalid_argument for one given twice, both naming the source.
result<std::vector<std::size_t>> resolve(const model::impl& m, const std::vector<std::string>& names) {
  std::vector<std::size_t> out;
  std::unordered_set<std::size_t> seen;
  for (const auto& name : names) {
    auto i = m.opened->find(name);
    if (!i) return error{errc::not_found, m.name + ": no tensor named '" + name + "'"};
    if (!seen.insert(*i).second)
      return error{errc::invalid_argument, m.name + ": tensor '" + name + "' is named twice"};
    out.push_back(*i);
  }
  return out;
}

std::vector<std::size_t> all_indices(const model::impl& m) {
  std::vector<std::size_t> out(m.infos->size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = i;
  return out;
}

// Wraps a host load's memory with each position's model index.
host_tensors::impl make_host(const model::impl& m, tz::loaded_tensors loaded) {
  host_tensors::impl h{m.infos, {}, std::move(loaded), {}};
  h.timings = detail::timings_of(h.loaded.timings());
  for (std::size_t i = 0; i < h.loaded.size(); ++i) h.indices.push_back(h.loaded.index(i));
  return h;
}

load_timings add(load_timings a, const load_timings& b) {
  a.prepare_s += b.prepare_s, a.transfer_s += b.transfer_s, a.total_s += b.total_s, a.read_s += b.read_s;
  a.verify_s += b.verify_s, a.decrypt_s += b.decrypt_s, a.upload_s += b.upload_s, a.wait_s += b.wait_s;
  return a;
}

// verify()'s reused buffer: up to this much per batch, or the largest tensor when that is larger.
constexpr std::uint64_t verify_batch_bytes = 256ull << 20;

}  // namespace

result<model> model::open(const std::string& path_or_uri, const options& opts) {
  return detail::guarded(path_or_uri, [&]() -> result<model> {
    auto remote = detail::remote_options_from(opts);
    if (!remote) return from_tz(remote.error());
    auto m = std::make_shared<impl>();
    m->name = path_or_uri;
    m->opts = opts;
    m->sched = detail::scheduler_for(opts.threads);
    auto opened = tz::open_checkpoint(*m->sched, std::span(&path_or_uri, 1), {*remote, false});
    if (!opened) return from_tz(opened.error());
    m->source = opened->shared_source();
    m->opened.emplace(std::move(*opened));
    auto infos = std::make_shared<std::vector<tensor_info>>();
    for (const auto& e : m->opened->index().tensors) infos->push_back(detail::info_of(e));
    m->infos = std::move(infos);
    return model(std::move(m));
  });
}

const std::string& model::source_name() const noexcept { return p_->name; }
std::string model::cache_status() const { return tz::cache_status(*p_->opened); }
bool model::is_safetensors() const noexcept { return p_->opened->kind() == tz::file_kind::safetensors; }
bool model::encrypted() const noexcept { return p_->opened->index().header.has_crypt_info(); }
double model::open_seconds() const noexcept { return p_->opened->open_seconds(); }
const std::vector<tensor_info>& model::tensors() const noexcept { return *p_->infos; }
std::optional<std::size_t> model::find(std::string_view name) const noexcept { return p_->opened->find(name); }

result<host_tensors> model::load(const std::vector<std::string>& names) const {
  return detail::guarded(p_->name, [&]() -> result<host_tensors> {
    auto which = resolve(*p_, names);
    if (!which) return which.error();
    auto l = *p_->opened;  // a copy shares the index and source; loads on copies run concurrently
    auto o = detail::load_options_from(p_->opts);
    detail::hand_over_tensors(o, *p_, -1);
    return detail::run_load(*p_, o, [&]() -> result<host_tensors> {
      auto loaded = l.load(*p_->sched, std::move(*which), o);
      if (!loaded) return from_tz(loaded.error());
      return host_tensors(std::make_unique<host_tensors::impl>(make_host(*p_, std::move(*loaded))));
    });
  });
}

result<host_tensors> model::load_one(std::string_view name) const {
  return detail::guarded(p_->name, [&]() -> result<host_tensors> {
    auto which = resolve(*p_, {std::string(name)});
    if (!which) return which.error();
    auto l = *p_->opened;
    auto o = detail::load_options_from(p_->opts);
    detail::hand_over_tensors(o, *p_, -1);
    return detail::run_load(*p_, o, [&]() -> result<host_tensors> {
      auto loaded = tz::run(*p_->sched, l.async_load_tensor(*p_->sched, which->front(), o));
      if (!loaded) return from_tz(loaded.error());
      return host_tensors(std::make_unique<host_tensors::impl>(make_host(*p_, std::move(*loaded))));
    });
  });
}

result<load_timings> model::load_into(const std::vector<destination>& dst) const {
  return detail::guarded(p_->name, [&]() -> result<load_timings> {
    std::vector<std::string> names;
    for (const auto& d : dst) names.push_back(d.name);
    auto which = resolve(*p_, names);
    if (!which) return which.error();
    std::vector<tz::tensor_destination> to;
    for (std::size_t i = 0; i < dst.size(); ++i) to.push_back({(*which)[i], dst[i].bytes});
    auto l = *p_->opened;
    auto o = detail::load_options_from(p_->opts);
    detail::hand_over_tensors(o, *p_, -1);
    return detail::run_load(*p_, o, [&]() -> result<load_timings> {
      auto t = l.load_into(*p_->sched, std::move(to), o);
      if (!t) return from_tz(t.error());
      return detail::timings_of(*t);
    });
  });
}

result<device_tensors> model::load_to_device(int device, const std::vector<std::string>& names) const {
  return detail::guarded(p_->name, [&]() -> result<device_tensors> {
    auto which = resolve(*p_, names);
    if (!which) return which.error();
    // The process's context of that device: streams, threads and pinned rings made by the first
    // device load and reused by every later one (also the C ABI's and other models').
    auto ctx = tz::device_context::shared(device);
    if (!ctx) return from_tz(ctx.error());
    tz::device_load_options o;
    static_cast<tz::load_common_options&>(o) = detail::load_options_from(p_->opts);  // the ring keeps its defaults
    detail::hand_over_tensors(o, *p_, device);
    auto loaded = detail::run_load(*p_, o, [&] { return tz::load_to_device(*p_->sched, **ctx, *p_->opened, *which, o); });
    if (!loaded) return from_tz(loaded.error());
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < loaded->size(); ++i) indices.push_back(loaded->index(i));
    const auto t = detail::timings_of(loaded->timings());
    return device_tensors(std::make_unique<device_tensors::impl>(
        device_tensors::impl{p_->infos, std::move(indices), std::move(*loaded), t}));
  });
}

result<load_timings> model::verify(const std::vector<std::string>& names) const {
  return detail::guarded(p_->name, [&]() -> result<load_timings> {
    auto which = resolve(*p_, names);
    if (!which) return which.error();
    if (names.empty()) which = all_indices(*p_);
    std::sort(which->begin(), which->end());
    std::uint64_t largest = 0, total = 0;
    for (auto i : *which) largest = std::max(largest, (*p_->infos)[i].size_bytes), total += (*p_->infos)[i].size_bytes;
    const auto cap = std::max(verify_batch_bytes, largest);
    std::vector<std::byte> buffer(std::min(cap, total));
    auto base = detail::load_options_from(p_->opts);
    base.verify = true;
    load_timings sum;
    sum.open_s = p_->opened->open_seconds();
    std::uint64_t done = 0;
    std::size_t tensors_done = 0;
    for (const auto& batch : tz::batches_by_bytes(p_->opened->index(), *which, cap)) {
      std::vector<tz::tensor_destination> to;
      std::uint64_t at = 0;
      for (auto i : batch) {
        const auto n = (*p_->infos)[i].size_bytes;
        to.push_back({i, std::span<std::byte>(buffer).subspan(at, n)});
        at += n;
      }
      auto o = base;
      if (base.on_progress)  // one progress for the whole check: bytes as the tensors' sizes
        o.on_progress = [&, inner = base.on_progress, at](const tz::load_progress& p) {
          const auto part = p.bytes_total ? at * p.bytes_done / p.bytes_total : at;
          inner({done + part, total, tensors_done + p.tensors_done, which->size()});
        };
      auto l = *p_->opened;
      auto t = l.load_into(*p_->sched, std::move(to), std::move(o));
      if (!t) return from_tz(t.error());
      sum = add(sum, detail::timings_of(*t));
      done += at, tensors_done += batch.size();
    }
    return sum;
  });
}

result<void> prepare_device(int device, bool verify) {
  return detail::guarded("prepare_device", [&]() -> result<void> {
    auto ready = tz::device_context::prepare_shared(device, verify);
    if (!ready) return from_tz(ready.error());
    return {};
  });
}

}  // namespace tensorizer
