// _C.Decryption and _C.Encryption: key material in libsodium guarded memory, never printed.
#include "common.hpp"
#include "keys.hpp"

#include <pybind11/stl.h>

#include <cstring>

namespace tz::py {

namespace {

// A view of a bytes-like argument (bytes, bytearray, memoryview), as unsigned bytes.
std::span<const std::uint8_t> bytes_view(const pyb::buffer_info& info) {
  return {static_cast<const std::uint8_t*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize)};
}

crypto::secret_key key_from(const pyb::buffer& key) {
  auto info = key.request();
  return take(crypto::secret_key::from_bytes(bytes_view(info)));
}

crypto::passphrase passphrase_from(const pyb::buffer& source) {
  auto info = source.request();
  auto v = bytes_view(info);
  return take(crypto::passphrase::from_string(std::string_view(reinterpret_cast<const char*>(v.data()), v.size())));
}

pyb::bytes key_bytes(const crypto::secret_key& k) {
  auto b = k.bytes();
  return pyb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

std::unique_ptr<format::tensorizer_encryptor> encryption_keys::make_encryptor() const {
  auto copy = take(crypto::secret_key::from_bytes(key.bytes()));
  if (kdf) return std::make_unique<format::tensorizer_encryptor>(format::tensorizer_encryptor::from_derived_key(std::move(copy), *kdf));
  return std::make_unique<format::tensorizer_encryptor>(format::tensorizer_encryptor::from_key(std::move(copy)));
}

void register_keys(pyb::module_& m) {
  pyb::class_<decryption_keys, std::shared_ptr<decryption_keys>>(m, "Decryption",
                                                                 "How to open an encrypted file: an exact key or a passphrase.")
      .def_static(
          "from_key",
          [](const pyb::buffer& key) {
            return std::make_shared<decryption_keys>(decryption_keys{format::decryption::from_key(key_from(key))});
          },
          pyb::arg("key"), "Exactly 32 key bytes; opens any file, passphrase-encrypted or not.")
      .def_static(
          "from_passphrase",
          [](const pyb::buffer& source) {
            return std::make_shared<decryption_keys>(
                decryption_keys{format::decryption::from_passphrase(passphrase_from(source))});
          },
          pyb::arg("passphrase"), "A passphrase (UTF-8 bytes); each header's Argon2id parameters derive the key.")
      .def("__repr__", [](const decryption_keys&) { return std::string("<tensorizer._C.Decryption>"); });

  pyb::class_<encryption_keys, std::shared_ptr<encryption_keys>>(m, "Encryption",
                                                                 "How to encrypt a file: an exact, random or derived key.")
      .def_static(
          "from_key", [](const pyb::buffer& key) { return std::make_shared<encryption_keys>(encryption_keys{key_from(key), {}}); },
          pyb::arg("key"))
      .def_static("random",
                  [] { return std::make_shared<encryption_keys>(encryption_keys{take(crypto::secret_key::random()), {}}); })
      .def_static(
          "from_passphrase",
          [](const pyb::buffer& source, std::uint64_t opslimit, std::uint64_t memlimit, std::optional<pyb::bytes> salt) {
            crypto::kdf_params params{opslimit, memlimit, crypto::alg_argon2id13, crypto::random_salt()};
            if (salt) {
              std::string s = *salt;
              if (s.size() != crypto::salt_size_bytes)
                raise_error(error{errc::invalid_argument, "salt must be exactly 16 bytes, got " + std::to_string(s.size())});
              std::memcpy(params.salt.data(), s.data(), s.size());
            }
            auto pass = passphrase_from(source);
            std::optional<crypto::secret_key> key;
            {
              pyb::gil_scoped_release release;  // Argon2id takes about a second at the default cost
              auto k = crypto::derive_key(pass, params);
              if (!k) raise_error(k.error());
              key.emplace(std::move(*k));
            }
            return std::make_shared<encryption_keys>(encryption_keys{std::move(*key), params});
          },
          pyb::arg("passphrase"), pyb::arg("opslimit"), pyb::arg("memlimit"), pyb::arg("salt") = pyb::none())
      .def_property_readonly("key", [](const encryption_keys& k) { return key_bytes(k.key); })
      .def_property_readonly("salt",
                             [](const encryption_keys& k) -> std::optional<pyb::bytes> {
                               if (!k.kdf) return std::nullopt;
                               return pyb::bytes(reinterpret_cast<const char*>(k.kdf->salt.data()), k.kdf->salt.size());
                             })
      .def_property_readonly("opslimit",
                             [](const encryption_keys& k) -> std::optional<std::uint64_t> {
                               if (!k.kdf) return std::nullopt;
                               return k.kdf->opslimit;
                             })
      .def_property_readonly("memlimit",
                             [](const encryption_keys& k) -> std::optional<std::uint64_t> {
                               if (!k.kdf) return std::nullopt;
                               return k.kdf->memlimit_bytes;
                             })
      .def("__repr__", [](const encryption_keys&) { return std::string("<tensorizer._C.Encryption>"); });
}

}  // namespace tz::py
