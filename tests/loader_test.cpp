// The loader: bytes equal the reference manifests; filtered, lazy, caller-memory and staged loads;
// faults surfaced with the source and offset; few large reads rather than one per tensor.
#include "tz/backends/file_source.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/format/writer.hpp"
#include "tz/crypto/hash.hpp"
#include "tz/engine/loader.hpp"
#include "tz/backends/memory_source.hpp"

#include "float_model.hpp"
#include "temp_dir.hpp"
#include "reference_vectors.hpp"

#include <boost/json.hpp>  // compiled once, in tz::format (format/json.cpp)

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

namespace {

std::string vectors_dir() { return tz_test::vectors_dir().string(); }

// header_offset -> sha256 hex of the tensor's bytes, from a reference manifest.
std::map<std::uint64_t, std::string> manifest_hashes(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto doc = boost::json::parse(text);
  std::map<std::uint64_t, std::string> out;
  for (const auto& t : doc.at("tensors").as_array()) {
    auto off = t.at("file").at("header_offset").to_number<std::uint64_t>();
    out[off] = std::string(t.at("sha256").as_string());
  }
  return out;
}

std::string sha_hex(std::span<const std::byte> b) {
  auto d = tz::sha256(b);
  return tz::to_hex(d);
}

// A small .tensors file written by the project's writer: `count` tensors of varied sizes.
std::vector<std::byte> make_tensors_file(const std::string& path, std::size_t count, std::size_t base_bytes) {
  auto writer = tz::format::tensor_writer::create(path);
  REQUIRE(writer.has_value());
  auto f32 = tz::format::dtype_from_torch("torch.float32").value();
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t n = base_bytes / 4 + i * 3;
    std::vector<float> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<float>(i * 1000 + k);
    tz::format::tensor_write t;
    t.path = tz::format::plain_path("t" + std::to_string(i));
    t.dtype = f32;
    t.shape = {n};
    t.data = std::as_bytes(std::span<const float>(v));
    REQUIRE(writer->write(t).has_value());
  }
  REQUIRE(writer->close().has_value());
  return tz_test::read_file(path);
}

// Expected bytes of tensor i of make_tensors_file (the model of float_model.hpp).
constexpr auto tensor_matches = tz_test::floats_match;

}  // namespace

TEST_CASE("loaded bytes equal the reference manifests (verified, two workers)" * doctest::test_suite("reference")) {
  tz::scheduler sched(2);
  for (const char* name : {"small_mixed", "module", "nested", "meta_v4"}) {
    CAPTURE(name);
    auto src = tz::file_source::open(vectors_dir() + "/" + name + ".tensors").value();
    auto l = tz::loader::open(sched, src);
    REQUIRE(l.has_value());
    auto hashes = manifest_hashes(vectors_dir() + "/" + name + ".manifest.json");
    tz::load_options o;
    o.verify = true;
    auto loaded = l->load(sched, {}, o);
    REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
    CHECK(loaded->size() == hashes.size());
    for (std::size_t i = 0; i < loaded->size(); ++i) {
      CAPTURE(loaded->entry(i).name);
      CHECK(sha_hex(loaded->data(i)) == hashes.at(loaded->entry(i).header_offset));
    }
  }
}

// The reference file's key, from its manifest (encryption.key_hex).
tz::crypto::secret_key reference_key() {
  std::ifstream in(vectors_dir() + "/encrypted.manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto doc = boost::json::parse(text);
  return tz::crypto::secret_key::from_hex(std::string(doc.at("encryption").at("key_hex").as_string())).value();
}

TEST_CASE("an encrypted file loads decrypted and verified with its key, and fails without it or with another" * doctest::test_suite("reference")) {
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, tz::file_source::open(vectors_dir() + "/encrypted.tensors").value()).value();
  auto refused = l.load(sched);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == tz::errc::crypto);

  auto decryption = tz::format::decryption::from_key(reference_key());
  tz::load_options o;
  o.verify = true;
  o.decryption = decryption;
  auto loaded = l.load(sched, {}, o);
  REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
  auto hashes = manifest_hashes(vectors_dir() + "/encrypted.manifest.json");
  CHECK(loaded->size() == hashes.size());
  for (std::size_t i = 0; i < loaded->size(); ++i) {
    CAPTURE(loaded->entry(i).name);
    CHECK(sha_hex(loaded->data(i)) == hashes.at(loaded->entry(i).header_offset));
  }
  CHECK(loaded->timings().decrypt_s > 0);

  auto wrong = tz::format::decryption::from_key(tz::crypto::secret_key::random().value());
  o.decryption = wrong;
  auto failed = l.load(sched, {}, o);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == tz::errc::crypto);
  CHECK(failed.error().message.find("MAC") != std::string::npos);
}

