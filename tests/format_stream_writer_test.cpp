// format/ tests: the writer into a caller's stream (tensor_writer::create(sink)). It must leave the
// same bytes as the atomic path writer, hold a complete file after every write (so a caller that
// closes its stream without closing the writer loses nothing), and report a failing stream.
#include "format_test_util.hpp"
#include "tz/format/writer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

using namespace tz;
using namespace tz::format;

namespace {

// A stream in memory: the bytes a caller's file object would hold. Fails the write numbered
// `fail_at` (0: never), as a full disk or a closed socket would.
struct memory_stream {
  std::vector<std::byte> bytes;
  int writes = 0;
  int fail_at = 0;
};

class memory_sink final : public write_sink {
 public:
  explicit memory_sink(memory_stream& s) : s_(s) {}
  result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) override {
    if (++s_.writes == s_.fail_at) return make_error(errc::io, "memory stream: injected failure");
    if (s_.bytes.size() < offset + bytes.size()) s_.bytes.resize(offset + bytes.size());
    std::copy(bytes.begin(), bytes.end(), s_.bytes.begin() + static_cast<std::ptrdiff_t>(offset));
    return {};
  }

 private:
  memory_stream& s_;
};

std::vector<tensor_write> sample_tensors(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  return {{plain_path("a"), tensor_type::param, 0, *parse_dtype("<f4"), {2}, a, false},
          {plain_path("b"), tensor_type::buffer, 1, *dtype_from_torch("bfloat16"), {4}, a, false},
          {plain_path("m"), tensor_type::param, 1, *parse_dtype("<f4"), {3}, {}, true},
          {plain_path("c"), tensor_type::state_dict, 2, *parse_dtype("<i2"), {3}, b, false}};
}

// Opens the stream's bytes as a file and reads every tensor's data back.
file_index parse_complete(const std::vector<std::byte>& bytes) {
  auto r = file_reader::open(read_at_fn([&bytes](std::uint64_t off, std::span<std::byte> dst) -> result<void> {
                               if (off + dst.size() > bytes.size()) return make_error(errc::format, "past the end");
                               if (!dst.empty()) std::memcpy(dst.data(), bytes.data() + off, dst.size());
                               return {};
                             }),
                             bytes.size(), "stream");
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
    std::vector<std::byte> data(r->index().tensors[i].data_length);
    CHECK(r->read_header(i));
    CHECK(r->read_data(i, data));
  }
  return r->index();
}

}  // namespace

TEST_CASE("stream writer: the same bytes as the path writer, and a complete file after every write") {
  tz_test::temp_dir tmp;
  const std::vector<std::byte> a(8, std::byte{1}), b(6, std::byte{2});
  const auto tensors = sample_tensors(a, b);
  const auto path = (tmp.path / "ref.tensors").string();
  {
    auto w = tensor_writer::create(path);
    REQUIRE(w);
    for (const auto& t : tensors) REQUIRE(w->write(t));
    REQUIRE(w->close());
  }
  memory_stream stream;
  auto w = tensor_writer::create(std::make_unique<memory_sink>(stream), "memory stream");
  REQUIRE(w);
  CHECK(stream.bytes.size() == w->size());  // header, empty index and end marker from the start
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    REQUIRE(w->write(tensors[i]));
    CHECK(stream.bytes.size() == w->size());
    const auto index = parse_complete(stream.bytes);  // what a caller closing the stream now keeps
    REQUIRE(index.tensors.size() == i + 1);
    CHECK(index.header.tensor_count == i + 1);
    CHECK(index.header.version == w->version());
  }
  REQUIRE(w->close());
  CHECK(stream.bytes == tz_test::read_file(path));
}

TEST_CASE("stream writer: a failing stream is reported, naming it") {
  const std::vector<std::byte> a(8, std::byte{1}), b(6, std::byte{2});
  const auto tensors = sample_tensors(a, b);
  memory_stream stream;
  stream.fail_at = 6;  // 3 writes to begin (index, end marker, header), then inside the first tensor
  auto w = tensor_writer::create(std::make_unique<memory_sink>(stream), "memory stream");
  REQUIRE(w);
  auto first = w->write(tensors[0]);
  REQUIRE_FALSE(first);
  CHECK(tz_test::says(first.error(), "memory stream: injected failure"));
  memory_stream at_start;
  at_start.fail_at = 1;
  auto none = tensor_writer::create(std::make_unique<memory_sink>(at_start), "memory stream");
  REQUIRE_FALSE(none);
  CHECK(tz_test::says(none.error(), "injected failure"));
}
