// Sharded safetensors checkpoints: the index format, opening shards as one loader (from an index,
// a directory, several files), loads whose reads cross shard boundaries, and every mismatch
// between the index and the shards reported naming the tensor and both shards.
#include "tz/sources/checkpoint.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/format/shard_index.hpp"
#include "tz/format/writer.hpp"
#include "tz/backends/memory_source.hpp"

#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace {

namespace fs = std::filesystem;
using tz::format::st_write_tensor;

std::span<const std::byte> as_bytes(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("tz-shards-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// Tensor "t<i>" holds bytes (i * 7 + k) & 0xff; sizes vary so offsets are not aligned.
std::vector<std::byte> tensor_bytes(std::size_t i) {
  std::vector<std::byte> b((i % 5 + 1) * 4 * 37);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 7 + k) & 0xff);
  return b;
}

// Writes shards[s] = tensor positions into dir/model-0000s-of-N.safetensors; returns the index.
tz::format::shard_index write_shards(const fs::path& dir, const std::vector<std::vector<std::size_t>>& shards) {
  tz::format::shard_index index;
  std::vector<std::vector<std::byte>> keep;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    std::vector<st_write_tensor> ts;
    for (std::size_t i : shards[s]) {
      keep.push_back(tensor_bytes(i));
      ts.push_back({"t" + std::to_string(i), "F32", {keep.back().size() / 4}, keep.back()});
      index.weight_map.emplace_back("t" + std::to_string(i), s);
    }
    index.shards.push_back(tz::format::shard_file_name(s, shards.size()));
    REQUIRE(tz::format::write_safetensors((dir / index.shards.back()).string(), ts, {{"format", "pt"}}).has_value());
  }
  return index;
}

void write_index(const fs::path& dir, const tz::format::shard_index& index, const std::string& name = "model.safetensors.index.json") {
  auto json = tz::format::write_shard_index_json(index);
  REQUIRE(json.has_value());
  std::ofstream(dir / name) << *json;
}

// Loads every tensor and checks each one's bytes against tensor_bytes.
void check_all(tz::scheduler& sched, tz::loader& l, std::size_t count, std::uint64_t range_bytes = 0) {
  REQUIRE(l.index().tensors.size() == count);
  tz::load_options o;
  o.range_bytes = range_bytes;
  auto r = l.load(sched, {}, o);
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  for (std::size_t i = 0; i < count; ++i) {
    auto at = r->find("t" + std::to_string(i));
    REQUIRE(at.has_value());
    auto want = tensor_bytes(i);
    CHECK(std::equal(want.begin(), want.end(), r->data(*at).begin(), r->data(*at).end()));
  }
}

std::string open_error(tz::scheduler& sched, std::vector<std::string> inputs) {
  auto l = tz::open_checkpoint(sched, inputs, {});
  REQUIRE_FALSE(l.has_value());
  return l.error().message;
}

}  // namespace