TEST_CASE("the data version 5 files of tensorizer 2.12.1 load as their manifests say" * doctest::test_suite("reference_2121")) {
  tz::scheduler sched(2);
  for (const char* name : {"long_v5", "long_v5_encrypted"}) {
    CAPTURE(name);
    const std::string stem = tz_test::vectors_2121_dir().string() + "/" + name;
    auto l = tz::loader::open(sched, tz::file_source::open(stem + ".tensors").value());
    REQUIRE(l.has_value());
    CHECK(l->index().header.version == 5);
    std::ifstream in(stem + ".manifest.json");
    const auto manifest = boost::json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
    std::optional<tz::format::decryption> decryption;
    if (!manifest.at("encryption").is_null())
      decryption = tz::format::decryption::from_key(
          tz::crypto::secret_key::from_hex(std::string(manifest.at("encryption").at("key_hex").as_string())).value());
    tz::load_options o;
    o.verify = true;
    if (decryption) o.decryption = *decryption;
    auto loaded = l->load(sched, {}, o);
    REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
    auto hashes = manifest_hashes(stem + ".manifest.json");
    REQUIRE(loaded->size() == hashes.size());
    for (std::size_t i = 0; i < loaded->size(); ++i) {
      CAPTURE(loaded->entry(i).name);
      CHECK(sha_hex(loaded->data(i)) == hashes.at(loaded->entry(i).header_offset));
    }
  }
}

TEST_CASE("meta tensors whose sizes add up past 2^64 bytes fail the load instead of wrapping") {
  const tz_test::temp_dir dir("tz-loader-test");
  const auto path = dir.file("wrap.tensors");
  {
    auto w = tz::format::tensor_writer::create(path).value();
    const auto u1 = tz::format::parse_dtype("|u1").value();
    for (const char* name : {"a", "b"})
      REQUIRE(w.write({tz::format::plain_path(name), tz::format::tensor_type::state_dict, 0, u1, {(1ull << 63) - 1}, {}, true})
                  .has_value());
    REQUIRE(w.close().has_value());
  }
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, tz::file_source::open(path).value());
  REQUIRE(l.has_value());
  auto loaded = l->load(sched);
  std::remove(path.c_str());
  REQUIRE_FALSE(loaded.has_value());
  CHECK(loaded.error().code == tz::errc::unsupported);
  CHECK(loaded.error().message.find("tensor 'b' is a meta tensor of 9223372036854775807 bytes of zeros: the load "
                                    "would need more than 2^64 bytes") != std::string::npos);
}

