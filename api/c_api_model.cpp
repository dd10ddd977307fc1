// The C ABI's models and loads (tensorizer.h): tz_model_* and tz_*_tensors_* over tensorizer::model.
// The handle structs and the status helpers are c_api.hpp's, shared with the options (c_api.cpp).
#include "c_api.hpp"

#include <algorithm>
#include <cstring>

namespace {

using tz_c::fail;
using tz_c::put_timings;
using tensorizer::errc;

std::vector<std::string> names_of(const char* const* names, std::size_t count) {
  std::vector<std::string> out;
  if (!names) return out;
  for (std::size_t i = 0; i < count; ++i) out.emplace_back(names[i] ? names[i] : "");
  return out;
}

void put_info(const tensorizer::tensor_info& i, tz_tensor_info* out) {
  *out = tz_tensor_info{i.name.c_str(), i.dtype.c_str(), i.shape.empty() ? nullptr : i.shape.data(),
                        i.shape.size(), i.size_bytes, i.offset};
}

tz_status out_of_range(const char* where, std::size_t index, std::size_t size) {
  return fail(tensorizer::error{errc::invalid_argument, std::string(where) + ": index " + std::to_string(index) +
                                                            " out of range (" + std::to_string(size) + " tensors)"});
}

// The common accessors of host and device loads.
template <class Handle>
tz_status info_of(const Handle* loaded, std::size_t index, tz_tensor_info* out, const char* where) {
  if (!loaded || !out) return fail(errc::invalid_argument, "tz_*_tensors_info: a required argument is NULL");
  if (index >= loaded->t.size()) return out_of_range(where, index, loaded->t.size());
  put_info(loaded->t.info(index), out);
  return TZ_OK;
}

template <class Handle>
tz_status find_in(const Handle* loaded, const char* name, std::size_t* index, const char* where) {
  if (!loaded || !name || !index) return fail(errc::invalid_argument, "tz_*_tensors_find: a required argument is NULL");
  auto i = loaded->t.find(name);
  if (!i) return fail(tensorizer::error{errc::not_found, std::string(where) + ": no tensor named '" + name + "' in this load"});
  *index = *i;
  return TZ_OK;
}

}  // namespace

