// Loading to GPU memory. Suite "host" (no GPU): the plan (whole tensors packed, large ones cut at
// cipher-chunk multiples, 256-byte device offsets) and dtype mapping. Suite "gpu" (needs a device):
// encrypted files, filtered loads, many small tensors, tensors larger than the whole ring, corrupt
// data and stored CRC32s (checked on the device or the host), safetensors and bounded pinned memory. Suite "reference" (needs a device and the reference
// vectors): device bytes equal the reference manifests. Without what they need, those suites are
// skipped (exit 77) before any case runs.
#include "tz/engine/device_load.hpp"
#include "tz/engine/load_plan.hpp"
#include "tz/backends/file_source.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"
#include "tz/crypto/hash.hpp"
#include "tz/backends/memory_source.hpp"

#include "cuda_device.hpp"
#include "float_model.hpp"
#include "reference_vectors.hpp"
#include "requirements.hpp"

#include <boost/json/src.hpp>

#include <doctest/doctest.h>


#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace {

template <class T>
bool ok(const tz::result<T>& r) {
  if (!r) MESSAGE("unexpected error (" << tz::errc_name(r.error().code) << "): " << r.error().message);
  return r.has_value();
}

std::string vectors_dir() { return tz_test::vectors_dir().string(); }

boost::json::value read_json(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return boost::json::parse(text);
}

// header_offset -> sha256 hex of the tensor's bytes, from a reference manifest.
std::map<std::uint64_t, std::string> manifest_hashes(const std::string& path) {
  std::map<std::uint64_t, std::string> out;
  const auto doc = read_json(path);
  for (const auto& t : doc.at("tensors").as_array()) {
    out[t.at("file").at("header_offset").to_number<std::uint64_t>()] = std::string(t.at("sha256").as_string());
  }
  return out;
}

// Plan options of a load through staging slots of `slot` bytes.
tz::plan_options slot_plan(std::uint64_t slot) {
  tz::plan_options o;
  o.range_bytes = slot;
  o.range_limit_bytes = slot;
  return o;
}

// An index entry for planning tests: header of `header` bytes, then `data` bytes.
tz::format::tensor_entry entry_at(std::uint64_t offset, std::uint64_t header, std::uint64_t data, std::string name) {
  tz::format::tensor_entry e;
  e.name = std::move(name);
  e.header_offset = offset;
  e.data_offset = offset + header;
  e.data_length = data;
  e.deserialized_bytes = data;
  return e;
}

}  // namespace