TEST_CASE("multi-chunk encrypted tensors load whatever the range cuts, and a flipped byte names its chunk") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("chunks.tensors");
  // Tensors of 5 MiB + 12 bytes (3 cipher chunks), small ones and an empty one. Ranges shorter than
  // a chunk still hold whole chunks (a split tensor is cut at chunk multiples), longer ones several.
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  std::vector<std::vector<std::byte>> plain;
  {
    auto w = tz::format::tensor_writer::create(path, {&enc}).value();
    auto u8 = tz::format::dtype_from_torch("torch.uint8").value();
    const std::size_t sizes[] = {(5u << 20) + 12, 1000, 0, (2u << 20) + 1, 7};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      std::vector<std::byte> v(sizes[i]);
      for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>((k * 31 + i * 7) & 0xff);
      tz::format::tensor_write t;
      t.path = tz::format::plain_path("t" + std::to_string(i));
      t.dtype = u8;
      t.shape = {v.size()};
      t.data = v;
      REQUIRE(w.write(t).has_value());
      plain.push_back(std::move(v));
    }
    REQUIRE(w.close().has_value());
  }
  tz::scheduler sched(2);
  auto decryption = tz::format::decryption::from_key(std::move(key));
  auto load = [&](std::uint64_t range_bytes) {
    auto l = tz::loader::open(sched, tz::file_source::open(path).value()).value();
    tz::load_options o;
    o.verify = true;
    o.decryption = decryption;
    o.range_bytes = range_bytes;
    return l.load(sched, {}, o);
  };
  for (std::uint64_t range : {std::uint64_t{1} << 20, std::uint64_t{3} << 20, std::uint64_t{16} << 20}) {
    CAPTURE(range);
    auto loaded = load(range);
    REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
    REQUIRE(loaded->size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      CAPTURE(i);
      CHECK(std::ranges::equal(loaded->data(i), plain[i]));
    }
  }
  // One flipped ciphertext byte in the middle chunk of t0: the load fails naming tensor and chunk.
  auto bytes = tz_test::read_file(path);
  const auto t0 = tz::loader::open(sched, tz::file_source::open(path).value()).value().index().tensors.front();
  bytes[t0.data_offset + (2u << 20) + 5] ^= std::byte{1};
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto bad = load(1u << 20);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == tz::errc::crypto);
  CHECK(bad.error().message.find("t0") != std::string::npos);
  CHECK(bad.error().message.find("chunk 1 of 3") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("a plain file refuses a decryption key" * doctest::test_suite("reference")) {
  tz::scheduler sched(1);
  auto l = tz::loader::open(sched, tz::file_source::open(vectors_dir() + "/small_mixed.tensors").value()).value();
  auto decryption = tz::format::decryption::from_key(tz::crypto::secret_key::random().value());
  tz::load_options o;
  o.decryption = decryption;
  auto r = l.load(sched, {}, o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::crypto);
}

TEST_CASE("many small tensors load with a few large reads, not one read per tensor") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("small.tensors");
  auto bytes = make_tensors_file(path, 200, 1000);
  std::remove(path.c_str());
  auto src = std::make_shared<tz::memory_source>(bytes, "mem-small");
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, src).value();
  auto reads_before = src->reads();
  tz::load_options o;
  o.verify = true;
  auto loaded = l.load(sched, {}, o).value();
  CHECK(src->reads() - reads_before <= 2);
  REQUIRE(loaded.size() == 200);
  for (std::size_t i = 0; i < 200; ++i) CHECK(tensor_matches(loaded.data(i), i, 1000));
}

TEST_CASE("a filtered load reads only around the selected tensors; a lazy load reads one range") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("filter.tensors");
  auto bytes = make_tensors_file(path, 40, 256 << 10);
  std::remove(path.c_str());
  auto src = std::make_shared<tz::memory_source>(bytes, "mem-filter");
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, src).value();
  auto odd = l.select([](const tz::format::tensor_entry& e) { return (e.name.back() - '0') % 2 == 1; });
  REQUIRE(odd.size() == 20);
  auto loaded = l.load(sched, odd).value();
  REQUIRE(loaded.size() == 20);
  std::uint64_t expected_bytes = 0;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    std::size_t n = std::stoul(loaded.entry(i).name.substr(1));
    CHECK(n % 2 == 1);
    CHECK(tensor_matches(loaded.data(i), n, 256 << 10));
    expected_bytes += loaded.entry(i).deserialized_bytes;
  }
  CHECK(loaded.bytes() == expected_bytes);

  auto idx = l.find("t17");
  REQUIRE(idx.has_value());
  auto before = src->reads();
  auto one = tz::run(sched, l.async_load_tensor(sched, *idx)).value();
  CHECK(src->reads() - before == 1);
  REQUIRE(one.size() == 1);
  CHECK(tensor_matches(one.data(0), 17, 256 << 10));
  CHECK(one.find("t17") == std::optional<std::size_t>(0));
}

TEST_CASE("a load into caller memory fills exactly the given spans") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("into.tensors");
  auto bytes = make_tensors_file(path, 10, 100000);
  std::remove(path.c_str());
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::vector<std::vector<std::byte>> bufs;
  std::vector<tz::tensor_destination> dst;
  for (std::size_t i : {7u, 2u, 5u}) {
    bufs.emplace_back(l.index().tensors[i].deserialized_bytes);
    dst.push_back({i, bufs.back()});
  }
  tz::load_options o;
  o.verify = true;
  o.range_bytes = 64 << 10;  // split tensors over several reads
  REQUIRE(l.load_into(sched, dst, o).has_value());
  CHECK(tensor_matches(bufs[0], 7, 100000));
  CHECK(tensor_matches(bufs[1], 2, 100000));
  CHECK(tensor_matches(bufs[2], 5, 100000));
  std::vector<std::byte> wrong(3);
  auto bad = l.load_into(sched, {{1, wrong}});
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == tz::errc::invalid_argument);
}

