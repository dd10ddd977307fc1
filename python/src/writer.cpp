// _C.Writer: tensorizer-identical .tensors files to a local path (atomic), S3 or Redis, or into a
// caller's stream (a file descriptor or a Python file object) as the tensors are written.
#include "keys.hpp"
#include "source.hpp"

#include "tz/format/dtype.hpp"
#include "tz/format/tensor_path.hpp"
#include "tz/format/writer.hpp"
#include "tz/backends/uri.hpp"
#include "tz/base/posix_io.hpp"

#include <pybind11/stl.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tz::py {

namespace {

// A regular file the caller opened: positional writes through a duplicate of its descriptor, so a
// caller that closes its file object first leaves the writer writing into the same file (never
// into whatever file reuses the number).
class fd_sink final : public format::write_sink {
 public:
  fd_sink(unique_fd fd, std::uint64_t base, std::string name) : fd_(std::move(fd)), base_(base), name_(std::move(name)) {}
  result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) override {
    return pwrite_full(fd_.get(), bytes, base_ + offset, name_);
  }

 private:
  unique_fd fd_;
  std::uint64_t base_;
  std::string name_;
};

// Any other seekable Python file object (io.BytesIO, a wrapper): seek and write under the GIL.
class pyfile_sink final : public format::write_sink {
 public:
  pyfile_sink(pyb::object file, std::uint64_t base, std::string name)
      : file_(std::move(file)), base_(base), name_(std::move(name)) {}
  ~pyfile_sink() override {
    pyb::gil_scoped_acquire gil;  // the writer may be destroyed with the GIL released
    file_ = pyb::object();
  }
  result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) override {
    pyb::gil_scoped_acquire gil;
    try {
      file_.attr("seek")(base_ + offset);
      std::size_t done = 0;
      while (done < bytes.size()) {
        auto view = pyb::memoryview::from_memory(bytes.data() + done, static_cast<pyb::ssize_t>(bytes.size() - done));
        auto wrote = file_.attr("write")(view);
        // A raw stream returns the count it took (None: it would block); a buffered one takes all.
        const auto n = wrote.is_none() ? 0 : pyb::cast<std::size_t>(wrote);
        if (n == 0) return make_error(errc::io, name_ + ": write at offset " + std::to_string(base_ + offset + done) + " took no bytes");
        done += n;
      }
      return {};
    } catch (pyb::error_already_set& e) {
      return make_error(errc::io, name_ + ": write at offset " + std::to_string(base_ + offset) + ": " + e.what());
    }
  }

 private:
  pyb::object file_;
  std::uint64_t base_;
  std::string name_;
};

struct writer_handle {
  std::shared_ptr<scheduler> sched;
  std::string spec;
  std::optional<tz::output_target> target;
  std::unique_ptr<format::tensorizer_encryptor> encryptor;  // outlives writer (it points here)
  std::optional<format::tensor_writer> writer;
  std::uint64_t tensor_bytes = 0;
  std::uint64_t size = 0;  // the file's bytes so far (what close() leaves)
  std::uint32_t version = 0;
  bool closed = false;
};

format::tensor_path path_from_python(const pyb::handle& name) {
  if (pyb::isinstance<pyb::str>(name)) return format::plain_path(pyb::cast<std::string>(name));
  if (!pyb::isinstance<pyb::tuple>(name) && !pyb::isinstance<pyb::list>(name))
    throw pyb::type_error("a tensor name must be a str or a tuple of str and int");
  format::tensor_path p;
  for (auto part : name) {
    if (pyb::isinstance<pyb::bool_>(part)) throw pyb::type_error("a tensor path component must be a str or an int, not bool");
    if (pyb::isinstance<pyb::str>(part)) {
      p.parts.emplace_back(pyb::cast<std::string>(part));
    } else if (pyb::isinstance<pyb::int_>(part)) {
      auto v = pyb::cast<long long>(part);
      if (v < 0) throw pyb::value_error("a tensor path index must be non-negative, got " + std::to_string(v));
      p.parts.emplace_back(static_cast<std::uint64_t>(v));
    } else {
      throw pyb::type_error("a tensor path component must be a str or an int");
    }
  }
  if (p.parts.empty()) throw pyb::value_error("a tensor path must not be empty");
  return p;
}

writer_handle& live(writer_handle& w) {
  if (w.closed || !w.writer) raise_error(error{errc::invalid_argument, w.spec + ": the writer is closed"});
  return w;
}

