// The public API's settings: version, error names, decryption keys, options -> the engine's remote
// and load options, and the scheduler a model runs on.
#include "api_detail.hpp"

#include "tz/sources/signed_load.hpp"

#include "tz/crypto/sodium.hpp"
#include "tz/engine/load_trace.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace tensorizer {

// The public codes are the engine's, number for number (the C ABI documents them).
static_assert(static_cast<int>(errc::io) == static_cast<int>(tz::errc::io));
static_assert(static_cast<int>(errc::cancelled) == static_cast<int>(tz::errc::cancelled));

version_info version() noexcept {
  return {TENSORIZER_VERSION_MAJOR, TENSORIZER_VERSION_MINOR, TENSORIZER_VERSION_PATCH, TENSORIZER_VERSION_STRING};
}

const char* errc_name(errc code) noexcept {
  if (code == errc::internal) return "internal";
  const int n = static_cast<int>(code);
  if (n < static_cast<int>(errc::io) || n > static_cast<int>(errc::cancelled)) return "unknown";
  return tz::errc_name(static_cast<tz::errc>(n));
}

result<decryption_key> decryption_key::from_key(std::span<const std::uint8_t> key) {
  return detail::guarded("decryption key", [&]() -> result<decryption_key> {
    auto k = tz::crypto::secret_key::from_bytes(key);
    if (!k) return detail::from_tz(k.error());
    decryption_key out;
    out.state = std::make_shared<const impl>(impl{tz::format::decryption::from_key(std::move(*k))});
    return out;
  });
}

result<decryption_key> decryption_key::from_passphrase(std::string_view passphrase) {
  return detail::guarded("decryption passphrase", [&]() -> result<decryption_key> {
    auto p = tz::crypto::passphrase::from_string(passphrase);
    if (!p) return detail::from_tz(p.error());
    decryption_key out;
    out.state = std::make_shared<const impl>(impl{tz::format::decryption::from_passphrase(std::move(*p))});
    return out;
  });
}

namespace detail {

error from_exception(std::string_view where, std::exception_ptr e) {
  return error{errc::internal, std::string(where) + ": " + tz::describe_exception(std::move(e))};
}

std::shared_ptr<tz::scheduler> scheduler_for(unsigned threads) {
  // threads == 0: the process's shared one (tz::shared_scheduler says why one).
  return threads != 0 ? std::make_shared<tz::scheduler>(threads) : tz::shared_scheduler();
}

tz::result<tz::remote_options> remote_options_from(const options& o) {
  tz::remote_settings r;
  // Errors name the field as the embedder sets it: options.connections, options.connect_timeout_s.
  r.spell = [](std::string_view keyword) {
    const bool time = std::find(std::begin(tz::time_limit_names), std::end(tz::time_limit_names), keyword) !=
                      std::end(tz::time_limit_names);
    return "options." + std::string(keyword) + (time ? "_s" : "");
  };
  const std::pair<const char*, const std::optional<double>*> limits[] = {
      {"connect_timeout", &o.connect_timeout_s}, {"first_byte_timeout", &o.first_byte_timeout_s},
      {"stall_timeout", &o.stall_timeout_s},     {"give_up_after", &o.give_up_after_s},
      {"deadline", &o.deadline_s}};
  for (const auto& [name, value] : limits)
    if (*value) r.time_limits.emplace_back(name, **value);
  if (!o.ca_file.empty()) r.ca_file = o.ca_file;
  r.verify_tls = o.verify_tls;
  r.connections = o.connections;
  r.s3_endpoint = o.s3_endpoint;  // an http:// endpoint given by the embedder is an explicit choice
  r.s3_region = o.s3_region;
  r.s3_access_key_id = o.s3_access_key_id;
  r.s3_secret_access_key = o.s3_secret_access_key;
  r.s3_session_token = o.s3_session_token;
  r.s3_config_path = o.s3_config_path;
  r.s3_virtual_host = o.s3_virtual_host;
  if (!o.cache_dir.empty()) r.cache_dir = o.cache_dir;
  if (o.cache_max_bytes != 0) r.cache_max_bytes = o.cache_max_bytes;
  return tz::remote_options_from(r);
}

tz::load_options load_options_from(const options& o) {
  tz::load_options l;
  l.readers = o.readers;
  l.verify = o.verify;
  if (o.decryption && o.decryption->state) l.decryption = o.decryption->state->decryption;
  if (o.on_progress) {
    // Called once per load, so the flag is per load; never raced (progress is serial per load).
    l.on_progress = [cb = o.on_progress, failed = std::make_shared<bool>(false)](const tz::load_progress& p) {
      if (*failed) return;
      try {
        cb(progress{p.bytes_done, p.bytes_total, p.tensors_done, p.tensors_total});
      } catch (...) {
        *failed = true;
      }
    };
  }
  if (!o.trace_file.empty()) l.trace = std::make_shared<tz::load_trace>();
  return l;
}

tz::result<std::unique_ptr<tz::signing::signed_load>> check_signature(const model::impl& m, tz::load_common_options& l) {
  const options& o = m.opts;
  if (o.signature_file.empty()) return std::unique_ptr<tz::signing::signed_load>();
  auto who = tz::signing::trust_from_files(o.signature_public_key_file, o.signature_certificate_chain_file);
  if (!who) return who.error();
  auto check = tz::open_signed_load(*m.opened, m.name, o.signature_model_root, o.signature_file, *who);
  if (check) l.observe = (*check)->observer();
  return check;
}

void hand_over_tensors(tz::load_common_options& l, const model::impl& m, int device) {
  if (!m.opts.on_tensor) return;
  l.ready_in_file_order = m.opts.on_tensor_in_file_order;
  l.on_tensor_ready = [cb = m.opts.on_tensor, infos = m.infos, base = m.opened->index().tensors.data(),
                       device](const tz::tensor_ready& r) {
    ready_tensor out;
    out.index = static_cast<std::size_t>(r.entry - base);
    out.position = r.position;
    out.info = &(*infos)[out.index];
    out.host = r.host;
    out.device_data = r.device_address;
    out.device = device;
    out.owner = r.owner;
    out.seconds = r.seconds;
    cb(out);  // a throw ends this load's handovers (the engine catches it)
  };
}

tensor_info info_of(const tz::format::tensor_entry& e) {
  return tensor_info{tz::format::display_name(e.path), tz::format::dtype_display(e.dtype), e.shape,
                     e.deserialized_bytes, e.data_offset};
}

load_timings timings_of(const tz::load_timings& t) {
  return load_timings{t.open_s, t.prepare_s, t.transfer_s, t.total_s, t.read_s,
                      t.verify_s, t.decrypt_s, t.upload_s, t.wait_s};
}

}  // namespace detail
}  // namespace tensorizer
