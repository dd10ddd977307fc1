// Extents onto a device (load_extents_to_device) on the CUDA emulation: a rank's share of a
// partition, and tensor-parallel slices, land in caller device memory through the bounded pinned
// ring, bytes exact (plain, encrypted, verified), with no pinned memory beyond the ring however
// large the share; faults mid-share (a read, a copy) fail the load with nothing left in flight.
#include "emulation_case.hpp"
#include "pattern_model.hpp"

#include "tz/engine/partial_load.hpp"

#include <algorithm>

using namespace emu_test;
using tz_test::make_file;
using tz_test::pattern;

namespace {

// Every tensor's bytes back to back in file order (a partition's flat layout).
std::vector<std::byte> flat_expect(const tz::loader& l) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < l.index().tensors.size(); ++i)
    for (std::size_t k = 0; k < l.index().tensors[i].deserialized_bytes; ++k) out.push_back(pattern(i, k));
  return out;
}

// Rank r's parts of `plan` at their flat offsets of `region`.
std::vector<tz::device_extent> share_of(const tz::partition_plan& plan, unsigned r) {
  std::vector<tz::device_extent> out;
  for (const auto& part : plan.parts[r]) {
    const auto pos = std::find(plan.tensors.begin(), plan.tensors.end(), part.index) - plan.tensors.begin();
    out.push_back({part, plan.flat_offset[pos] + part.data_begin_bytes});
  }
  return out;
}

tz::device_region region_of(const tz::cuda::device_buffer& b) { return {b.data(), b.size_bytes(), b.device()}; }

std::vector<std::byte> download_all(const tz::cuda::device_buffer& b) {
  std::vector<std::byte> out(b.size_bytes());
  REQUIRE(tz::cuda::download(b, 0, out).has_value());
  return out;
}

// Loads every rank's share of `world` into one device buffer (as the ranks' shares together make
// the flat model); checks each share stayed within its ring; returns the buffer's bytes.
std::vector<std::byte> load_all_shares(tz::scheduler& sched, tz::device_context& ctx, const tz::loader& l, unsigned world,
                                       std::uint64_t align, const tz::device_extent_options& o, bool whole = false) {
  auto plan = tz::plan_partition(l.index(), {}, world, {.whole_tensors = whole, .align_bytes = align}).value();
  auto flat = tz::cuda::alloc_device(0, plan.begin[world]).value();
  for (unsigned r = 0; r < world; ++r) {
    auto got = tz::load_extents_to_device(sched, ctx, l, share_of(plan, r), region_of(flat), o);
    REQUIRE(ok(got));
    CHECK(got->data_bytes == plan.begin[r + 1] - plan.begin[r]);
    // The ring: its slots, each a page longer (a read lands at its file offset modulo a page).
    CHECK(got->ring_bytes == o.slots(l.source()) * (o.slot_bytes + tz::page_bytes));
    CHECK(got->pinned_bytes_max <= got->ring_bytes);
  }
  return download_all(flat);
}

}  // namespace

TEST_CASE("a share 4x the ring lands in device memory exact, holding no pinned memory beyond the ring") {
  emulation_case scope;
  {
    auto bytes = make_file({{(3u << 20) + 7}, {1000}, {0}, {(1u << 20) + 5}, {7}, {100000}});
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "mem-share")).value();
    const auto expect = flat_expect(l);
    tz::device_extent_options o;
    o.slot_count = 4;
    o.slot_bytes = 256 * kib;  // a 1 MiB ring for a 4.1 MiB model
    REQUIRE(expect.size() >= 4 * o.slot_count * o.slot_bytes);
    const auto before = emu::snapshot();
    for (unsigned world : {1u, 2u, 3u}) {
      CAPTURE(world);
      CHECK(load_all_shares(sched, *ctx, l, world, 4096, o) == expect);
    }
    // Every copy came from the ring's pinned slots, pinned once and reused by each share.
    CHECK(emu::snapshot().pageable_copies == before.pageable_copies);
    CHECK(ctx->pinned_bytes() == o.slot_count * (o.slot_bytes + tz::page_bytes));
    CHECK(emu::snapshot().registrations == before.registrations + o.slot_count);
  }
  check_nothing_alive();
}

TEST_CASE("encrypted shares cut at cipher chunks, and verified whole-tensor shares, land exact; a bad byte fails naming the tensor") {
  emulation_case scope;
  {
    auto key = tz::crypto::secret_key::random().value();
    auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
    auto bytes = make_file({{(5u << 20) + 12}, {1000}, {(2u << 20) + 1}, {(9u << 20) + 3}}, &enc);
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "mem-sealed")).value();
    tz::device_extent_options o;
    o.slot_count = 3;
    o.slot_bytes = (2u << 20) + 4 * kib;  // one 2 MiB cipher chunk per slot
    o.decryption = tz::format::decryption::from_key(std::move(key));
    for (unsigned world : {1u, 2u, 4u}) {
      CAPTURE(world);
      CHECK(load_all_shares(sched, *ctx, l, world, 2u << 20, o) == flat_expect(l));
    }
    o.verify = true;  // verified: every tensor whole on one rank, its hash checked in the ring
    CHECK(load_all_shares(sched, *ctx, l, 2, 2u << 20, o, true) == flat_expect(l));
  }
  {
    auto bytes = make_file({{300000}, {5000}, {(1u << 20) + 9}});
    const auto& t2 = bytes;  // flip one data byte of the last tensor
    auto bad = t2;
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto good = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
    bad[good.index().tensors[2].data_offset + 12345] ^= std::byte{1};
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bad, "mem-flipped")).value();
    auto plan = tz::plan_partition(l.index(), {}, 2, {.whole_tensors = true}).value();
    auto flat = tz::cuda::alloc_device(0, plan.begin[2]).value();
    tz::device_extent_options o;
    o.slot_count = 4;
    o.slot_bytes = 256 * kib;
    o.verify = true;
    std::string failed;
    for (unsigned r = 0; r < 2; ++r)
      if (auto got = tz::load_extents_to_device(sched, *ctx, l, share_of(plan, r), region_of(flat), o); !got) {
        CHECK(got.error().code == tz::errc::hash_mismatch);
        failed = got.error().message;
      }
    CHECK(failed.find("t2") != std::string::npos);
    CHECK(failed.find("mem-flipped") != std::string::npos);
  }
  check_nothing_alive();
}

