// _C.Source: opening paths and URIs, exact ranged reads with the GIL released.
#include "source.hpp"

#include "tz/backends/file_source.hpp"
#include "tz/backends/memory_source.hpp"
#include "tz/backends/uri.hpp"
#include "tz/sources/sources.hpp"

#include <cstring>

namespace tz::py {

result<std::uint64_t> source_handle::size() {
  std::lock_guard lock(size_mutex);
  if (size_bytes) return *size_bytes;
  try {
    TZ_TRY(n, run(*sched, source->size()));
    size_bytes = n;
    return n;
  } catch (...) {
    return make_error(errc::io, source->name() + ": size: " + describe_exception(std::current_exception()));
  }
}

namespace {

std::shared_ptr<source_handle> open_source(const std::string& spec, bool direct, const pyb::kwargs& kw) {
  auto options = remote_options_from(kw);
  auto h = std::make_shared<source_handle>();
  h->sched = shared_scheduler();
  pyb::gil_scoped_release release;
  if (is_remote_uri(spec)) {
    h->source = take(tz::open_any(spec, options));
  } else {
    auto f = file_source::open(spec, {direct, false});
    if (!f) raise_error(f.error());
    h->source = std::move(*f);
    start_io_rings(*h->sched);
  }
  return h;
}

void read_into(source_handle& h, std::uint64_t offset, const pyb::buffer& dst) {
  auto info = dst.request(true);
  if (info.ndim != 1 || info.strides.empty() || info.strides[0] != info.itemsize)
    throw pyb::value_error("read_into needs a contiguous writable 1-D buffer");
  std::span<std::byte> out(static_cast<std::byte*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize));
  pyb::gil_scoped_release release;
  take(tz::read_blocking(*h.sched, *h.source, offset, out));
}

}  // namespace

void register_source(pyb::module_& m) {
  pyb::class_<source_handle, std::shared_ptr<source_handle>>(m, "Source", "A random-access source of bytes.")
      .def_static("open", &open_source, pyb::arg("spec"), pyb::kw_only(), pyb::arg("direct") = false,
                  "Opens a local path or an http(s)://, s3:// or redis:// URI (remote options as keywords).")
      .def_static(
          "from_buffer",
          [](const pyb::buffer& data, const std::string& name) {
            auto info = data.request();
            const auto* p = static_cast<const std::byte*>(info.ptr);
            std::vector<std::byte> copy(p, p + info.size * info.itemsize);
            auto h = std::make_shared<source_handle>();
            h->sched = shared_scheduler();
            h->source = std::make_shared<memory_source>(std::move(copy), name);
            return h;
          },
          pyb::arg("data"), pyb::arg("name") = "in-memory file object",
          "A source over a copy of a bytes-like object (for file objects that cannot be reopened).")
      .def_property_readonly("name", [](const source_handle& h) { return h.source->name(); })
      .def_property_readonly(
          "cache_status", [](const source_handle& h) { return tz::cache_status(*h.source); },
          "What the node-local cache did for this source ('hit: PATH', 'filled: PATH', 'bypassed: WHY', ...);"
          " '' when it is not cached.")
      .def("size",
           [](source_handle& h) {
             pyb::gil_scoped_release release;
             return take(h.size());
           })
      .def("read_into", &read_into, pyb::arg("offset"), pyb::arg("buffer"),
           "Fills the whole writable buffer with the bytes at offset, or raises.")
      .def(
          "read",
          [](source_handle& h, std::uint64_t offset, std::size_t n) {
            std::string out(n, '\0');
            {
              pyb::gil_scoped_release release;
              take(tz::read_blocking(*h.sched, *h.source, offset,
                                      std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size())));
            }
            return pyb::bytes(out);
          },
          pyb::arg("offset"), pyb::arg("size"))
      .def("__repr__", [](const source_handle& h) { return "<tensorizer._C.Source " + h.source->name() + ">"; });
}

}  // namespace tz::py
