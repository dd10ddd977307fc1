// Checks of a reference file against its manifest (tests/vectors/make_vectors.py), shared by the
// 2.11.1 and 2.12.1 reference cases: every tensor as the manifest says, and a byte-identical write-back.
#pragma once

#include "file_reader.hpp"
#include "format_test_util.hpp"
#include "tz/crypto/hash.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace tz_test {

// The manifest's name for a tensor: its string name, or the JSON path array.
inline std::string manifest_name(const boost::json::object& t) {
  using namespace tz::format;
  if (!t.at("name").is_null()) return std::string(t.at("name").as_string());
  tensor_path p;
  for (const auto& c : t.at("path").as_array()) {
    if (c.is_string()) p.parts.emplace_back(std::string(c.as_string()));
    else p.parts.emplace_back(static_cast<std::uint64_t>(c.to_number<std::int64_t>()));
  }
  return display_name(p);
}

inline std::string sha_of_load(const tz::format::tensor_entry& e, const std::vector<std::byte>& data) {
  if (!e.is_meta()) return tz::to_hex(tz::sha256(data));
  std::vector<std::byte> zeros(e.deserialized_bytes);
  return tz::to_hex(tz::sha256(zeros));
}

// Checks the header fields and every tensor of the plain file DIR/NAME.tensors against its manifest:
// name, dtype (stored and torch), shape, offsets, module index, stored hashes and the sha256 of what
// a load yields. A manifest sha256 of null (a meta tensor of GiBs of zeros) checks only the size.
inline void check_manifest(const std::filesystem::path& dir, const std::string& name) {
  using namespace tz::format;
  CAPTURE(name);
  auto manifest = read_json(dir / (name + ".manifest.json")).as_object();
  auto reader = file_reader::open((dir / (name + ".tensors")).string());
  REQUIRE(reader);
  const auto& index = reader->index();
  const auto& fh = manifest.at("file_header").as_object();
  CHECK(index.header.version == fh.at("data_version").to_number<std::uint32_t>());
  CHECK(index.header.flags == fh.at("feature_flags").to_number<std::uint64_t>());
  const auto& tensors = manifest.at("tensors").as_array();
  REQUIRE(index.tensors.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i].as_object();
    const auto& f = t.at("file").as_object();
    const auto& e = index.tensors[i];
    CAPTURE(display_name(e.path));
    CHECK(display_name(e.path) == manifest_name(t));
    CHECK("torch." + dtype_display(e.dtype) == std::string(t.at("dtype").as_string()));
    CHECK(e.dtype.stored == std::string(f.at("file_dtype").as_string()));
    CHECK(e.header_offset == f.at("header_offset").to_number<std::uint64_t>());
    CHECK(e.data_offset == f.at("data_offset").to_number<std::uint64_t>());
    CHECK(e.data_length == f.at("data_length").to_number<std::uint64_t>());
    if (const auto* tag = f.if_contains("metadata_version")) CHECK(e.metadata_version == tag->to_number<std::uint32_t>());
    std::vector<std::uint64_t> shape;
    for (const auto& d : t.at("shape").as_array()) shape.push_back(d.to_number<std::uint64_t>());
    CHECK(e.shape == shape);
    auto h = reader->read_header(i);
    REQUIRE(h);
    CHECK(h->module_index == f.at("module_idx").to_number<std::uint16_t>());
    std::vector<std::byte> data(e.data_length);
    REQUIRE(reader->read_data(i, data));
    CHECK(verify_tensor(*h, data, index.source));
    if (t.at("sha256").is_null()) {
      CHECK(e.is_meta());
      CHECK(e.deserialized_bytes == t.at("nbytes").to_number<std::uint64_t>());
    } else {
      CHECK(sha_of_load(e, data) == std::string(t.at("sha256").as_string()));
    }
  }
}

// Reads the file IN tensor by tensor (decrypting with `dec` when given) and writes it to OUT with
// our writer; returns the version the writer ended with.
inline std::uint32_t write_back(const std::filesystem::path& in, const std::filesystem::path& out,
                                tz::format::writer_options options = {},
                                const tz::format::decryption* dec = nullptr) {
  using namespace tz::format;
  auto reader = file_reader::open(in.string());
  REQUIRE(reader);
  auto writer = tensor_writer::create(out.string(), options);
  REQUIRE(writer);
  for (std::size_t i = 0; i < reader->index().tensors.size(); ++i) {
    const auto& e = reader->index().tensors[i];
    auto h = reader->read_header(i);
    REQUIRE(h);
    std::vector<std::byte> data(e.data_length);
    REQUIRE(reader->read_data(i, data));
    if (dec) REQUIRE(decrypt_tensor(*h, data, *dec, reader->index().source));
    REQUIRE(writer->write({e.path, e.type, h->module_index, e.dtype, e.shape, data, e.is_meta()}));
  }
  REQUIRE(writer->close());
  CHECK(writer->version() == reader->index().header.version);
  return writer->version();
}

}  // namespace tz_test