TEST_CASE("column slices onto the device equal the host extent load") {
  emulation_case scope;
  {
    const std::vector<std::vector<std::uint64_t>> shapes{{96, 1000}, {4, 3, 70000}};
    auto bytes = make_file(shapes);
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "mem-slices")).value();
    tz::device_extent_options o;
    o.slot_count = 4;
    o.slot_bytes = 64 * kib;
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      const unsigned dim = static_cast<unsigned>(shapes[t].size() - 1);
      const auto [start, stop] = tz::chunk_bounds(shapes[t][dim], 3, 1);
      auto stretches = tz::plan_slice(l.index(), t, dim, start, stop).value();
      std::uint64_t n = 0;
      for (const auto& s : stretches) n = std::max(n, s.out_offset_bytes + s.part.length_bytes);
      std::vector<std::byte> host(n);
      std::vector<tz::tensor_extent> on_host;
      std::vector<tz::device_extent> on_device;
      for (const auto& s : stretches) {
        on_host.push_back({s.part, std::span(host).subspan(s.out_offset_bytes, s.part.length_bytes)});
        on_device.push_back({s.part, s.out_offset_bytes});
      }
      REQUIRE(ok(tz::load_extents(sched, l, on_host)));
      auto dev = tz::cuda::alloc_device(0, n).value();
      auto got = tz::load_extents_to_device(sched, *ctx, l, on_device, region_of(dev), o);
      REQUIRE(ok(got));
      CHECK(download_all(dev) == host);
    }
  }
  check_nothing_alive();
}

TEST_CASE("a read failing or a copy failing mid-share fails the load with nothing in flight") {
  auto bytes = make_file({{(2u << 20) + 3}, {(1u << 20) + 1}});
  SUBCASE("a read fails") {
    emulation_case scope;
    {
      tz::scheduler sched(2);
      auto ctx = tz::device_context::create(0).value();
      auto src = std::make_shared<tz::memory_source>(bytes, "mem-faulty");
      auto l = tz::loader::open(sched, src).value();
      src->inject({.offset_bytes = l.index().tensors[1].data_offset + 100, .what = tz::injected_fault::kind::hard, .times = 0});
      auto plan = tz::plan_partition(l.index(), {}, 1, {}).value();
      auto flat = tz::cuda::alloc_device(0, plan.begin[1]).value();
      tz::device_extent_options o;
      o.slot_count = 4;
      o.slot_bytes = 128 * kib;
      auto got = tz::load_extents_to_device(sched, *ctx, l, share_of(plan, 0), region_of(flat), o);
      REQUIRE_FALSE(got.has_value());
      CHECK(got.error().code == tz::errc::io);
      CHECK(got.error().message.find("mem-faulty") != std::string::npos);
    }
    check_nothing_alive();
  }
  SUBCASE("the fourth copy fails") {
    emulation_case scope;
    {
      tz::scheduler sched(2);
      auto ctx = tz::device_context::create(0).value();
      auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
      auto plan = tz::plan_partition(l.index(), {}, 1, {}).value();
      auto flat = tz::cuda::alloc_device(0, plan.begin[1]).value();
      tz::device_extent_options o;
      o.slot_count = 4;
      o.slot_bytes = 128 * kib;
      emu::fail_copy(4);
      auto got = tz::load_extents_to_device(sched, *ctx, l, share_of(plan, 0), region_of(flat), o);
      REQUIRE_FALSE(got.has_value());
      CHECK(got.error().code == tz::errc::cuda);
      emu::fail_copy(0);
      emu::clear_sticky_error();
    }
    check_nothing_alive();
  }
}

TEST_CASE("an extent outside the region, or a region on another device, is refused before any read") {
  emulation_case scope;
  {
    auto bytes = make_file({{5000}});
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "mem-small")).value();
    auto dev = tz::cuda::alloc_device(0, 4096).value();
    auto got = tz::load_extents_to_device(sched, *ctx, l, {{{0, 0, 5000}, 0}}, region_of(dev));
    REQUIRE_FALSE(got.has_value());
    CHECK(got.error().code == tz::errc::invalid_argument);
    CHECK(got.error().message.find("device region of 4096 bytes") != std::string::npos);
    auto elsewhere = region_of(dev);
    elsewhere.device = 1;
    got = tz::load_extents_to_device(sched, *ctx, l, {{{0, 0, 4096}, 0}}, elsewhere);
    REQUIRE_FALSE(got.has_value());
    CHECK(got.error().code == tz::errc::invalid_argument);
  }
  check_nothing_alive();
}