TEST_SUITE("host") {
  TEST_CASE("whole tensors are packed into slot-sized reads that start at a header") {
    std::vector<tz::format::tensor_entry> es;
    std::uint64_t off = 1000;
    for (int i = 0; i < 10; ++i) {
      es.push_back(entry_at(off, 100, 300, "t" + std::to_string(i)));
      off += 400;
    }
    std::vector<const tz::format::tensor_entry*> sel;
    for (auto& e : es) sel.push_back(&e);
    std::vector<std::uint64_t> align(sel.size(), tz::plain_split_align_bytes);
    auto plan = tz::make_plan(sel, align, slot_plan(1000));
    REQUIRE(ok(plan));
    CHECK(plan->ranges.size() == 5);  // two 400-byte tensors per 1000-byte range
    for (const auto& r : plan->ranges) {
      CHECK(r.length_bytes <= 1000);
      CHECK(r.split_tensor == tz::no_split);
      REQUIRE(r.pieces.size() == 4);
      CHECK(r.pieces[0].what == tz::plan_piece::kind::header);
      CHECK(r.pieces[0].offset_bytes == r.offset_bytes);
    }
    CHECK(plan->data_bytes == 3000);
  }

  TEST_CASE("a tensor larger than a slot is cut at chunk multiples relative to its data start") {
    const std::uint64_t chunk = 2 << 20;
    std::vector<tz::format::tensor_entry> es{entry_at(300, 123, 100, "small"),
                                             entry_at(523, 4000, 5 * chunk + 77, "big"),
                                             entry_at(523 + 4000 + 5 * chunk + 77, 50, 10, "tail")};
    std::vector<const tz::format::tensor_entry*> sel{&es[0], &es[1], &es[2]};
    std::vector<std::uint64_t> align{1, chunk, 1};
    auto plan = tz::make_plan(sel, align, slot_plan(2 * chunk + 1000));
    REQUIRE(ok(plan));
    CHECK(plan->part_count[1] == 3);  // 2 + 2 + 1(+77 bytes) chunks
    std::uint64_t covered = 0;
    std::uint32_t part = 0;
    for (const auto& r : plan->ranges) {
      if (r.split_tensor != 1) continue;
      CHECK(r.part == part++);
      REQUIRE(r.pieces.size() == 1);
      CHECK(r.pieces[0].what == tz::plan_piece::kind::data);  // the header comes from the header pass
      CHECK(r.pieces[0].data_begin_bytes % chunk == 0);
      CHECK(r.offset_bytes == es[1].data_offset + r.pieces[0].data_begin_bytes);
      covered += r.length_bytes;
    }
    CHECK(covered == es[1].data_length);
    CHECK(plan->ranges.front().split_tensor == tz::no_split);
    CHECK(plan->ranges.back().split_tensor == tz::no_split);
  }

  TEST_CASE("a ramp keeps the ranges before its end short, splits at the short size there, then the full one") {
    // Tensors as they land from a remote source (plan_options::ramp_*): a 3 MiB tensor, then small
    // ones, then a 9 MiB tensor across the ramp's end; the ramp 1 MiB up to 5 MiB into the file.
    const std::uint64_t mib = 1 << 20;
    std::vector<tz::format::tensor_entry> es{entry_at(0, 100, 3 * mib, "first")};
    for (int i = 0; i < 4; ++i) es.push_back(entry_at(es.back().end_offset(), 100, 200 * 1024, "small"));
    es.push_back(entry_at(es.back().end_offset(), 100, 9 * mib, "across"));
    std::vector<const tz::format::tensor_entry*> sel;
    for (auto& e : es) sel.push_back(&e);
    const std::vector<std::uint64_t> align(sel.size(), tz::plain_split_align_bytes);
    auto o = slot_plan(4 * mib);
    o.ramp_range_bytes = mib;
    o.ramp_until_offset = 5 * mib;
    auto plan = tz::make_plan(sel, align, o);
    REQUIRE(ok(plan));
    std::vector<std::uint64_t> covered(sel.size());
    std::uint64_t at = 0;
    for (const auto& r : plan->ranges) {
      CAPTURE(r.offset_bytes);
      CHECK(r.length_bytes <= (r.offset_bytes < 5 * mib ? mib : 4 * mib));
      if (r.split_tensor != tz::no_split) covered[r.split_tensor] += r.length_bytes;
      CHECK(r.offset_bytes >= at);  // in file order, no overlap
      at = r.offset_bytes + r.length_bytes;
    }
    CHECK(plan->part_count[0] == 3);  // 3 MiB of data in 1 MiB parts (its header read apart)
    CHECK(covered[0] == es[0].data_length);
    CHECK(covered[5] == es[5].data_length);  // parts of 1 MiB before 5 MiB, of 4 MiB after
    CHECK(plan->part_count[5] > 3);
    auto plain = slot_plan(4 * mib);  // no ramp: the plan of before
    auto before = tz::make_plan(sel, align, plain).value();
    CHECK(before.part_count[0] == 0);  // 3 MiB fits a 4 MiB range whole
    CHECK(before.part_count[5] == 3);  // 9 MiB in 4 MiB parts
  }

  TEST_CASE("interleaving lets several split tensors advance together, each in part order, longest first") {
    // Tensors of 10 MiB, 1000 B, 10 MiB, 1000 B and 20 MiB (the longest, last, as a model's
    // lm_head): 4 MiB slots cut them into 3, 1, 3, 1 and 5 ranges.
    std::vector<tz::format::tensor_entry> es;
    std::uint64_t off = 4096;
    const std::uint64_t sizes[] = {10u << 20, 1000, 10u << 20, 1000, 20u << 20};
    for (int i = 0; i < 5; ++i) {
      es.push_back(entry_at(off, 100, sizes[i], "t" + std::to_string(i)));
      off += 100 + sizes[i];
    }
    std::vector<const tz::format::tensor_entry*> sel;
    for (const auto& e : es) sel.push_back(&e);
    const std::vector<std::uint64_t> align(sel.size(), tz::plain_split_align_bytes);
    const tz::plan_options o = slot_plan(4u << 20);
    auto plan = tz::make_plan(sel, align, o).value();
    const auto before = plan.ranges;
    REQUIRE(before.size() == 13);
    auto key = [](const tz::load_range& r) { return std::pair(r.offset_bytes, r.length_bytes); };

    auto same = plan;
    tz::interleave_split_tensors(same, 1);  // width 1: unchanged
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(key(same.ranges[i]) == key(before[i]));

    auto in_file_order = plan;  // the benchmarks' comparison: parts 0 of tensors 0, 1 (whole) and 2 first
    tz::interleave_split_tensors(in_file_order, 3, false);
    CHECK(in_file_order.ranges[0].split_tensor == 0);
    CHECK(in_file_order.ranges[1].split_tensor == tz::no_split);
    CHECK(in_file_order.ranges[2].split_tensor == 2);

    tz::interleave_split_tensors(plan, 3);
    REQUIRE(plan.ranges.size() == before.size());
    std::vector<std::pair<std::uint64_t, std::uint64_t>> a, b;
    for (const auto& r : before) a.push_back(key(r));
    for (const auto& r : plan.ranges) b.push_back(key(r));
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    CHECK(a == b);  // a permutation: every range once
    std::map<std::uint32_t, std::uint32_t> next_part;
    for (const auto& r : plan.ranges) {
      if (r.split_tensor == tz::no_split) continue;
      CHECK(r.part == next_part[r.split_tensor]);  // parts keep their order
      ++next_part[r.split_tensor];
    }
    // Longest first, ties in file order: parts 0 of tensors 4, 0 and 2, then round-robin.
    auto split_of = [&](std::size_t i) { return plan.ranges[i].split_tensor; };
    CHECK(split_of(0) == 4);
    CHECK(split_of(1) == 0);
    CHECK(split_of(2) == 2);
    CHECK(split_of(3) == 4);
    CHECK(plan.ranges[3].part == 1);
    // The whole ranges come once tensors 0 and 2 are done, in file order; the longest ends last.
    CHECK(split_of(9) == 4);
    CHECK(plan.ranges[10].offset_bytes == es[1].header_offset);
    CHECK(plan.ranges[11].offset_bytes == es[3].header_offset);
    CHECK(split_of(12) == 4);
    CHECK(plan.ranges[12].part == 4);
  }

  TEST_CASE("a cipher chunk larger than a slot is refused with a clear error") {
    auto e = entry_at(0, 100, 10 << 20, "big");
    std::vector<const tz::format::tensor_entry*> sel{&e};
    std::vector<std::uint64_t> align{4 << 20};
    auto plan = tz::make_plan(sel, align, slot_plan(1 << 20));
    REQUIRE_FALSE(plan.has_value());
    CHECK(plan.error().code == tz::errc::unsupported);
    CHECK(plan.error().message.find("big") != std::string::npos);
  }

  TEST_CASE("meta and empty tensors are planned as headers alone, with no reads of data") {
    auto meta = entry_at(0, 64, 0, "meta");
    meta.deserialized_bytes = 1000;
    auto empty = entry_at(64, 64, 0, "empty");
    std::vector<const tz::format::tensor_entry*> sel{&meta, &empty};
    std::vector<std::uint64_t> align{1, 1};
    auto plan = tz::make_plan(sel, align, slot_plan(1 << 20));
    REQUIRE(ok(plan));
    for (const auto& r : plan->ranges)
      for (const auto& p : r.pieces) CHECK(p.what == tz::plan_piece::kind::header);
  }

  TEST_CASE("dtypes map to DLPack codes") {
    using tz::format::dtype_from_torch;
    auto code = [](const char* torch) {
      auto d = tz::dlpack_dtype(dtype_from_torch(torch).value()).value();
      return std::make_pair(int(d.code), int(d.bits));
    };
    CHECK(code("torch.float16") == std::make_pair(int(kDLFloat), 16));
    CHECK(code("torch.float32") == std::make_pair(int(kDLFloat), 32));
    CHECK(code("torch.float64") == std::make_pair(int(kDLFloat), 64));
    CHECK(code("torch.bfloat16") == std::make_pair(int(kDLBfloat), 16));
    CHECK(code("torch.int8") == std::make_pair(int(kDLInt), 8));
    CHECK(code("torch.int64") == std::make_pair(int(kDLInt), 64));
    CHECK(code("torch.uint8") == std::make_pair(int(kDLUInt), 8));
    CHECK(code("torch.bool") == std::make_pair(int(kDLBool), 8));
    CHECK(code("torch.complex64") == std::make_pair(int(kDLComplex), 64));
    CHECK(code("torch.float8_e4m3fn") == std::make_pair(int(kDLUInt), 8));
  }

  TEST_CASE("a load to a device that is not there reports no_device") {
    // cuda:0 without a GPU; one past the last device with one (or under the emulation).
    const int missing = tz::cuda::device_count().value();
    auto up = tz::cuda::uploader::create(missing);
    REQUIRE_FALSE(up.has_value());
    CHECK(up.error().code == tz::errc::no_device);
    CHECK(up.error().message.find("cuda:" + std::to_string(missing)) != std::string::npos);
  }
}