TEST_CASE("short reads and transient errors are absorbed; a hard error fails the load naming the offset") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("faults.tensors");
  auto bytes = make_tensors_file(path, 16, 300000);
  std::remove(path.c_str());
  auto src = std::make_shared<tz::memory_source>(bytes, "mem-faults");
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, src).value();
  src->set_attempt_max_bytes(100000);
  for (std::uint64_t off = 300000; off < bytes.size(); off += 700001) {
    src->inject({off, tz::injected_fault::kind::short_read, 1});
    src->inject({off + 5, tz::injected_fault::kind::interrupted, 2});
    src->inject({off + 9, tz::injected_fault::kind::again, 3});
  }
  tz::load_options o;
  o.verify = true;
  o.range_bytes = 1 << 20;
  auto ok = l.load(sched, {}, o);
  REQUIRE(ok.has_value());
  for (std::size_t i = 0; i < 16; ++i) CHECK(tensor_matches(ok->data(i), i, 300000));

  std::uint64_t bad_offset = bytes.size() - 1000;
  src->inject({bad_offset, tz::injected_fault::kind::hard, 0});
  auto failed = l.load(sched, {}, o);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == tz::errc::io);
  CHECK(failed.error().message.find("mem-faults") != std::string::npos);
  CHECK(failed.error().message.find("offset") != std::string::npos);
}

TEST_CASE("a corrupted byte fails verification naming the tensor") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("corrupt.tensors");
  auto bytes = make_tensors_file(path, 5, 4000);
  std::remove(path.c_str());
  tz::scheduler sched(2);
  auto clean = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  auto e = clean.index().tensors[3];
  bytes[e.data_offset + 10] ^= std::byte{1};
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  CHECK(l.load(sched).has_value());  // without verify, nothing checks the data
  tz::load_options o;
  o.verify = true;
  auto r = l.load(sched, {}, o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::hash_mismatch);
  CHECK(r.error().message.find("t3") != std::string::npos);
}

TEST_CASE("tensors larger than a range are split, hashed part by part on any worker, and verified") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("split.tensors");
  auto bytes = make_tensors_file(path, 12, 200000);
  std::remove(path.c_str());
  tz::scheduler sched(2);
  auto src = std::make_shared<tz::memory_source>(bytes, "mem-split");
  auto l = tz::loader::open(sched, src).value();
  tz::load_options o;
  o.verify = true;
  o.range_bytes = 64 << 10;  // every tensor (~200 KB) is split into 4 KiB-aligned parts
  for (unsigned readers : {1u, 3u, 8u}) {
    CAPTURE(readers);
    o.readers = readers;
    auto r = l.load(sched, {}, o);
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    for (std::size_t i = 0; i < 12; ++i) CHECK(tensor_matches(r->data(i), i, 200000));
    CHECK(r->readers() == readers);
    // The same load into caller memory: parts land straight in the caller's spans.
    std::vector<std::vector<std::byte>> mem(12);
    std::vector<tz::tensor_destination> dst;
    for (std::size_t i = 0; i < 12; ++i) {
      mem[i].resize(l.index().tensors[i].deserialized_bytes);
      dst.push_back({i, mem[i]});
    }
    auto into = l.load_into(sched, dst, o);
    REQUIRE_MESSAGE(into.has_value(), (into ? "" : into.error().message));
    for (std::size_t i = 0; i < 12; ++i) CHECK(tensor_matches(mem[i], i, 200000));
  }
  // A flipped byte in the third part of t7: the combined CRC32 (or the SHA-256) names the tensor.
  for (std::uint64_t where : {std::uint64_t{0}, std::uint64_t{150000}, l.index().tensors[7].data_length - 1}) {
    CAPTURE(where);
    auto bad = bytes;
    bad[l.index().tensors[7].data_offset + where] ^= std::byte{0x10};
    auto lb = tz::loader::open(sched, std::make_shared<tz::memory_source>(bad, "mem-bad")).value();
    auto r = lb.load(sched, {}, o);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::hash_mismatch);
    CHECK(r.error().message.find("'t7'") != std::string::npos);
    CHECK(r.error().message.find("CRC32") != std::string::npos);  // checked first, combined over parts
  }
  o.readers = 0;  // automatic: the engine's choice, two per worker, is what the result reports
  auto automatic = l.load(sched, {}, o);
  REQUIRE(automatic.has_value());
  CHECK(automatic->readers() == 2 * sched.thread_count());
}

