// Partial loads: partitions cover every byte once and balance by bytes; each rank's parts load
// bit-identical to a whole load (plain, encrypted, safetensors); slices equal torch.chunk's cut.
#include "tz/backends/memory_source.hpp"
#include "tz/engine/partial_load.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"

#include "pattern_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

namespace {

using tz_test::make_file;
using tz_test::pattern;

// Loads rank r's parts of `plan` into a flat buffer at their flat offsets; returns bytes read.
std::uint64_t load_share(tz::scheduler& sched, const tz::loader& l, const tz::partition_plan& plan, unsigned r,
                         std::vector<std::byte>& flat, const tz::extent_options& o) {
  std::vector<tz::tensor_extent> extents;
  for (const auto& part : plan.parts[r]) {
    const auto pos = std::find(plan.tensors.begin(), plan.tensors.end(), part.index) - plan.tensors.begin();
    extents.push_back({part, std::span(flat).subspan(plan.flat_offset[pos] + part.data_begin_bytes, part.length_bytes)});
  }
  auto got = tz::load_extents(sched, l, extents, o);
  REQUIRE_MESSAGE(got.has_value(), (got ? "" : got.error().message));
  return got->read_bytes;
}

}  // namespace

TEST_CASE("chunk_bounds cuts as torch.chunk: parts of ceil(n / k), the last shorter or empty") {
  using b = std::pair<std::uint64_t, std::uint64_t>;
  CHECK(tz::chunk_bounds(10, 4, 0) == b{0, 3});
  CHECK(tz::chunk_bounds(10, 4, 3) == b{9, 10});
  CHECK(tz::chunk_bounds(8, 2, 1) == b{4, 8});
  CHECK(tz::chunk_bounds(5, 4, 2) == b{4, 5});
  CHECK(tz::chunk_bounds(5, 4, 3) == b{5, 5});
}

TEST_CASE("a partition covers every data byte once, in shares within one alignment unit of equal") {
  auto bytes = make_file({{3 << 20}, {1000}, {0}, {5 << 20}, {7}, {100000}});
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::uint64_t total = 0;
  for (const auto& e : l.index().tensors) total += e.deserialized_bytes;
  for (unsigned world : {1u, 2u, 3u, 4u}) {
    CAPTURE(world);
    auto plan = tz::plan_partition(l.index(), {}, world).value();
    REQUIRE(plan.begin.size() == world + 1);
    CHECK(plan.begin[world] == total);
    for (unsigned r = 0; r < world; ++r) {
      const std::uint64_t share = plan.begin[r + 1] - plan.begin[r];
      CHECK(share + 4096 >= total / world);
      CHECK(share <= total / world + 4096 + 1);
    }
    // Every rank loads its share; the shares together are the whole load.
    std::vector<std::byte> flat(total);
    std::vector<std::byte> expect;
    for (std::size_t i = 0; i < l.index().tensors.size(); ++i)
      for (std::size_t k = 0; k < l.index().tensors[i].deserialized_bytes; ++k) expect.push_back(pattern(i, k));
    for (unsigned r = 0; r < world; ++r) {
      const std::uint64_t read = load_share(sched, l, plan, r, flat, {});
      const std::uint64_t share = plan.begin[r + 1] - plan.begin[r];
      CHECK(read >= share);
      CHECK(read <= share + 4 * 1024 + 64 * 1024);  // tensor headers and gaps merged through
    }
    CHECK(flat == expect);
  }
  auto whole = tz::plan_partition(l.index(), {}, 4, {.whole_tensors = true}).value();
  for (unsigned r = 0; r < 4; ++r)
    for (const auto& p : whole.parts[r]) CHECK(p.whole(l.index().tensors[p.index]));
}