std::shared_ptr<writer_handle> create(const std::string& spec, std::shared_ptr<encryption_keys> encryption,
                                      const pyb::kwargs& kw) {
  auto options = remote_options_from(kw);
  auto w = std::make_shared<writer_handle>();
  w->sched = shared_scheduler();
  w->spec = spec;
  if (encryption) w->encryptor = encryption->make_encryptor();
  pyb::gil_scoped_release release;
  if (!is_remote_uri(spec)) {
    // tensorizer creates missing parent directories for local outputs (open_stream "wb+").
    std::error_code ec;
    const auto parent = std::filesystem::path(spec).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  w->target.emplace(take(tz::output_target::create(spec, options)));
  w->writer.emplace(take(format::tensor_writer::create(w->target->path(), {.encryptor = w->encryptor.get()})));
  w->version = w->writer->version();
  return w;
}

// A writer into the caller's stream at `offset`: an int is a regular file's descriptor (duplicated),
// anything else a seekable Python file object.
std::shared_ptr<writer_handle> create_for_stream(const pyb::object& target, std::uint64_t offset,
                                                 std::shared_ptr<encryption_keys> encryption, const std::string& name) {
  auto w = std::make_shared<writer_handle>();
  w->sched = shared_scheduler();
  w->spec = name;
  if (encryption) w->encryptor = encryption->make_encryptor();
  std::unique_ptr<format::write_sink> sink;
  if (pyb::isinstance<pyb::int_>(target)) {
    unique_fd fd(::fcntl(pyb::cast<int>(target), F_DUPFD_CLOEXEC, 0));
    if (!fd) raise_error(os_error(errno, name + ": cannot duplicate its file descriptor"));
    sink = std::make_unique<fd_sink>(std::move(fd), offset, name);
  } else {
    sink = std::make_unique<pyfile_sink>(target, offset, name);
  }
  pyb::gil_scoped_release release;  // a Python sink takes the GIL back for its writes
  w->writer.emplace(take(format::tensor_writer::create(std::move(sink), name, {.encryptor = w->encryptor.get()})));
  w->version = w->writer->version();
  w->size = w->writer->size();
  return w;
}

void write(writer_handle& w, int module_idx, const pyb::handle& name, int type, const std::string& torch_dtype,
           const std::vector<std::uint64_t>& shape, const pyb::buffer& data, bool meta) {
  live(w);
  if (module_idx < 0 || module_idx > 0xFFFF) throw pyb::value_error("module index must be 0..65535");
  if (type < 0 || type > 2) throw pyb::value_error("tensor type must be 0 (PARAM), 1 (BUFFER) or 2 (STATE_DICT)");
  auto path = path_from_python(name);
  auto dtype = take(format::dtype_from_torch(torch_dtype));
  auto info = data.request();
  const std::size_t n = static_cast<std::size_t>(info.size * info.itemsize);
  if (info.ndim > 1 || (info.ndim == 1 && !info.strides.empty() && info.strides[0] != info.itemsize))
    throw pyb::value_error("tensor data must be a contiguous bytes-like object");
  std::uint64_t count = 1;
  for (auto d : shape) count *= d;
  const std::uint64_t want = meta ? 0 : count * dtype.itemsize;
  if (n != want)
    raise_error(error{errc::invalid_argument, w.spec + ": tensor '" + format::display_name(path) + "': data is " +
                                                  std::to_string(n) + " bytes, expected " + std::to_string(want) +
                                                  " for " + torch_dtype + " of " + std::to_string(count) + " elements"});
  format::tensor_write t{std::move(path), static_cast<format::tensor_type>(type), static_cast<std::uint16_t>(module_idx),
                         std::move(dtype), shape,
                         std::span<const std::byte>(static_cast<const std::byte*>(info.ptr), n), meta};
  pyb::gil_scoped_release release;
  take(w.writer->write(t));
  w.tensor_bytes += n;
  w.version = w.writer->version();
  w.size = w.writer->size();
}

void close(writer_handle& w) {
  if (w.closed) return;
  pyb::gil_scoped_release release;
  w.closed = true;
  auto c = w.writer->close();
  w.writer.reset();
  w.encryptor.reset();
  if (!c) {
    w.target.reset();
    raise_error(c.error());
  }
  if (!w.target) return;  // a stream: its owner closes it
  auto p = w.target->publish(*w.sched);
  w.target.reset();
  take(std::move(p));
}

void abort(writer_handle& w) {
  w.closed = true;
  pyb::gil_scoped_release release;  // a Python sink's destructor takes the GIL itself
  w.writer.reset();  // an unclosed writer removes its temporary file (a stream keeps what it holds)
  w.encryptor.reset();
  w.target.reset();  // and the remote target's staging file
}

}  // namespace

void register_writer(pyb::module_& m) {
  pyb::class_<writer_handle, std::shared_ptr<writer_handle>>(m, "Writer", "Writes a .tensors file (atomically).")
      .def(pyb::init(&create), pyb::arg("spec"), pyb::kw_only(), pyb::arg("encryption") = pyb::none())
      .def_static("for_stream", &create_for_stream, pyb::arg("target"), pyb::arg("offset") = 0, pyb::kw_only(),
                  pyb::arg("encryption") = pyb::none(), pyb::arg("name") = "stream",
                  "A writer into a caller's stream at `offset` (an int: a regular file's descriptor, which is "
                  "duplicated; else a seekable file object), complete after every write.")
      .def("write", &write, pyb::arg("module_idx"), pyb::arg("name"), pyb::arg("type"), pyb::arg("torch_dtype"),
           pyb::arg("shape"), pyb::arg("data"), pyb::arg("meta") = false)
      .def("close", &close)
      .def("abort", &abort)
      .def_property_readonly("closed", [](const writer_handle& w) { return w.closed; })
      .def_property_readonly("total_tensor_bytes", [](const writer_handle& w) { return w.tensor_bytes; })
      .def_property_readonly("version", [](const writer_handle& w) { return w.version; })
      .def_property_readonly("size", [](const writer_handle& w) { return w.size; })
      .def("__repr__", [](const writer_handle& w) { return "<tensorizer._C.Writer " + w.spec + ">"; });

  m.def(
      "upload_file",
      [](const std::string& local_path, const std::string& uri, const pyb::kwargs& kw) {
        auto options = remote_options_from(kw);
        auto sched = shared_scheduler();
        pyb::gil_scoped_release release;
        auto target = take(tz::output_target::create(uri, options));
        std::error_code ec;
        std::filesystem::copy_file(local_path, target.path(), std::filesystem::copy_options::overwrite_existing, ec);
        if (ec) raise_error(error{errc::io, "upload " + local_path + " to " + uri + ": " + ec.message()});
        take(target.publish(*sched));
      },
      pyb::arg("local_path"), pyb::arg("uri"),
      "Uploads a local file to s3://bucket/key (PutObject or multipart, aborted on failure) or a local path.");
}

}  // namespace tz::py