TEST_CASE("the index file: parsed, checked and written as transformers writes it") {
  auto ok = tz::format::parse_shard_index(
      as_bytes(R"({"metadata": {"total_size": 48}, "weight_map": {"b": "s2.safetensors", "a": "s1.safetensors",
                  "c": "s2.safetensors", "a": "s2.safetensors"}})"),
      "idx");
  REQUIRE(ok.has_value());
  CHECK(ok->shards == std::vector<std::string>{"s2.safetensors"});  // "a" keeps its last shard
  CHECK(ok->total_size == 48u);
  REQUIRE(ok->weight_map.size() == 3);
  CHECK(ok->weight_map[0].first == "b");
  auto bad = [](std::string_view text) {
    auto r = tz::format::parse_shard_index(as_bytes(text), "file /m/model.safetensors.index.json");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::format);
    CHECK(r.error().message.find("/m/model.safetensors.index.json") != std::string::npos);
    return r.error().message;
  };
  CHECK(bad("{").find("not valid JSON") != std::string::npos);
  CHECK(bad("[]").find("expected an object") != std::string::npos);
  CHECK(bad(R"({"metadata": {}})").find("no \"weight_map\"") != std::string::npos);
  CHECK(bad(R"({"weight_map": {}})").find("empty") != std::string::npos);
  CHECK(bad(R"({"weight_map": {"a": "../x.safetensors"}})").find("\"../x.safetensors\"") != std::string::npos);
  CHECK(bad(R"({"weight_map": {"a": "sub/x.safetensors"}})").find("file name of a shard") != std::string::npos);
  CHECK(bad(R"({"weight_map": {"a": 3}})").find("\"a\" is 3") != std::string::npos);
  CHECK(bad(R"({"metadata": {"total_size": -1}, "weight_map": {"a": "x"}})").find("total_size") != std::string::npos);

  tz::format::shard_index w;
  w.shards = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  w.weight_map = {{"z", 1}, {"a\xc3\xa9", 0}, {"m", 0}};
  w.total_size = 1234;
  auto json = tz::format::write_shard_index_json(w);
  REQUIRE(json.has_value());
  // json.dumps(index, indent=2, sort_keys=True) + "\n", as transformers' save_pretrained.
  CHECK(*json == "{\n  \"metadata\": {\n    \"total_size\": 1234\n  },\n  \"weight_map\": {\n"
                 "    \"a\\u00e9\": \"model-00001-of-00002.safetensors\",\n"
                 "    \"m\": \"model-00001-of-00002.safetensors\",\n"
                 "    \"z\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
  auto back = tz::format::parse_shard_index(as_bytes(*json), "written");
  REQUIRE(back.has_value());
  CHECK(back->shards == w.shards);
  CHECK(tz::format::shard_file_name(1, 3) == "model-00002-of-00003.safetensors");
  CHECK(tz::format::shard_file_name(0, 1) == "model.safetensors");
  w.weight_map.emplace_back("q", 7);
  CHECK_FALSE(tz::format::write_shard_index_json(w).has_value());
}

TEST_CASE("a sharded checkpoint opens as one loader from its index, its directory or its files") {
  temp_dir d;
  auto index = write_shards(d.path, {{0, 1, 2}, {3}, {4, 5, 6, 7}});
  write_index(d.path, index);
  tz::scheduler sched(2);
  const std::string index_path = (d.path / "model.safetensors.index.json").string();
  for (const auto& inputs : std::vector<std::vector<std::string>>{
           {index_path}, {d.path.string()}, {(d.path / index.shards[0]).string(), (d.path / index.shards[1]).string(),
                                              (d.path / index.shards[2]).string()}}) {
    CAPTURE(inputs.front());
    auto l = tz::open_checkpoint(sched, inputs, {});
    REQUIRE_MESSAGE(l.has_value(), l.error().message);
    CHECK(l->kind() == tz::file_kind::safetensors);
    REQUIRE(l->shards().size() == 3);
    CHECK(l->shards()[1].first_tensor == 3);
    CHECK(l->shards()[1].tensor_count == 1);
    CHECK(l->shards()[2].base % 4096 == 0);
    check_all(sched, *l, 8);                // small: one read runs across every shard and the padding
    check_all(sched, *l, 8, 64 << 10);      // explicit range size
    CHECK(l->find("t5").has_value());
  }
  // Caller memory: the same bytes land in the caller's spans.
  auto l = tz::open_checkpoint(sched, std::vector<std::string>{index_path}, {});
  REQUIRE(l.has_value());
  std::vector<std::vector<std::byte>> dst;
  std::vector<tz::tensor_destination> where;
  for (std::size_t i = 0; i < 8; ++i) dst.emplace_back(tensor_bytes(i).size());
  for (std::size_t i = 0; i < 8; ++i) where.push_back({*l->find("t" + std::to_string(i)), dst[i]});
  REQUIRE(l->load_into(sched, where).has_value());
  for (std::size_t i = 0; i < 8; ++i) CHECK(dst[i] == tensor_bytes(i));
}