TEST_CASE("an encrypted file's shares, cut at cipher chunks, load decrypted and equal the plain bytes") {
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  auto bytes = make_file({{(5u << 20) + 12}, {1000}, {(2u << 20) + 1}, {(9u << 20) + 3}}, &enc);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::uint64_t total = 0;
  std::vector<std::byte> expect;
  for (std::size_t i = 0; i < l.index().tensors.size(); ++i) {
    total += l.index().tensors[i].deserialized_bytes;
    for (std::size_t k = 0; k < l.index().tensors[i].deserialized_bytes; ++k) expect.push_back(pattern(i, k));
  }
  tz::extent_options o;
  o.decryption = tz::format::decryption::from_key(std::move(key));
  for (unsigned world : {2u, 4u}) {
    CAPTURE(world);
    for (std::uint64_t align : {std::uint64_t{4096}, std::uint64_t{2} << 20}) {
      CAPTURE(align);
      auto plan = tz::plan_partition(l.index(), {}, world, {.align_bytes = align}).value();
      std::vector<std::byte> flat(total);
      std::uint64_t read = 0;
      for (unsigned r = 0; r < world; ++r) read += load_share(sched, l, plan, r, flat, o);
      CHECK(flat == expect);
      // Cuts on chunk multiples: no chunk is read twice (4 KiB cuts read a shared chunk twice).
      if (align == (2u << 20)) CHECK(read <= bytes.size());
    }
  }
  // A partial read cannot be checked against the whole tensor's hash.
  std::vector<std::byte> some(100);
  o.verify = true;
  auto bad = tz::load_extents(sched, l, {{{0, 10, 100}, some}}, o);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == tz::errc::unsupported);
  CHECK(bad.error().message.find("cannot verify a partial read") != std::string::npos);
}

TEST_CASE("slices of rows, columns, 1-d and 3-d tensors with uneven sizes equal the chunk of the whole") {
  const std::vector<std::vector<std::uint64_t>> shapes = {{37, 1000}, {1001}, {5, 7, 3000}, {3000, 3}};
  auto bytes = make_file(shapes);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    for (unsigned dim = 0; dim < shapes[t].size(); ++dim) {
      for (unsigned world : {2u, 3u, 4u}) {
        for (unsigned rank = 0; rank < world; ++rank) {
          CAPTURE(t);
          CAPTURE(dim);
          CAPTURE(world);
          CAPTURE(rank);
          auto [start, stop] = tz::chunk_bounds(shapes[t][dim], world, rank);
          auto stretches = tz::plan_slice(l.index(), t, dim, start, stop).value();
          std::uint64_t outer = 1, inner = 1;
          for (unsigned d = 0; d < dim; ++d) outer *= shapes[t][d];
          for (std::size_t d = dim + 1; d < shapes[t].size(); ++d) inner *= shapes[t][d];
          std::vector<std::byte> got(outer * (stop - start) * inner), expect;
          for (std::uint64_t o = 0; o < outer; ++o)
            for (std::uint64_t k = start * inner; k < stop * inner; ++k) expect.push_back(pattern(t, o * shapes[t][dim] * inner + k));
          for (std::uint64_t gap : {std::uint64_t{0}, std::uint64_t{64} << 10}) {
            std::fill(got.begin(), got.end(), std::byte{0xee});
            std::vector<tz::tensor_extent> extents;
            for (const auto& s : stretches)
              extents.push_back({s.part, std::span(got).subspan(s.out_offset_bytes, s.part.length_bytes)});
            tz::extent_options o;
            o.gap_merge_bytes = gap;
            auto r = tz::load_extents(sched, l, extents, o);
            REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
            CHECK(got == expect);
            if (gap == 0 && !extents.empty() && !extents.front().part.whole(l.index().tensors[t]))
              CHECK(r->read_bytes == got.size());
          }
        }
      }
    }
  }
  CHECK_FALSE(tz::plan_slice(l.index(), 0, 2, 0, 1).has_value());
  CHECK_FALSE(tz::plan_slice(l.index(), 0, 0, 5, 40).has_value());
}

TEST_CASE("more ranks than bytes to share: the extra shares are empty and the rest still covers every byte") {
  auto bytes = make_file({{10}, {0}, {3}});
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::vector<std::byte> expect;
  for (std::size_t i = 0; i < l.index().tensors.size(); ++i)
    for (std::size_t k = 0; k < l.index().tensors[i].deserialized_bytes; ++k) expect.push_back(pattern(i, k));
  for (unsigned world : {4u, 8u}) {
    CAPTURE(world);
    auto plan = tz::plan_partition(l.index(), {}, world).value();
    std::vector<std::byte> flat(expect.size());
    unsigned empty = 0;
    for (unsigned r = 0; r < world; ++r) {
      empty += plan.parts[r].empty();
      load_share(sched, l, plan, r, flat, {});
    }
    CHECK(empty >= world - 2);
    CHECK(flat == expect);
  }
  CHECK_FALSE(tz::plan_partition(l.index(), {}, 0).has_value());
}
