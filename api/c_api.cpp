// The C ABI (tensorizer.h) over the C++ facade (tensorizer.hpp): library functions, options, and
// the thread-local error message. Models and loads are c_api_model.cpp. No exception crosses it.
#include "c_api.hpp"

#include "tz/sources/sources.hpp"  // set_time_limit: the one check of a time limit's name and range

using tensorizer::errc;
using tz_c::fail;
using tz_c::guarded;

namespace tz_c {

namespace {
thread_local std::string last_error;
}  // namespace

tz_status fail(const tensorizer::error& e) noexcept {
  try {
    last_error = e.message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what failed
  }
  return static_cast<tz_status>(e.code);
}

tz_status fail(errc code, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();
  }
  return static_cast<tz_status>(code);
}

const char* last_message() noexcept { return last_error.c_str(); }

}  // namespace tz_c

extern "C" {

const char* tz_version(void) { return TENSORIZER_VERSION_STRING; }
const char* tz_last_error_message(void) { return tz_c::last_message(); }
const char* tz_status_name(tz_status status) {
  return status == TZ_OK ? "ok" : tensorizer::errc_name(static_cast<errc>(status));
}

tz_options* tz_options_new(void) { return new (std::nothrow) tz_options{}; }
void tz_options_free(tz_options* options) { delete options; }

tz_status tz_options_set_threads(tz_options* options, unsigned threads) {
  TZ_C_REQUIRE(options, "tz_options_set_threads");
  options->o.threads = threads;
  return TZ_OK;
}

tz_status tz_options_set_readers(tz_options* options, unsigned readers) {
  TZ_C_REQUIRE(options, "tz_options_set_readers");
  options->o.readers = readers;
  return TZ_OK;
}

tz_status tz_options_set_verify(tz_options* options, int verify) {
  TZ_C_REQUIRE(options, "tz_options_set_verify");
  options->o.verify = verify != 0;
  return TZ_OK;
}

tz_status tz_options_set_trace(tz_options* options, const char* path) {
  TZ_C_REQUIRE(options, "tz_options_set_trace");
  options->o.trace_file = path ? path : "";
  return TZ_OK;
}

tz_status tz_options_set_signature(tz_options* options, const char* signature, const char* public_key,
                                   const char* certificate_chain, const char* model_root) {
  TZ_C_REQUIRE(options, "tz_options_set_signature");
  options->o.signature_file = signature ? signature : "";
  options->o.signature_public_key_file = public_key ? public_key : "";
  options->o.signature_certificate_chain_file = certificate_chain ? certificate_chain : "";
  options->o.signature_model_root = model_root ? model_root : "";
  return TZ_OK;
}

tz_status tz_options_set_decryption_key(tz_options* options, const uint8_t* key, size_t key_bytes) {
  TZ_C_REQUIRE(options && key, "tz_options_set_decryption_key");
  return guarded("tz_options_set_decryption_key", [&] {
    auto k = tensorizer::decryption_key::from_key({key, key_bytes});  // copied straight into guarded memory
    if (!k) return fail(k.error());
    options->o.decryption = std::move(*k);
    return TZ_OK;
  });
}

tz_status tz_options_set_decryption_passphrase(tz_options* options, const char* passphrase, size_t length) {
  TZ_C_REQUIRE(options && passphrase, "tz_options_set_decryption_passphrase");
  return guarded("tz_options_set_decryption_passphrase", [&] {
    auto k = tensorizer::decryption_key::from_passphrase({passphrase, length});
    if (!k) return fail(k.error());
    options->o.decryption = std::move(*k);
    return TZ_OK;
  });
}

tz_status tz_options_set_time_limit(tz_options* options, const char* name, double seconds) {
  TZ_C_REQUIRE(options && name, "tz_options_set_time_limit");
  return guarded("tz_options_set_time_limit", [&] {
    tz::remote_options check;  // the engine's own validation of the name and the range
    if (auto r = tz::set_time_limit(check, name, seconds); !r)
      return fail(tensorizer::error{static_cast<errc>(r.error().code), r.error().message});
    const std::string n = name;
    auto& o = options->o;
    (n == "connect_timeout"      ? o.connect_timeout_s
     : n == "first_byte_timeout" ? o.first_byte_timeout_s
     : n == "stall_timeout"      ? o.stall_timeout_s
     : n == "give_up_after"      ? o.give_up_after_s
                                 : o.deadline_s) = seconds;
    return TZ_OK;
  });
}

tz_status tz_options_set_tls(tz_options* options, const char* ca_file, int verify) {
  TZ_C_REQUIRE(options, "tz_options_set_tls");
  return guarded("tz_options_set_tls", [&] {
    options->o.ca_file = ca_file ? ca_file : "";
    options->o.verify_tls = verify != 0;
    return TZ_OK;
  });
}

tz_status tz_options_set_connections(tz_options* options, unsigned connections) {
  TZ_C_REQUIRE(options, "tz_options_set_connections");
  if (connections > 256) return fail(errc::invalid_argument, "tz_options_set_connections: expects 1..256 (0: default)");
  options->o.connections = connections;
  return TZ_OK;
}

tz_status tz_options_set_s3(tz_options* options, const char* endpoint, const char* region, const char* access_key_id,
                            const char* secret_access_key, const char* session_token) {
  TZ_C_REQUIRE(options, "tz_options_set_s3");
  return guarded("tz_options_set_s3", [&] {
    auto& o = options->o;
    o.s3_endpoint = endpoint ? endpoint : "";
    o.s3_region = region ? region : "";
    if (access_key_id) o.s3_access_key_id = access_key_id;
    else o.s3_access_key_id.reset();
    if (secret_access_key) o.s3_secret_access_key = secret_access_key;
    else o.s3_secret_access_key.reset();
    o.s3_session_token = session_token ? session_token : "";
    return TZ_OK;
  });
}

tz_status tz_options_set_cache(tz_options* options, const char* dir, uint64_t max_bytes) {
  TZ_C_REQUIRE(options, "tz_options_set_cache");
  return guarded("tz_options_set_cache", [&] {
    options->o.cache_dir = dir ? dir : "";
    options->o.cache_max_bytes = max_bytes;
    return TZ_OK;
  });
}

tz_status tz_options_set_progress(tz_options* options, tz_progress_fn fn, void* user) {
  TZ_C_REQUIRE(options, "tz_options_set_progress");
  return guarded("tz_options_set_progress", [&] {
    if (!fn) options->o.on_progress = nullptr;
    else options->o.on_progress = [fn, user](const tensorizer::progress& p) { fn(p.bytes_done, p.bytes_total, user); };
    return TZ_OK;
  });
}

tz_status tz_options_set_on_tensor(tz_options* options, tz_tensor_fn fn, int in_file_order, void* user) {
  TZ_C_REQUIRE(options, "tz_options_set_on_tensor");
  return guarded("tz_options_set_on_tensor", [&] {
    options->o.on_tensor_in_file_order = in_file_order != 0;
    if (!fn) {
      options->o.on_tensor = nullptr;
      return TZ_OK;
    }
    options->o.on_tensor = [fn, user](const tensorizer::ready_tensor& r) {
      const tz_ready_tensor t{r.index,  r.position, r.info->name.c_str(), r.host.data(), r.device_data, r.device,
                              r.info->size_bytes, r.seconds};
      fn(&t, user);
    };
    return TZ_OK;
  });
}

}  // extern "C"