TEST_CASE("index and shards that disagree fail naming the tensor and the shards") {
  temp_dir d;
  auto index = write_shards(d.path, {{0, 1}, {2, 3}});
  tz::scheduler sched(2);
  const std::string idx = (d.path / "model.safetensors.index.json").string();

  auto wrong = index;
  wrong.weight_map[1].second = 1;  // t1 is in shard 0
  write_index(d.path, wrong);
  auto m = open_error(sched, {idx});
  CHECK(m.find("tensor \"t1\" is in model-00001-of-00002.safetensors, but the index lists it in "
                "model-00002-of-00002.safetensors") != std::string::npos);
  CHECK(m.find(idx) != std::string::npos);

  auto extra = index;
  extra.weight_map.emplace_back("ghost", 1);
  write_index(d.path, extra);
  CHECK(open_error(sched, {idx}).find("lists tensor \"ghost\" in model-00002-of-00002.safetensors, but no shard holds it") !=
        std::string::npos);

  auto unlisted = index;
  unlisted.weight_map.pop_back();  // t3
  write_index(d.path, unlisted);
  CHECK(open_error(sched, {idx}).find("tensor \"t3\" in model-00002-of-00002.safetensors is not listed in the index") !=
        std::string::npos);

  auto missing = index;
  missing.shards[1] = "model-00009-of-00009.safetensors";
  write_index(d.path, missing);
  auto l = tz::open_checkpoint(sched, std::vector<std::string>{idx}, {});
  REQUIRE_FALSE(l.has_value());
  CHECK(l.error().code == tz::errc::not_found);
  CHECK(l.error().message.find("model-00009-of-00009.safetensors") != std::string::npos);

  // The same tensor in two files given without an index.
  temp_dir twice;
  write_shards(twice.path, {{0, 1}, {1, 2}});
  m = open_error(sched, {(twice.path / "model-00001-of-00002.safetensors").string(),
                         (twice.path / "model-00002-of-00002.safetensors").string()});
  CHECK(m.find("tensor \"t1\" is in two shards: ") != std::string::npos);
  CHECK(m.find("model-00001-of-00002.safetensors and ") != std::string::npos);
  // The directory holds no index: its safetensors files are the shards, and the same error.
  CHECK(open_error(sched, {twice.path.string()}).find("is in two shards") != std::string::npos);
}

TEST_CASE("a shard that is not safetensors, a broken shard and empty directories are reported") {
  temp_dir d;
  tz::scheduler sched(2);
  {
    auto w = tz::format::tensor_writer::create((d.path / "a.tensors").string());
    REQUIRE(w.has_value());
    const auto bytes = tensor_bytes(9);
    REQUIRE(w->write({tz::format::plain_path("t9"), tz::format::tensor_type::state_dict, 0,
                      tz::format::dtype_from_torch("torch.float32").value(), {bytes.size() / 4}, bytes, false})
                .has_value());
    REQUIRE(w->close().has_value());
  }
  write_shards(d.path, {{0}});  // model.safetensors
  auto l = tz::open_checkpoint(sched, std::vector<std::string>{(d.path / "model.safetensors").string(),
                                                                (d.path / "a.tensors").string()}, {});
  REQUIRE_FALSE(l.has_value());
  CHECK_MESSAGE(l.error().code == tz::errc::unsupported, l.error().message);
  CHECK(l.error().message.find("a.tensors") != std::string::npos);

  const char broken[] = "\x10\0\0\0\0\0\0\0{\"t\":1}";  // a 16-byte header in a 15-byte file
  std::ofstream(d.path / "broken.safetensors", std::ios::binary).write(broken, sizeof broken - 1);
  auto m = open_error(sched, {(d.path / "model.safetensors").string(), (d.path / "broken.safetensors").string()});
  CHECK(m.find("broken.safetensors") != std::string::npos);

  temp_dir empty;
  auto e = tz::open_checkpoint(sched, std::vector<std::string>{empty.path.string()}, {});
  REQUIRE_FALSE(e.has_value());
  CHECK(e.error().code == tz::errc::not_found);
  CHECK(e.error().message.find("holds no model.safetensors.index.json") != std::string::npos);
}

TEST_CASE("a read failing inside a shard names that shard and its own offset") {
  temp_dir d;
  write_shards(d.path, {{0, 1}, {2, 3}});
  auto first = std::make_shared<tz::memory_source>(tz_test::read_file(d.path / "model-00001-of-00002.safetensors"), "memory one");
  auto second = std::make_shared<tz::memory_source>(tz_test::read_file(d.path / "model-00002-of-00002.safetensors"), "memory two");
  tz::scheduler sched(2);
  auto l = tz::loader::open_shards(sched, "two in memory", {{"one", first}, {"two", second}});
  REQUIRE(l.has_value());
  const auto at = l->index().tensors[l->shards()[1].first_tensor].data_offset - l->shards()[1].base;
  second->inject({at + 3, tz::injected_fault::kind::hard, 0});
  auto r = l->load(sched);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("memory two") != std::string::npos);
}
