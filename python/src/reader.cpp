// _C.Reader, _C.Loaded and _C.Block: an opened file, one load's memory, zero-copy views of it.
#include "keys.hpp"
#include "partial.hpp"
#include "source.hpp"

#include "tz/sources/checkpoint.hpp"
#include "tz/sources/signed_load.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/engine/device_load.hpp"
#include "tz/format/tensor_path.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/engine/loader.hpp"
#include "tz/signing/model_signing.hpp"

#include <pybind11/stl.h>

#include <tuple>

namespace tz::py {

pyb::capsule dltensor_capsule(cuda::managed_tensor_ptr t) {
  return pyb::capsule(t.release(), "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* p = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (p && p->deleter) p->deleter(p);
    }
  });
}

// The same keys for host and device loads (see tz::load_timings).
pyb::dict timings_dict(const load_timings& t) {
  pyb::dict d;
  d["open_s"] = t.open_s, d["prepare_s"] = t.prepare_s, d["transfer_s"] = t.transfer_s, d["total_s"] = t.total_s;
  d["read_s"] = t.read_s, d["verify_s"] = t.verify_s, d["decrypt_s"] = t.decrypt_s;
  d["upload_s"] = t.upload_s, d["wait_s"] = t.wait_s;
  return d;
}

namespace {

struct reader_handle {
  std::shared_ptr<scheduler> sched;
  std::shared_ptr<source_handle> source;  // null once closed
  std::optional<loader> opened;
  std::string name;
};

// One load: host memory owned by `host`, or device memory owned by `device`.
struct loaded_handle {
  std::shared_ptr<scheduler> sched;
  std::shared_ptr<loaded_tensors> host;
  std::shared_ptr<device_tensors> device;
  std::vector<std::size_t> indices;  // reader entry index of each position
};


pyb::object path_to_python(const format::tensor_path& path) {
  if (!path.structured()) return pyb::str(std::get<std::string>(path.parts.front()));
  pyb::tuple t(path.parts.size());
  for (std::size_t i = 0; i < path.parts.size(); ++i) {
    const auto& p = path.parts[i];
    if (const auto* s = std::get_if<std::string>(&p)) t[i] = pyb::str(*s);
    else t[i] = pyb::int_(std::get<std::uint64_t>(p));
  }
  return t;
}

// One tensor of the index as Python sees it (_C.Entry): a copy of the entry, its fields converted
// when read. A TensorDeserializer lists every entry at each open, and building a dict and a
// SimpleNamespace per entry cost 9-15 us each (3.4-5.9 ms for a 380-tensor model, about 4% of its
// 4 GiB GPU load on an H100); this costs a copy.
struct entry_info {
  format::tensor_entry e;
  std::size_t index = 0;
};

pyb::tuple shape_tuple(const std::vector<std::uint64_t>& shape) {
  pyb::tuple t(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) t[i] = pyb::int_(shape[i]);
  return t;
}

void register_entry(pyb::module_& m) {
  using E = entry_info;
  pyb::class_<E>(m, "Entry", pyb::dynamic_attr(), "One tensor of a file's index (read-only fields).")
      .def_property_readonly("index", [](const E& x) { return x.index; })
      .def_property_readonly("name", [](const E& x) { return path_to_python(x.e.path); })
      .def_property_readonly("raw_name", [](const E& x) { return pyb::bytes(x.e.name); })
      .def_property_readonly("display", [](const E& x) { return format::display_name(x.e.path); })
      .def_property_readonly("type", [](const E& x) { return static_cast<int>(x.e.type); })
      .def_property_readonly("dtype", [](const E& x) { return pyb::str(x.e.dtype.stored); })
      .def_property_readonly("numpy_dtype", [](const E& x) { return x.e.dtype.numpy; })
      .def_property_readonly("torch_dtype", [](const E& x) { return x.e.dtype.torch; })
      .def_property_readonly("opaque", [](const E& x) { return x.e.dtype.opaque; })
      .def_property_readonly("itemsize", [](const E& x) { return x.e.dtype.itemsize; })
      .def_property_readonly("shape", [](const E& x) { return shape_tuple(x.e.shape); })
      // 5: u64 dimensions in the header too (FORMAT.md §16.1)
      .def_property_readonly("metadata_version", [](const E& x) { return x.e.metadata_version; })
      .def_property_readonly("header_offset", [](const E& x) { return x.e.header_offset; })
      .def_property_readonly("data_offset", [](const E& x) { return x.e.data_offset; })
      .def_property_readonly("data_length", [](const E& x) { return x.e.data_length; })
      .def_property_readonly("deserialized_bytes", [](const E& x) { return x.e.deserialized_bytes; })
      .def_property_readonly("is_meta", [](const E& x) { return x.e.is_meta(); })
      .def("__repr__", [](const E& x) {
        return "<tensorizer._C.Entry " + std::to_string(x.index) + " " + format::display_name(x.e.path) + ">";
      });
}

std::shared_ptr<reader_handle> open_checkpoint_reader(const std::vector<std::string>& specs, bool direct,
                                                      const pyb::kwargs& kw) {
  checkpoint_options options{remote_options_from(kw), direct};
  auto r = std::make_shared<reader_handle>();
  r->sched = shared_scheduler();
  auto source = std::make_shared<source_handle>();
  source->sched = r->sched;
  {
    pyb::gil_scoped_release release;
    r->opened.emplace(take(open_checkpoint(*r->sched, specs, options)));
  }
  source->source = r->opened->shared_source();
  r->name = source->source->name();
  r->source = std::move(source);
  return r;
}

reader_handle& open_reader(reader_handle& r) {
  if (!r.source || !r.opened)
    raise_error(error{errc::invalid_argument, r.name + ": the reader is closed"});
  return r;
}

// Runs a blocking engine call; an exception escaping it (a broken invariant, bad_alloc) becomes an
// errc::io error naming the file instead of unwinding through Python.
template <class F>
auto guarded(const reader_handle& r, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (...) {
    return make_error(errc::io, r.name + ": " + describe_exception(std::current_exception()));
  }
}

// Module indices live only in the per-tensor headers (format/FORMAT.md §5.3): the loader's header
// pass reads them all in parallel.
std::vector<std::uint16_t> module_indices(reader_handle& r) {
  const auto& index = open_reader(r).opened->index();
  std::vector<std::uint16_t> out(index.tensors.size(), 0);
  if (r.opened->kind() != file_kind::tensorizer) return out;
  pyb::gil_scoped_release release;
  auto headers = take(guarded(r, [&] { return r.opened->read_headers(*r.sched); }));
  for (std::size_t i = 0; i < headers.size(); ++i) out[i] = headers[i].module_index;
  return out;
}

std::vector<std::size_t> checked_indices(const reader_handle& r, const std::optional<std::vector<std::size_t>>& which) {
  std::vector<std::size_t> out;
  if (!which) return out;
  const auto n = r.opened->index().tensors.size();
  for (auto i : *which)
    if (i >= n)
      raise_error(error{errc::invalid_argument,
                        r.name + ": tensor index " + std::to_string(i) + " out of range (the file has " +
                            std::to_string(n) + " tensors)"});
  return *which;
}


std::shared_ptr<loaded_handle> load_host(reader_handle& r, std::vector<std::size_t> which, const load_options& o,
                                         bool one) {
  auto h = std::make_shared<loaded_handle>();
  h->sched = r.sched;
  {
    pyb::gil_scoped_release release;
    h->host = std::make_shared<loaded_tensors>(take(guarded(r, [&] {
      return one ? run(*r.sched, r.opened->async_load_tensor(*r.sched, which.front(), o))
                 : r.opened->load(*r.sched, which, o);
    })));
  }
  for (std::size_t i = 0; i < h->host->size(); ++i) h->indices.push_back(h->host->index(i));
  return h;
}

std::shared_ptr<loaded_handle> load_device(reader_handle& r, std::vector<std::size_t> which, const load_options& common,
                                           int device) {
  device_load_options o;
  static_cast<load_common_options&>(o) = common;  // the ring keeps its defaults
  auto h = std::make_shared<loaded_handle>();
  h->sched = r.sched;
  pyb::gil_scoped_release release;
  // The process's context of that device, made by the first device load and reused by the rest.
  device_context* ctx = take(device_context::shared(device));
  h->device = std::make_shared<device_tensors>(
      take(guarded(r, [&] { return load_to_device(*r.sched, *ctx, *r.opened, which, o); })));
  for (std::size_t i = 0; i < h->device->size(); ++i) h->indices.push_back(h->device->index(i));
  return h;
}

// (model, signature, public key, certificate chain, model root): tensorizer.signing.ModelSignature.
using signature_args = std::tuple<std::string, std::string, std::string, std::string, std::string>;

// A signed load's check (signing/): the signature verified now, its observer set in `o`.
std::unique_ptr<signing::signed_load> check_signature(const reader_handle& r, const std::optional<signature_args>& s,
                                                      load_options& o) {
  if (!s) return nullptr;
  const auto& [model, sig, key, chain, root] = *s;
  auto who = take(signing::trust_from_files(key, chain));
  auto check = take(open_signed_load(*r.opened, model, root, sig, who));
  o.observe = check->observer();
  return check;
}

// One load; with a `trace` path its timeline is written there (also when the load failed); with a
// `signature`, nothing is returned unless the model matches it.
std::shared_ptr<loaded_handle> load(reader_handle& r, std::optional<std::vector<std::size_t>> which, bool verify,
                                    unsigned readers, std::shared_ptr<decryption_keys> keys, int device, bool one,
                                    const std::optional<std::string>& trace, const std::optional<signature_args>& signature) {
  open_reader(r);
  auto indices = checked_indices(r, which);
  load_options o;
  o.verify = verify;
  o.readers = readers;
  if (keys) o.decryption = keys->decryption;
  if (trace && !trace->empty()) o.trace = std::make_shared<load_trace>();
  auto signed_check = check_signature(r, signature, o);
  std::shared_ptr<loaded_handle> h;
  try {
    h = device < 0 ? load_host(r, std::move(indices), o, one) : load_device(r, std::move(indices), o, device);
  } catch (...) {
    if (o.trace) static_cast<void>(o.trace->write(*trace));  // the load's own error is the one raised
    throw;
  }
  if (o.trace) take(o.trace->write(*trace));
  if (signed_check) {
    pyb::gil_scoped_release release;  // the files beside the weights may still be hashing
    take(signed_check->finish());
  }
  return h;
}

}  // namespace