TEST_CASE("a plain load checks split tensors' headers beside the data reads, and a bad one still fails naming its tensor") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("split-plain.tensors");
  auto bytes = make_tensors_file(path, 12, 200000);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes, "mem-split")).value();
  tz::load_options o;
  o.range_bytes = 64 << 10;  // every tensor split: no header is read before the data
  o.keep_headers = true;     // the deferred checks still hand their headers over
  for (unsigned readers : {1u, 4u, 16u}) {
    CAPTURE(readers);
    o.readers = readers;
    auto r = l.load(sched, {}, o);
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
    for (std::size_t i = 0; i < 12; ++i) {
      CHECK(tensor_matches(r->data(i), i, 200000));
      REQUIRE(r->header(i) != nullptr);
      CHECK(r->header(i)->name == l.index().tensors[i].name);
    }
  }
  // The first letter of t7's name in its header (after size u64, module u16, type u8, length u16).
  auto bad = bytes;
  bad[l.index().tensors[7].header_offset + 13] ^= std::byte{0x01};
  auto lb = tz::loader::open(sched, std::make_shared<tz::memory_source>(bad, "mem-bad-header")).value();
  for (unsigned readers : {1u, 8u}) {
    o.readers = readers;
    auto r = lb.load(sched, {}, o);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::format);
    CHECK_MESSAGE(r.error().message.find("mem-bad-header") != std::string::npos, r.error().message);
  }
}

TEST_CASE("a source that asks for more reads in flight (a remote store) gets them by default") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("remote.tensors");
  auto bytes = make_tensors_file(path, 16, 300000);
  tz::scheduler sched(2);
  auto src = std::make_shared<tz::memory_source>(bytes, "mem-remote");
  auto l = tz::loader::open(sched, src).value();
  tz::load_options o;
  src->set_read_concurrency(24);
  auto remote = l.load(sched, {}, o);
  REQUIRE(remote.has_value());
  CHECK(remote->readers() == 24);
  for (std::size_t i = 0; i < 16; ++i) CHECK(tensor_matches(remote->data(i), i, 300000));
  src->set_read_concurrency(1);  // fewer than the local default: the default stands
  auto local = l.load(sched, {}, o);
  REQUIRE(local.has_value());
  CHECK(local->readers() == 2 * sched.thread_count());
  src->set_read_concurrency(24);
  o.readers = 3;  // a caller's count is kept
  auto given = l.load(sched, {}, o);
  REQUIRE(given.has_value());
  CHECK(given->readers() == 3);
}

TEST_CASE("a safetensors file loads through the same pipeline") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("st.safetensors");
  std::vector<float> a(1000), b(70000);
  for (std::size_t k = 0; k < a.size(); ++k) a[k] = static_cast<float>(k);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<float>(k) * 0.5f;
  std::vector<tz::format::st_write_tensor> ts{
      {"a", "F32", {1000}, std::as_bytes(std::span<const float>(a))},
      {"b.weight", "F32", {700, 100}, std::as_bytes(std::span<const float>(b))}};
  REQUIRE(tz::format::write_safetensors(path, ts).has_value());
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, tz::file_source::open(path).value());
  std::remove(path.c_str());
  REQUIRE(l.has_value());
  CHECK(l->kind() == tz::file_kind::safetensors);
  auto r = l->load(sched).value();
  auto ia = r.find("a"), ib = r.find("b.weight");
  REQUIRE((ia && ib));
  CHECK(std::memcmp(r.data(*ia).data(), a.data(), a.size() * 4) == 0);
  CHECK(std::memcmp(r.data(*ib).data(), b.data(), b.size() * 4) == 0);
}

TEST_CASE("progress is reported up to the total and stage timings are filled in") {
  const tz_test::temp_dir dir("tz-loader-test");
  auto path = dir.file("progress.tensors");
  auto bytes = make_tensors_file(path, 8, 500000);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, tz::file_source::open(path, {true, false}).value()).value();
  std::remove(path.c_str());
  std::uint64_t last = 0, total = 0;
  int calls = 0;
  tz::load_options o;
  o.verify = true;
  o.range_bytes = 1 << 20;
  o.on_progress = [&](const tz::load_progress& p) {
    CHECK(p.bytes_done >= last);
    last = p.bytes_done;
    total = p.bytes_total;
    ++calls;
  };
  auto r = l.load(sched, {}, o).value();
  CHECK(calls >= 4);
  CHECK(last == total);
  CHECK(r.timings().total_s > 0);
  CHECK(r.timings().read_s > 0);
  CHECK(r.timings().verify_s > 0);
  for (std::size_t i = 0; i < 8; ++i) CHECK(tensor_matches(r.data(i), i, 500000));
}