namespace {

const tz_test::suite_needs gpu_needs_a_device{"gpu", "a CUDA device", tz_test::cuda_device_absent};
const tz_test::suite_needs reference_needs_a_device{"reference", "a CUDA device", tz_test::cuda_device_absent};

// One scheduler and device context per case, and the loads it makes.
struct gpu {
  tz::scheduler sched{4};
  std::unique_ptr<tz::device_context> ctx = tz::device_context::create(0, 4).value();

  tz::result<tz::device_tensors> load(std::shared_ptr<tz::byte_source> src, std::vector<std::size_t> which = {},
                                      tz::device_load_options o = {}) {
    auto l = tz::loader::open(sched, src);
    if (!l) return l.error();
    return tz::load_to_device(sched, *ctx, *l, std::move(which), std::move(o));
  }
};

std::vector<std::byte> download(const tz::device_tensors& t, std::size_t i) {
  std::vector<std::byte> host(t.size_bytes(i));
  REQUIRE(ok(tz::cuda::download(t.buffer(), t.device_offset(i), host)));
  return host;
}

std::shared_ptr<tz::byte_source> open_file(const std::string& path) { return tz::file_source::open(path).value(); }

using tz_test::floats_match;
using tz_test::write_floats;

void check_floats(const tz::device_tensors& t, std::size_t base_bytes) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::size_t index = std::stoul(t.entry(i).name.substr(1));
    CHECK_MESSAGE(floats_match(download(t, i), index, base_bytes), t.entry(i).name);
  }
}

