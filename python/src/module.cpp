// tensorizer._C: the module definition, error translation, the shared scheduler and remote options.
#include "common.hpp"
#include "partial.hpp"

#include "tz/cuda/cuda.hpp"
#include "tz/engine/device_context.hpp"

#include <pybind11/stl.h>


#include <array>

namespace tz::py {

namespace {

// Exception classes per errc, set by the package (set_error_types). Held as owned references for
// the life of the interpreter; reset when the module is torn down.
constexpr std::size_t errc_slots = static_cast<std::size_t>(errc::cancelled) + 1;
std::array<PyObject*, errc_slots> error_types{};

pyb::object error_type_for(errc code) {
  auto i = static_cast<std::size_t>(code);
  if (i < error_types.size() && error_types[i]) return pyb::reinterpret_borrow<pyb::object>(error_types[i]);
  return pyb::reinterpret_borrow<pyb::object>(PyExc_RuntimeError);
}

void set_error_types(const pyb::dict& mapping) {
  for (auto [key, value] : mapping) {
    const auto name = pyb::cast<std::string>(key);
    bool found = false;
    for (std::size_t i = 1; i < errc_slots; ++i) {
      if (name != errc_name(static_cast<errc>(i))) continue;
      if (!PyType_Check(value.ptr()) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(value.ptr()),
                                                           reinterpret_cast<PyTypeObject*>(PyExc_Exception)))
        throw pyb::type_error("set_error_types: the value for '" + name + "' is not an exception class");
      Py_XDECREF(error_types[i]);
      error_types[i] = pyb::reinterpret_borrow<pyb::object>(value).release().ptr();
      found = true;
    }
    if (!found) throw pyb::value_error("set_error_types: unknown error kind '" + name + "'");
  }
}

std::optional<std::string> opt_str(const pyb::kwargs& kw, const char* name) {
  if (!kw.contains(name)) return std::nullopt;
  pyb::object v = kw[name];
  if (v.is_none()) return std::nullopt;
  return pyb::cast<std::string>(v);
}

bool opt_bool(const pyb::kwargs& kw, const char* name) {
  return kw.contains(name) && !pyb::object(kw[name]).is_none() && pyb::cast<bool>(kw[name]);
}

}  // namespace

void raise_error(const error& e) {
  pyb::gil_scoped_acquire gil;
  PyErr_SetString(error_type_for(e.code).ptr(), e.message.c_str());
  throw pyb::error_already_set();
}

// cache_max_size: bytes, or a string such as "20G"; None: TENSORIZER_CACHE_MAX_SIZE.
std::optional<std::uint64_t> cache_max_bytes_from(const pyb::kwargs& kw) {
  if (!kw.contains("cache_max_size") || pyb::object(kw["cache_max_size"]).is_none()) return std::nullopt;
  pyb::object m = kw["cache_max_size"];
  if (pyb::isinstance<pyb::str>(m)) return take(tz::parse_byte_size(pyb::cast<std::string>(m)));
  const auto n = pyb::cast<long long>(m);
  if (n < 0) throw pyb::value_error("cache_max_size must be at least 0 (0 = half the file system)");
  return static_cast<std::uint64_t>(n);
}

tz::remote_options remote_options_from(const pyb::kwargs& kw) {
  static const char* const known[] = {"ca_file",         "insecure",        "connections",   "s3_access_key_id",
                                      "s3_secret_access_key", "s3_session_token", "s3_endpoint", "s3_config_path",
                                      "s3_region",       "force_http",      "s3_virtual_host", "headers",
                                      "cache_dir",       "cache_max_size",  "s3_no_config"};
  for (auto [key, value] : kw) {
    const auto name = pyb::cast<std::string>(key);
    auto is = [&](const char* k) { return name == k; };
    if (std::none_of(std::begin(known), std::end(known), is) &&
        std::none_of(std::begin(tz::time_limit_names), std::end(tz::time_limit_names), is))
      throw pyb::type_error("unexpected keyword argument '" + name + "'");
  }
  tz::remote_settings s;  // errors name the keyword itself
  for (const char* name : tz::time_limit_names)
    if (kw.contains(name) && !pyb::object(kw[name]).is_none()) s.time_limits.emplace_back(name, pyb::cast<double>(kw[name]));
  s.ca_file = opt_str(kw, "ca_file");
  s.verify_tls = !opt_bool(kw, "insecure");
  if (kw.contains("connections") && !pyb::object(kw["connections"]).is_none()) {
    const auto n = pyb::cast<long long>(kw["connections"]);
    if (n < 0) throw pyb::value_error("connections must be 0..256 (0 = default), got " + std::to_string(n));
    s.connections = static_cast<std::uint64_t>(n);
  }
  if (kw.contains("headers") && !pyb::object(kw["headers"]).is_none()) {
    pyb::object h = kw["headers"];
    if (pyb::isinstance<pyb::dict>(h)) h = h.attr("items")();
    for (auto item : h) s.headers.push_back(pyb::cast<std::pair<std::string, std::string>>(item));
  }
  s.s3_access_key_id = opt_str(kw, "s3_access_key_id");
  s.s3_secret_access_key = opt_str(kw, "s3_secret_access_key");
  s.s3_session_token = opt_str(kw, "s3_session_token").value_or("");
  s.s3_endpoint = opt_str(kw, "s3_endpoint").value_or("");
  s.s3_config_path = opt_str(kw, "s3_config_path").value_or("");
  s.s3_use_config = !opt_bool(kw, "s3_no_config");
  s.s3_region = opt_str(kw, "s3_region").value_or("");
  s.s3_force_http = opt_bool(kw, "force_http");  // tensorizer's keyword: never implied by the endpoint
  s.s3_virtual_host = opt_bool(kw, "s3_virtual_host");
  s.cache_dir = opt_str(kw, "cache_dir");
  s.cache_max_bytes = cache_max_bytes_from(kw);
  auto o = tz::remote_options_from(s);
  if (!o && o.error().code == errc::invalid_argument) throw pyb::value_error(o.error().message);
  return take(std::move(o));
}

}  // namespace tz::py

PYBIND11_MODULE(_C, m) {
  namespace py = tz::py;
  m.doc() = "tensorizer's native engine (see python/API.md): sources, readers, loads, writers, keys";
  m.attr("version") = TZ_VERSION;
  m.def("set_error_types", &py::set_error_types, pybind11::arg("mapping"),
        "Maps engine error kinds (io, format, hash_mismatch, crypto, ...) to exception classes.");
  m.def("cuda_device_count", [] {
    auto n = tz::cuda::device_count();
    return n ? *n : 0;
  });
  m.def(
      "prepare_device",
      [](int device, bool verify) {
        tz::result<void> ready;
        {
          pybind11::gil_scoped_release release;
          ready = tz::device_context::prepare_shared(device, verify);
        }
        py::take(std::move(ready));  // raised with the GIL held again
      },
      pybind11::arg("device"), pybind11::arg("verify") = false,
      "Makes the process's context of CUDA device `device` (streams, completion threads, a pinned "
      "staging ring) now, so that the first load to it finds it ready.");
  py::register_keys(m);
  py::register_source(m);
  py::register_reader(m);
  py::register_writer(m);
  py::register_partial(m);
  py::register_stream(m);
  // Drop the registered exception classes before the interpreter finalizes.
  auto atexit = pybind11::module_::import("atexit");
  atexit.attr("register")(pybind11::cpp_function([] {
    for (auto*& t : py::error_types) Py_CLEAR(t);
  }));
}