extern "C" {

tz_status tz_model_open(const char* path_or_uri, const tz_options* options, tz_model** out) {
  TZ_C_REQUIRE(path_or_uri && out, "tz_model_open");
  return tz_c::guarded("tz_model_open", [&] {
    auto m = tensorizer::model::open(path_or_uri, options ? options->o : tensorizer::options{});
    if (!m) return fail(m.error());
    *out = new tz_model{std::move(*m)};
    return TZ_OK;
  });
}

void tz_model_free(tz_model* model) { delete model; }

size_t tz_model_tensor_count(const tz_model* model) { return model ? model->m.tensors().size() : 0; }

tz_status tz_model_tensor_info(const tz_model* model, size_t index, tz_tensor_info* out) {
  TZ_C_REQUIRE(model && out, "tz_model_tensor_info");
  const auto& all = model->m.tensors();
  if (index >= all.size()) return out_of_range("tz_model_tensor_info", index, all.size());
  put_info(all[index], out);
  return TZ_OK;
}

tz_status tz_model_find(const tz_model* model, const char* name, size_t* index) {
  TZ_C_REQUIRE(model && name && index, "tz_model_find");
  auto i = model->m.find(name);
  if (!i) return fail(tensorizer::error{errc::not_found, model->m.source_name() + ": no tensor named '" + name + "'"});
  *index = *i;
  return TZ_OK;
}

int tz_model_encrypted(const tz_model* model) { return model && model->m.encrypted() ? 1 : 0; }

size_t tz_model_cache_status(const tz_model* model, char* buf, size_t size) {
  std::string status;
  try {
    if (model) status = model->m.cache_status();
  } catch (...) {  // out of memory: report nothing rather than let an exception cross into C
    status.clear();
  }
  if (buf && size > 0) {
    const size_t n = std::min(size - 1, status.size());
    std::memcpy(buf, status.data(), n);
    buf[n] = '\0';
  }
  return status.size();
}

tz_status tz_model_load(const tz_model* model, const char* const* names, size_t count, tz_host_tensors** out) {
  TZ_C_REQUIRE(model && out, "tz_model_load");
  return tz_c::guarded("tz_model_load", [&] {
    auto loaded = model->m.load(names_of(names, count));
    if (!loaded) return fail(loaded.error());
    *out = new tz_host_tensors{std::move(*loaded)};
    return TZ_OK;
  });
}

tz_status tz_model_load_one(const tz_model* model, const char* name, tz_host_tensors** out) {
  TZ_C_REQUIRE(model && name && out, "tz_model_load_one");
  return tz_c::guarded("tz_model_load_one", [&] {
    auto loaded = model->m.load_one(name);
    if (!loaded) return fail(loaded.error());
    *out = new tz_host_tensors{std::move(*loaded)};
    return TZ_OK;
  });
}

tz_status tz_model_load_into(const tz_model* model, const char* const* names, void* const* buffers,
                             const uint64_t* sizes, size_t count, tz_timings* timings) {
  TZ_C_REQUIRE(model && (count == 0 || (names && buffers && sizes)), "tz_model_load_into");
  return tz_c::guarded("tz_model_load_into", [&] {
    std::vector<tensorizer::destination> dst;
    for (std::size_t i = 0; i < count; ++i) {
      if (!names[i] || (!buffers[i] && sizes[i] != 0))
        return fail(errc::invalid_argument, "tz_model_load_into: a name or buffer is NULL");
      dst.push_back({names[i], {static_cast<std::byte*>(buffers[i]), static_cast<std::size_t>(sizes[i])}});
    }
    auto t = model->m.load_into(dst);
    if (!t) return fail(t.error());
    put_timings(*t, timings);
    return TZ_OK;
  });
}

tz_status tz_prepare_device(int device, int verify) {
  return tz_c::guarded("tz_prepare_device", [&] {
    auto ready = tensorizer::prepare_device(device, verify != 0);
    return ready ? TZ_OK : fail(ready.error());
  });
}

tz_status tz_model_load_to_device(const tz_model* model, int device, const char* const* names, size_t count,
                                  tz_device_tensors** out) {
  TZ_C_REQUIRE(model && out, "tz_model_load_to_device");
  return tz_c::guarded("tz_model_load_to_device", [&] {
    auto loaded = model->m.load_to_device(device, names_of(names, count));
    if (!loaded) return fail(loaded.error());
    *out = new tz_device_tensors{std::move(*loaded)};
    return TZ_OK;
  });
}

tz_status tz_model_verify(const tz_model* model, const char* const* names, size_t count, tz_timings* timings) {
  TZ_C_REQUIRE(model, "tz_model_verify");
  return tz_c::guarded("tz_model_verify", [&] {
    auto t = model->m.verify(names_of(names, count));
    if (!t) return fail(t.error());
    put_timings(*t, timings);
    return TZ_OK;
  });
}

size_t tz_host_tensors_count(const tz_host_tensors* loaded) { return loaded ? loaded->t.size() : 0; }

tz_status tz_host_tensors_info(const tz_host_tensors* loaded, size_t index, tz_tensor_info* out) {
  return info_of(loaded, index, out, "tz_host_tensors_info");
}

tz_status tz_host_tensors_data(const tz_host_tensors* loaded, size_t index, void** data, uint64_t* size_bytes) {
  TZ_C_REQUIRE(loaded && data && size_bytes, "tz_host_tensors_data");
  if (index >= loaded->t.size()) return out_of_range("tz_host_tensors_data", index, loaded->t.size());
  auto bytes = loaded->t.data(index);
  *data = bytes.data();
  *size_bytes = bytes.size();
  return TZ_OK;
}

tz_status tz_host_tensors_find(const tz_host_tensors* loaded, const char* name, size_t* index) {
  return find_in(loaded, name, index, "tz_host_tensors_find");
}

tz_status tz_host_tensors_timings(const tz_host_tensors* loaded, tz_timings* out) {
  TZ_C_REQUIRE(loaded && out, "tz_host_tensors_timings");
  put_timings(loaded->t.timings(), out);
  return TZ_OK;
}

void tz_host_tensors_free(tz_host_tensors* loaded) { delete loaded; }

size_t tz_device_tensors_count(const tz_device_tensors* loaded) { return loaded ? loaded->t.size() : 0; }

tz_status tz_device_tensors_info(const tz_device_tensors* loaded, size_t index, tz_tensor_info* out) {
  return info_of(loaded, index, out, "tz_device_tensors_info");
}

tz_status tz_device_tensors_data(const tz_device_tensors* loaded, size_t index, void** device_data,
                                 uint64_t* size_bytes) {
  TZ_C_REQUIRE(loaded && device_data && size_bytes, "tz_device_tensors_data");
  if (index >= loaded->t.size()) return out_of_range("tz_device_tensors_data", index, loaded->t.size());
  *device_data = loaded->t.data(index);
  *size_bytes = loaded->t.info(index).size_bytes;
  return TZ_OK;
}

int tz_device_tensors_device(const tz_device_tensors* loaded) { return loaded ? loaded->t.device() : -1; }

tz_status tz_device_tensors_timings(const tz_device_tensors* loaded, tz_timings* out) {
  TZ_C_REQUIRE(loaded && out, "tz_device_tensors_timings");
  put_timings(loaded->t.timings(), out);
  return TZ_OK;
}

void tz_device_tensors_free(tz_device_tensors* loaded) { delete loaded; }

}  // extern "C"
