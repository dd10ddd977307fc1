// safetensors against the python library (suite "python", skipped up front with exit 77 where
// python3 cannot import safetensors and torch): files python writes parse, and ours are
// byte-identical to them; files we write load in python with the same dtypes, shapes, bytes and
// metadata. Linked into safetensors_test beside safetensors_test.cpp.
#include "tz/format/safetensors.hpp"
#include "tz/crypto/hash.hpp"

#include "requirements.hpp"
#include "safetensors_helpers.hpp"
#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace tz::format;
using namespace st_test;
using tz_test::temp_dir;

namespace {

const tz_test::suite_needs python_needs_safetensors{"python", "python3 with safetensors and torch", [] {
  if (run_command("python3 -c 'import safetensors, torch' > /dev/null 2>&1") == 0) return std::string();
  return std::string("`python3 -c 'import safetensors, torch'` failed");
}};

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string hex_of(std::string_view s) {
  return tz::to_hex(std::span(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
}

std::string sha256_hex(std::span<const std::byte> bytes) { return tz::to_hex(tz::sha256(bytes)); }

struct manifest_tensor {
  std::string dtype, shape, sha256;
};
struct manifest_file {
  std::map<std::string, manifest_tensor> tensors;
  std::map<std::string, std::string> metadata;
};

std::map<std::string, manifest_file> read_manifest(const fs::path& path) {
  std::map<std::string, manifest_file> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cols;
    std::stringstream fields(line);
    for (std::string col; std::getline(fields, col, '\t');) cols.push_back(col);
    if (cols.size() == 6 && cols[0] == "T") out[cols[1]].tensors[unhex(cols[2])] = {cols[3], cols[4], cols[5]};
    if (cols.size() >= 3 && cols[0] == "M")  // an empty value leaves no fourth column
      out[cols[1]].metadata[unhex(cols[2])] = cols.size() > 3 ? unhex(cols[3]) : "";
  }
  return out;
}

std::string shape_csv(const std::vector<std::uint64_t>& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out;
}

}  // namespace

TEST_CASE("files written by python safetensors parse, and ours are byte-identical to them" *
          doctest::test_suite("python")) {
  temp_dir dir;
  REQUIRE(run_command("python3 '" TZ_ST_PYTHON_DIR "/st_make.py' '" + dir.path.string() + "'") == 0);
  const auto manifest = read_manifest(dir.path / "manifest.tsv");
  REQUIRE(manifest.size() == 22);
  for (const auto& [name, expected] : manifest) {
    INFO("file " << name);
    const auto path = dir.path / name;
    const auto index = read_safetensors_index(path.string());
    REQUIRE(index.has_value());
    const auto file = tz_test::read_file(path);
    REQUIRE(index->tensors.size() == expected.tensors.size());
    std::vector<st_write_tensor> again;
    for (const auto& t : index->tensors) {
      INFO("tensor " << t.name);
      REQUIRE(expected.tensors.count(t.name) == 1);
      const auto& want = expected.tensors.at(t.name);
      CHECK(t.dtype == want.dtype);
      CHECK(shape_csv(t.shape) == want.shape);
      const auto data = std::span(file).subspan(t.data_begin, t.size_bytes());
      CHECK(sha256_hex(data) == want.sha256);
      again.push_back({t.name, t.dtype, t.shape, data});
    }
    CHECK(std::map<std::string, std::string>(index->metadata.begin(), index->metadata.end()) == expected.metadata);
    // Python orders a metadata map of two or more entries at random; ours has at most one.
    const auto copy = dir.path / ("ours_" + name);
    REQUIRE(write_safetensors(copy.string(), again, index->metadata).has_value());
    CHECK(tz_test::read_file(copy) == file);
  }
}

TEST_CASE("files written by us load in python with the same dtypes, shapes, bytes and metadata" *
          doctest::test_suite("python")) {
  std::mt19937_64 rng(3);
  tensor_set all = every_dtype(rng);
  all.add("é\"\n\\\t/ name", "F32", {2, 2}, random_bytes(rng, 16));
  const auto tensors = all.finish();
  temp_dir dir;
  // One file per dtype, so python's torch loader checks the dtypes it knows even when it lacks others.
  std::map<std::string, std::vector<st_write_tensor>> files;
  for (const auto& t : tensors) files[t.dtype].push_back(t);
  const st_metadata metadata = {{"format", "pt"}, {"note", "é \"quoted\"\n\x01"}};
  std::string command = "python3 '" TZ_ST_PYTHON_DIR "/st_check.py'";
  for (const auto& [code, group] : files) {
    INFO("dtype " << code);
    const auto path = dir.path / (code + ".safetensors");
    const auto manifest_path = dir.path / (code + ".tsv");
    REQUIRE(write_safetensors(path.string(), group, metadata).has_value());
    std::ofstream manifest(manifest_path);
    for (const auto& t : group)
      manifest << "T\t-\t" << hex_of(t.name) << '\t' << t.dtype << '\t' << shape_csv(t.shape) << '\t'
               << sha256_hex(t.data) << '\n';
    for (const auto& [key, value] : metadata) manifest << "M\t-\t" << hex_of(key) << '\t' << hex_of(value) << '\n';
    command += " '" + path.string() + "' '" + manifest_path.string() + "'";
  }
  CHECK(run_command(command) == 0);
}
