// The small models the public-API tests read (tests/api.cmake): written by the project's own writers
// into a directory, so the C++ suite, the C test program and the installed-package consumer all
// check the same bytes. Three float32 tensors with values the readers can recompute:
//   "a" [2,3] = 0..5, "b" [4] = 10..13, "layer.0.weight" [1000] = i / 2.
// Files: plain.tensors, corrupt.tensors (one byte of "b" flipped), key.tensors (encrypted with
// api_test_key: bytes 1..32), passphrase.tensors (api_test_passphrase, the cheapest Argon2id
// parameters), model.safetensors.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/format/shard_index.hpp"
#include "tz/format/writer.hpp"
#include "tz/crypto/sodium.hpp"
#include "tz/signing/model_signing.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tz_test {

inline constexpr const char* api_test_passphrase = "correct horse battery staple";

inline std::array<std::uint8_t, 32> api_test_key() {
  std::array<std::uint8_t, 32> k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(i + 1);
  return k;
}

struct api_tensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> values;
};

inline std::vector<api_tensor> api_test_tensors() {
  std::vector<api_tensor> out{{"a", {2, 3}, {}}, {"b", {4}, {}}, {"layer.0.weight", {1000}, {}}};
  for (int i = 0; i < 6; ++i) out[0].values.push_back(static_cast<float>(i));
  for (int i = 0; i < 4; ++i) out[1].values.push_back(static_cast<float>(10 + i));
  for (int i = 0; i < 1000; ++i) out[2].values.push_back(static_cast<float>(i) / 2);
  return out;
}

template <class T>
T checked(tz::result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message);
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

inline void write_tensors_file(const std::string& path, tz::format::tensor_encryptor* enc) {
  auto w = checked(tz::format::tensor_writer::create(path, {enc}), "create");
  auto f32 = checked(tz::format::dtype_from_torch("torch.float32"), "dtype");
  for (const auto& t : api_test_tensors()) {
    tz::format::tensor_write tw;
    tw.path = tz::format::plain_path(t.name);
    tw.dtype = f32;
    tw.shape = t.shape;
    tw.data = std::as_bytes(std::span<const float>(t.values));
    checked(w.write(tw), "write");
  }
  checked(w.close(), "close");
}

// Flips one byte of tensor "b"'s stored data (plain.tensors' layout, found through the index).
inline void corrupt_b(const std::string& plain, const std::string& out, std::uint64_t b_data_offset) {
  std::ifstream in(plain, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.at(b_data_offset + 1) ^= 0x40;
  std::ofstream(out, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes every file but corrupt.tensors (which needs "b"'s offset: see corrupt_b). Throws on failure.
// A signed model: signed/ (plain.tensors as model.tensors, a config.json), its signature
// signed.sig and the signer's key signed.pub (a test key), and signed_changed/, the same model with
// another config.json. For the signature options of the C ABI and the facade.
inline void write_signed_model(const std::string& dir) {
  constexpr const char* test_key =
      "-----BEGIN PRIVATE KEY-----\n"
      "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgKM8ZMjAT8fpEGZhq\n"
      "/nfLLhwMRk7Aq3uKnaWD4EvpvHWhRANCAAQUajffroyayDPP+Y7Ksyb68ikika8c\n"
      "msSBrnd6mRr1YVejOtQTnnkcaMRiCadyVt4sn9fEskJTpxPonD09saAA\n"
      "-----END PRIVATE KEY-----\n";
  namespace fs = std::filesystem;
  for (const char* d : {"/signed", "/signed_changed"}) {
    fs::create_directories(dir + d);
    fs::copy_file(dir + "/plain.tensors", dir + d + "/model.tensors", fs::copy_options::overwrite_existing);
  }
  std::ofstream(dir + "/signed/config.json") << "{\"architectures\": [\"Test\"]}\n";
  std::ofstream(dir + "/signed_changed/config.json") << "{\"architectures\": [\"Other\"]}\n";
  auto key = checked(tz::ec_key::private_from_pem(test_key, "test key"), "key");
  tz::signing::serialization how;
  auto files = checked(tz::signing::list_model(dir + "/signed", how, dir + "/signed.sig"), "list");
  auto m = checked(tz::signing::hash_files("signed", files, how, 1), "hash");
  auto bundle = checked(tz::signing::sign_manifest(m, key), "sign");
  std::ofstream(dir + "/signed.sig") << bundle;
  std::ofstream(dir + "/signed.pub") << key.public_pem();
}

inline void write_api_test_files(const std::string& dir) {
  write_tensors_file(dir + "/plain.tensors", nullptr);
  auto k = api_test_key();
  auto by_key = tz::format::tensorizer_encryptor::from_key(checked(tz::crypto::secret_key::from_bytes(k), "key"));
  write_tensors_file(dir + "/key.tensors", &by_key);
  auto pass = checked(tz::crypto::passphrase::from_string(api_test_passphrase), "passphrase");
  tz::crypto::kdf_params cheap{1, 8192, tz::crypto::alg_argon2id13, tz::crypto::random_salt()};
  auto by_pass = checked(tz::format::tensorizer_encryptor::from_passphrase(pass, cheap), "derive");
  write_tensors_file(dir + "/passphrase.tensors", &by_pass);
  auto tensors = api_test_tensors();
  std::vector<tz::format::st_write_tensor> st;
  for (const auto& t : tensors) st.push_back({t.name, "F32", t.shape, std::as_bytes(std::span<const float>(t.values))});
  checked(tz::format::write_safetensors(dir + "/model.safetensors", st), "safetensors");
  // The same tensors as a Hugging Face sharded checkpoint: sharded/ with two shards and an index.
  std::filesystem::create_directories(dir + "/sharded");
  tz::format::shard_index index;
  index.shards = {tz::format::shard_file_name(0, 2), tz::format::shard_file_name(1, 2)};
  for (std::size_t s = 0; s < 2; ++s) {
    const auto part = s == 0 ? std::span(st).first(st.size() - 1) : std::span(st).last(1);
    for (const auto& t : part) index.weight_map.emplace_back(t.name, s);
    checked(tz::format::write_safetensors(dir + "/sharded/" + index.shards[s], part), "shard");
  }
  const auto json = checked(tz::format::write_shard_index_json(index), "index");
  std::ofstream(dir + "/sharded/model.safetensors.index.json") << json;
  write_signed_model(dir);
}

}  // namespace tz_test