// Flips a bit of tensor i's stored CRC32, its data untouched: its SHA-256 still matches.
void corrupt_stored_crc(std::vector<std::byte>& bytes, std::size_t i) {
  tz::scheduler sched{1};
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "crc")).value();
  const auto& e = l.index().tensors.at(i);
  const auto header = std::span<const std::byte>(bytes).subspan(e.header_offset, e.data_offset - e.header_offset);
  auto h = tz::format::parse_tensor_header(header, l.index().header, e, "crc").value();
  for (const auto& sh : h.hashes)
    if (sh.kind == tz::format::hash_kind::crc32) bytes[e.header_offset + sh.value_offset] ^= std::byte{1};
}

tz::format::decryption reference_key() {
  auto m = read_json(vectors_dir() + "/encrypted.manifest.json");
  auto key = tz::crypto::secret_key::from_hex(std::string(m.at("encryption").at("key_hex").as_string())).value();
  return tz::format::decryption::from_key(std::move(key));
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("device bytes equal the reference manifests for every dtype (verified)" * doctest::test_suite("reference")) {
    gpu g;
    for (const char* name : {"small_mixed", "module", "nested", "meta_v4"}) {
      CAPTURE(name);
      tz::device_load_options o;
      o.verify = true;
      auto t = g.load(open_file(vectors_dir() + "/" + name + ".tensors"), {}, o);
      REQUIRE(ok(t));
      auto hashes = manifest_hashes(vectors_dir() + "/" + name + ".manifest.json");
      CHECK(t->size() == hashes.size());
      for (std::size_t i = 0; i < t->size(); ++i) {
        CAPTURE(t->entry(i).name);
        CHECK(t->device_offset(i) % tz::device_align_bytes == 0);
        CHECK(tz::to_hex(tz::sha256(download(*t, i))) == hashes.at(t->entry(i).header_offset));
        auto dl = t->to_dlpack(i);
        if (dl) {
          CHECK((*dl)->dl_tensor.device.device_type == kDLCUDA);
          CHECK((*dl)->dl_tensor.dtype.bits * (*dl)->dl_tensor.dtype.lanes == 8 * t->entry(i).dtype.itemsize);
        } else {
          CHECK(dl.error().code == tz::errc::unsupported);
        }
      }
      CHECK(t->pinned_bytes_max() <= t->ring_bytes());
    }
  }

  TEST_CASE("an encrypted file decrypts in the staging slots, whole or split across slots" * doctest::test_suite("reference")) {
    gpu g;
    auto hashes = manifest_hashes(vectors_dir() + "/encrypted.manifest.json");
    for (std::size_t slot_bytes : {std::size_t{16} << 20, std::size_t{2} << 20}) {
      CAPTURE(slot_bytes);
      tz::device_load_options o;
      o.verify = true;
      o.slot_bytes = slot_bytes;
      o.slot_count = 3;
      o.decryption = reference_key();
      auto t = g.load(open_file(vectors_dir() + "/encrypted.tensors"), {}, o);
      REQUIRE(ok(t));
      CHECK(t->size() == hashes.size());
      for (std::size_t i = 0; i < t->size(); ++i) {
        CHECK(tz::to_hex(tz::sha256(download(*t, i))) == hashes.at(t->entry(i).header_offset));
      }
    }
    auto none = g.load(open_file(vectors_dir() + "/encrypted.tensors"));
    REQUIRE_FALSE(none.has_value());
    CHECK(none.error().code == tz::errc::crypto);
    tz::device_load_options wrong;
    wrong.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::random().value());
    auto bad = g.load(open_file(vectors_dir() + "/encrypted.tensors"), {}, std::move(wrong));
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().code == tz::errc::crypto);
  }

  TEST_CASE("a filtered load uploads only the selected tensors") {
    gpu g;
    auto src = std::make_shared<tz::memory_source>(write_floats(40, 5000), "mem-filter");
    auto t = g.load(src, {3, 17, 39, 0});
    REQUIRE(ok(t));
    REQUIRE(t->size() == 4);
    CHECK(t->entry(0).name == "t0");
    CHECK(t->entry(3).name == "t39");
    check_floats(*t, 5000);
    CHECK(t->data_bytes() == t->size_bytes(0) + t->size_bytes(1) + t->size_bytes(2) + t->size_bytes(3));
    auto twice = g.load(src, {3, 3});
    REQUIRE_FALSE(twice.has_value());
    CHECK(twice.error().code == tz::errc::invalid_argument);
  }

  TEST_CASE("many small tensors go through a tiny ring with bounded pinned memory") {
    gpu g;
    auto src = std::make_shared<tz::memory_source>(write_floats(2000, 400), "mem-many");
    tz::device_load_options o;
    o.verify = true;
    o.slot_count = 4;
    o.slot_bytes = 64 << 10;
    auto t = g.load(src, {}, o);
    REQUIRE(ok(t));
    CHECK(t->size() == 2000);
    check_floats(*t, 400);
    CHECK(t->ring_bytes() == 4 * ((64 << 10) + 4096));
    CHECK(t->pinned_bytes_max() <= t->ring_bytes());
  }

  TEST_CASE("tensors larger than the whole ring load, plain and encrypted, verified") {
    gpu g;
    const std::size_t big = 21 << 20;  // 21 MiB + 3i floats each, through a 3 x 2 MiB ring
    auto key = tz::crypto::secret_key::random().value();
    auto copy_key = [&] { return tz::crypto::secret_key::from_bytes(key.bytes()).value(); };
    auto enc = tz::format::tensorizer_encryptor::from_key(copy_key());
    for (bool encrypted : {false, true}) {
      CAPTURE(encrypted);
      auto bytes = write_floats(3, big, encrypted ? &enc : nullptr);
      auto src = std::make_shared<tz::memory_source>(std::move(bytes), "mem-big");
      tz::device_load_options o;
      o.verify = true;
      o.slot_count = 3;
      o.slot_bytes = 2 << 20;
      if (encrypted) o.decryption = tz::format::decryption::from_key(copy_key());
      auto t = g.load(src, {}, o);
      REQUIRE(ok(t));
      check_floats(*t, big);
      CHECK(t->ring_bytes() == 3 * ((2 << 20) + 4096));
      CHECK(t->pinned_bytes_max() <= t->ring_bytes());
      CHECK(t->read_bytes() >= t->data_bytes());
      if (encrypted) {
        o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::random().value());
        auto wrong = g.load(src, {}, o);
        REQUIRE_FALSE(wrong.has_value());
        CHECK(wrong.error().code == tz::errc::crypto);
      }
    }
  }

  TEST_CASE("a corrupt byte in a split tensor fails verification after all copies drained") {
    gpu g;
    auto bytes = write_floats(2, 9 << 20);
    bytes[bytes.size() - 100] ^= std::byte{1};  // inside the last tensor's data
    auto src = std::make_shared<tz::memory_source>(std::move(bytes), "mem-corrupt");
    tz::device_load_options o;
    o.verify = true;
    o.slot_count = 4;
    o.slot_bytes = 1 << 20;
    auto t = g.load(src, {}, o);
    REQUIRE_FALSE(t.has_value());
    CHECK(t.error().code == tz::errc::hash_mismatch);
    CHECK(t.error().message.find("t1") != std::string::npos);
    o.verify = false;
    CHECK(ok(g.load(src, {}, o)));  // unverified, the same file loads
  }

  TEST_CASE("a stored CRC32 that differs fails a verified load, whether the GPU or the host takes the CRC32s") {
    gpu g;
    // Whole tensors packed into 64 KiB slots, and tensors of 3 MiB split over 1 MiB slots.
    for (std::size_t base : {std::size_t{1000}, std::size_t{3} << 20}) {
      CAPTURE(base);
      const std::size_t count = base < 4096 ? 20 : 3;
      auto good = std::make_shared<tz::memory_source>(write_floats(count, base), "mem-crc-good");
      auto bytes = write_floats(count, base);
      corrupt_stored_crc(bytes, 1);
      auto bad = std::make_shared<tz::memory_source>(std::move(bytes), "mem-crc-bad");
      for (bool on_device : {true, false}) {
        CAPTURE(on_device);
        tz::device_load_options o;
        o.verify = true;
        o.crc_on_device = on_device;
        o.slot_count = 4;
        o.slot_bytes = base < 4096 ? 64 << 10 : 1 << 20;
        auto t = g.load(good, {}, o);
        REQUIRE(ok(t));
        check_floats(*t, base);
        auto failed = g.load(bad, {}, o);
        REQUIRE_FALSE(failed.has_value());
        CHECK(failed.error().code == tz::errc::hash_mismatch);
        CHECK(failed.error().message.find("'t1'") != std::string::npos);
        CHECK(failed.error().message.find("CRC32") != std::string::npos);
        CHECK(failed.error().message.find("mem-crc-bad") != std::string::npos);
        o.verify = false;
        CHECK(ok(g.load(bad, {}, o)));  // unverified, the same file loads
      }
    }
  }

  TEST_CASE("a safetensors file loads to the device") {
    gpu g;
    std::vector<float> a{1, 2, 3, 4, 5, 6};
    std::vector<std::int16_t> b{-7, 8, -9};
    std::string json = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                       R"("b":{"dtype":"I16","shape":[3],"data_offsets":[24,30]}})";
    std::vector<std::byte> file(8);
    const std::uint64_t n = json.size();
    std::memcpy(file.data(), &n, 8);
    for (char c : json) file.push_back(std::byte(c));
    for (auto x : std::as_bytes(std::span<const float>(a))) file.push_back(x);
    for (auto x : std::as_bytes(std::span<const std::int16_t>(b))) file.push_back(x);
    auto t = g.load(std::make_shared<tz::memory_source>(file, "mem-st"));
    REQUIRE(ok(t));
    REQUIRE(t->size() == 2);
    auto ia = t->find("a").value();
    auto ib = t->find("b").value();
    auto da = download(*t, ia);
    auto db = download(*t, ib);
    CHECK(std::memcmp(da.data(), a.data(), 24) == 0);
    CHECK(std::memcmp(db.data(), b.data(), 6) == 0);
    CHECK(t->to_dlpack(ib).value()->dl_tensor.dtype.code == kDLInt);
  }

  TEST_CASE("device memory is returned after loads") {
    gpu g;
    const auto before = tz::cuda::describe_device(0).value().free_bytes;
    {
      auto src = std::make_shared<tz::memory_source>(write_floats(4, 32 << 20), "mem-leak");
      auto t = g.load(src);
      REQUIRE(ok(t));
      CHECK(tz::cuda::describe_device(0).value().free_bytes < before);
    }
    CHECK(tz::cuda::describe_device(0).value().free_bytes == before);
  }
}