std::pair<std::shared_ptr<scheduler>, const loader*> reader_loader(pyb::handle reader) {
  auto& r = open_reader(reader.cast<reader_handle&>());
  return {r.sched, &*r.opened};
}

namespace {

// _C.Block and _C.Loaded: one load's memory and views of it.
void register_loaded(pyb::module_& m) {
  pyb::class_<block, std::shared_ptr<block>>(m, "Block", pyb::buffer_protocol(),
                                             "A writable byte view of one loaded tensor (keeps the load alive).")
      .def_buffer([](block& b) {
        return pyb::buffer_info(b.data, 1, pyb::format_descriptor<std::uint8_t>::format(), 1,
                                {static_cast<pyb::ssize_t>(b.size_bytes)}, {pyb::ssize_t{1}}, false);
      })
      .def("__len__", [](const block& b) { return b.size_bytes; });

  pyb::class_<loaded_handle, std::shared_ptr<loaded_handle>>(m, "Loaded", "The tensors of one load.")
      .def("__len__", [](const loaded_handle& h) { return h.indices.size(); })
      .def_property_readonly("indices", [](const loaded_handle& h) { return h.indices; })
      .def_property_readonly("device", [](const loaded_handle& h) { return h.device ? h.device->device() : -1; })
      .def_property_readonly("bytes",
                             [](const loaded_handle& h) { return h.host ? h.host->bytes() : h.device->data_bytes(); })
      .def_property_readonly("timings",
                             [](const loaded_handle& h) {
                               return timings_dict(h.host ? h.host->timings() : h.device->timings());
                             })
      .def(
          "buffer",
          [](const loaded_handle& h, std::size_t i) {
            if (!h.host) throw pyb::value_error("buffer(): this load is on a CUDA device; use dlpack()");
            if (i >= h.host->size()) throw pyb::index_error("buffer(): position out of range");
            auto span = h.host->data(i);
            return make_block(h.host, const_cast<std::byte*>(span.data()), span.size());
          },
          pyb::arg("i"))
      .def(
          "dlpack",
          [](const std::shared_ptr<loaded_handle>& h, std::size_t i, bool typed) -> pyb::object {
            if (!h->device) throw pyb::value_error("dlpack(): this load is in host memory; use buffer()");
            if (i >= h->device->size()) throw pyb::index_error("dlpack(): position out of range");
            if (typed) {
              // The tensor's own dtype and shape: the consumer needs no view and no reshape (a
              // tenth of the wrapping time per tensor). None where DLPack has no such dtype.
              auto t = h->device->to_dlpack(i);
              if (!t) return pyb::none();
              return dltensor_capsule(std::move(*t));
            }
            const std::int64_t n = static_cast<std::int64_t>(h->device->size_bytes(i));
            const std::int64_t shape[] = {n};
            auto t = take(cuda::to_dlpack_cuda(h->device->data(i), h->device->device(), DLDataType{kDLUInt, 8, 1},
                                               shape, std::shared_ptr<void>(h, h.get())));
            return dltensor_capsule(std::move(t));
          },
          pyb::arg("i"), pyb::arg("typed") = false,
          "Tensor i as a DLPack capsule: its bytes as flat uint8, or typed=True its dtype and shape "
          "(None when DLPack has no such dtype).");

}

// _C.Reader's opening and what it tells of the opened model.
using reader_class = pyb::class_<reader_handle, std::shared_ptr<reader_handle>>;

reader_class register_reader_class(pyb::module_& m) {
  return reader_class(m, "Reader", "An opened .tensors or safetensors file.")
      .def(pyb::init([](std::shared_ptr<source_handle> source) {
             auto r = std::make_shared<reader_handle>();
             r->sched = source->sched;
             r->name = source->source->name();
             pyb::gil_scoped_release release;
             r->opened.emplace(take(loader::open(*r->sched, source->source)));
             r->source = std::move(source);
             return r;
           }),
           pyb::arg("source"))
      .def_static("open_checkpoint", &open_checkpoint_reader, pyb::arg("specs"), pyb::kw_only(),
                  pyb::arg("direct") = false,
                  "Opens a model given as paths or URIs (tz::open_checkpoint): one file, a sharded safetensors"
                  " checkpoint's index, a directory, an http(s)/s3 prefix ending in '/', or several safetensors"
                  " files (remote options as keywords). Every shard's tensors load in one pipeline.")
      .def_property_readonly(
          "shards",
          [](reader_handle& r) {
            pyb::list out;
            for (const auto& s : open_reader(r).opened->shards()) {
              pyb::dict d;
              d["name"] = s.name;
              d["source"] = s.source_name;
              d["first"] = s.first_tensor;
              d["tensors"] = s.tensor_count;
              d["bytes"] = s.bytes;
              out.append(d);
            }
            return out;
          },
          "The shards of a sharded checkpoint, in order (name, source, first entry, tensor count, bytes); [] for one file.")
      .def_property_readonly("name", [](const reader_handle& r) { return r.name; })
      .def_property_readonly("kind",
                             [](reader_handle& r) {
                               return open_reader(r).opened->kind() == file_kind::tensorizer ? "tensorizer" : "safetensors";
                             })
      .def_property_readonly("version", [](reader_handle& r) { return open_reader(r).opened->index().header.version; })
      .def_property_readonly("encrypted", [](reader_handle& r) { return open_reader(r).opened->index().header.has_crypt_info(); })
      .def_property_readonly("file_bytes",
                             [](reader_handle& r) { return open_reader(r).opened->index().header.tensor_size; })
      .def_property_readonly("open_seconds", [](reader_handle& r) { return open_reader(r).opened->open_seconds(); })
      .def_property_readonly(
          "entries",
          [](reader_handle& r) {
            const auto& index = open_reader(r).opened->index();
            pyb::list out(index.tensors.size());
            for (std::size_t i = 0; i < index.tensors.size(); ++i) out[i] = pyb::cast(entry_info{index.tensors[i], i});
            return out;
          });
}

// _C.Reader's loads.
void add_reader_loads(reader_class& c) {
  c.def("module_indices", &module_indices,
        "Each tensor's module index, from its header (one small read per tensor; 0 for safetensors).")
      .def(
          "load",
          [](reader_handle& r, std::optional<std::vector<std::size_t>> which, bool verify, unsigned readers,
             std::shared_ptr<decryption_keys> decryption, int device, std::optional<std::string> trace,
             std::optional<signature_args> signature) {
            return load(r, std::move(which), verify, readers, std::move(decryption), device, false, trace, signature);
          },
          pyb::arg("indices") = pyb::none(), pyb::kw_only(), pyb::arg("verify") = false, pyb::arg("readers") = 0u,
          pyb::arg("decryption") = pyb::none(), pyb::arg("device") = -1, pyb::arg("trace") = pyb::none(),
          pyb::arg("signature") = pyb::none(),
          "Loads the tensors at `indices` (None: all) into host memory or onto CUDA device `device`; "
          "`trace`: a path where the load's timeline is written as Chrome trace-event JSON; `signature`: "
          "(model, signature, public key, certificate chain, model root) checked in the load's pass.")
      .def(
          "load_one",
          [](reader_handle& r, std::size_t index, bool verify, std::shared_ptr<decryption_keys> decryption, int device,
             std::optional<std::string> trace, std::optional<signature_args> signature) {
            return load(r, std::vector<std::size_t>{index}, verify, 0, std::move(decryption), device, device < 0, trace,
                        signature);
          },
          pyb::arg("index"), pyb::kw_only(), pyb::arg("verify") = false, pyb::arg("decryption") = pyb::none(),
          pyb::arg("device") = -1, pyb::arg("trace") = pyb::none(), pyb::arg("signature") = pyb::none())
      .def("close",
           [](reader_handle& r) {
             r.opened.reset();
             r.source.reset();
           })
      .def_property_readonly("closed", [](const reader_handle& r) { return !r.source; })
      .def("__repr__", [](const reader_handle& r) { return "<tensorizer._C.Reader " + r.name + ">"; });
}

}  // namespace

void register_reader(pyb::module_& m) {
  register_entry(m);
  register_loaded(m);
  auto reader = register_reader_class(m);
  add_reader_loads(reader);
}

}  // namespace tz::py
