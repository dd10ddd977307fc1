// The library side of the public API (api/): what the pimpl handles of tensorizer.hpp hold,
// and the conversions between the engine's types and the public ones. Never installed.
#pragma once

#include "tensorizer/tensorizer.hpp"

#include "tz/engine/device_load.hpp"
#include "tz/base/error.hpp"
#include "tz/format/encryption.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/signing/model_signing.hpp"
#include "tz/sources/sources.hpp"

#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

// Everything here is the library's own: hidden, so the exported set stays the public API even though
// these names live in namespace tensorizer (api/exports.map exports tensorizer::*).
#pragma GCC visibility push(hidden)
// The impl types were first declared (default visibility) in the public header: hide them here.
#define TZ_API_HIDDEN __attribute__((visibility("hidden")))

namespace tensorizer {

struct TZ_API_HIDDEN decryption_key::impl {
  tz::format::decryption decryption;  // the secret itself lives in its guarded, zeroed-on-free memory
};

// An opened model. Immutable after open, so copies of the public model share it freely; loads run
// concurrently on `sched`.
struct TZ_API_HIDDEN model::impl {
  std::shared_ptr<tz::scheduler> sched;
  std::shared_ptr<tz::byte_source> source;
  std::optional<tz::loader> opened;
  std::string name;
  // Shared with every host_tensors / device_tensors of this model, which outlive it.
  std::shared_ptr<const std::vector<tensor_info>> infos;
  options opts;  // as opened: each load derives its tz::load_options from them
};

struct TZ_API_HIDDEN host_tensors::impl {
  std::shared_ptr<const std::vector<tensor_info>> infos;  // the model's listing
  std::vector<std::size_t> indices;                       // position -> model tensor index
  tz::loaded_tensors loaded;
  load_timings timings;  // loaded's, converted once
};

struct TZ_API_HIDDEN device_tensors::impl {
  std::shared_ptr<const std::vector<tensor_info>> infos;
  std::vector<std::size_t> indices;
  tz::device_tensors loaded;
  load_timings timings;
};

namespace detail {

inline error from_tz(const tz::error& e) { return error{static_cast<errc>(e.code), e.message}; }

// The error of an exception that escaped the engine (bad_alloc, a thread that cannot start, a broken
// invariant): the API never lets one cross into the caller, it names where it happened instead.
error from_exception(std::string_view where, std::exception_ptr e);

// Runs `call` (returning a public result<T>); an exception escaping it becomes errc::internal.
template <class F>
auto guarded(std::string_view where, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (...) {
    return from_exception(where, std::current_exception());
  }
}

// The process-wide scheduler (options::threads == 0), or a private one of `threads` workers.
std::shared_ptr<tz::scheduler> scheduler_for(unsigned threads);
// The remote settings of `o` as the engine's; errc::invalid_argument for a value out of range.
tz::result<tz::remote_options> remote_options_from(const options& o);
// The settings of one load (readers, verify, decryption, a progress adapter that never throws and
// goes quiet for the rest of that load once the callback threw). Call once per load.
tz::load_options load_options_from(const options& o);
// Hands the tensors of a load of `m` to m.opts.on_tensor as they land (when set): fills `l`'s
// on_tensor_ready. `device`: -1 for host loads.
void hand_over_tensors(tz::load_common_options& l, const model::impl& m, int device);
// The signature check of one load of `m` (m.opts.signature_file): the signature verified, its
// observer set in `l`; null when the options ask for none.
tz::result<std::unique_ptr<tz::signing::signed_load>> check_signature(const model::impl& m, tz::load_common_options& l);

// Runs one load of `m` with `l` (made by load_options_from): with the options' signature checked in
// the load's pass (a load whose model does not match it fails), and, when trace_file is set, the
// timeline `l` recorded written there, also after a failed load. A failure to write fails a load
// that succeeded.
template <class Load>
auto run_load(const model::impl& m, tz::load_common_options& l, Load&& load) -> decltype(load()) {
  const options& o = m.opts;
  using out_type = decltype(load());
  auto failed = [](const tz::error& e) -> out_type {
    if constexpr (std::is_constructible_v<out_type, tz::error>) return out_type(e);
    else return from_tz(e);
  };
  auto signature = check_signature(m, l);
  if (!signature) return failed(signature.error());
  auto out = load();
  if (l.trace) {
    auto written = l.trace->write(o.trace_file);
    if (!written && out) return failed(written.error());
  }
  if (out && *signature) {
    if (auto same = (*signature)->finish(); !same) return failed(same.error());
  }
  return out;
}
tensor_info info_of(const tz::format::tensor_entry& e);
load_timings timings_of(const tz::load_timings& t);

}  // namespace detail
}  // namespace tensorizer

#pragma GCC visibility pop
