// Signed models, as OpenSSF model signing (the `model-signing` package, 1.x) makes and checks them:
// a Sigstore bundle (v0.3 JSON) holding a DSSE envelope over an in-toto statement whose predicate
// lists every file of the model, or every shard of each file, with its SHA-256. Signing with an EC
// key; verifying with the public key or with a certificate chain to a CA the caller gives, offline.
// A model's bytes are hashed either in a pass of their own (hash_model: `tensorizer sign`/`verify`)
// or as a load reads them (file_digests, an engine byte_observer: `load --signature`).
#pragma once

#include "tz/base/byte_observer.hpp"
#include "tz/base/error.hpp"
#include "tz/crypto/hash.hpp"
#include "tz/crypto/signature.hpp"

#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tz::signing {

// How a model became resources (the predicate's "serialization").
struct serialization {
  std::string method = "files";  // "files": one resource per file; "shards": per shard_size bytes of each
  std::uint64_t shard_size = 1'000'000'000;  // model signing's default
  bool allow_symlinks = false;
  std::vector<std::string> ignore_paths;  // relative to the model root (a directory ignores what is under it)
};

// Resource name -> SHA-256. Names: the path relative to the model root ("." for a model that is
// one file); shards add ":start:end" (end excluded).
struct manifest {
  std::string model_name;
  serialization how;
  std::map<std::string, sha256_digest> digests;
};

// Whom a signature must come from: a public key (the key method), or trusted certificates that
// the signature's chain must reach (the certificate method). Keyless Sigstore signatures are
// refused: they need Sigstore's trust root and transparency log, which these do not give.
struct trust {
  std::optional<ec_key> public_key;
  std::vector<std::string> certificates;  // DER
};

// Who must have signed, from PEM files: a public key, or trusted certificates (every one in the
// file); either path may be empty, not both. Errors name the file.
result<trust> trust_from_files(const std::string& public_key_path, const std::string& certificate_chain_path);

// A whole small file (a key, certificates, a signature: at most 64 MiB). `what` names it in errors.
result<std::string> read_small_file(const std::filesystem::path& path, const char* what);

// Checks a bundle's signature against `who` and returns the manifest it signs (its root digest
// checked against its resources). `what` names the signature file in errors.
result<manifest> verify_bundle(std::string_view bundle_json, const trust& who, const std::string& what);

// A bundle signing `m` with `key`; with `chain` (DER, the signing certificate first) the
// certificate method, else the key method (the bundle names the key by its SHA-256 hint).
result<std::string> sign_manifest(const manifest& m, const ec_key& key, std::span<const std::string> chain = {});

// A file of a model on disk, named as a manifest names it.
struct model_file {
  std::string name;
  std::filesystem::path path;
  std::uint64_t size_bytes = 0;
};

// The files of the model at `root` (a directory, or one file) that a manifest of `how` covers:
// every regular file under it except the ignored paths, git's files (.git/, .gitattributes,
// .github/, .gitignore) and `signature` (the signature file, when it lies inside), sorted by name.
// A symbolic link is refused unless how.allow_symlinks; anything but files and directories is.
result<std::vector<model_file>> list_model(const std::filesystem::path& root, const serialization& how,
                                           const std::filesystem::path& signature);

// Hashes `files` (per how.method) on up to `threads` threads: the N-core pass.
result<manifest> hash_files(const std::string& model_name, std::span<const model_file> files, const serialization& how,
                            unsigned threads);

// The model's name as model signing records it: the last component of its path.
std::string model_name_of(const std::filesystem::path& root);

// Fails unless `actual` holds exactly `expected`'s resources with the same digests, naming the
// first missing, extra or different resource (and both digests), as model signing's verify does.
result<void> compare(const manifest& expected, const manifest& actual);

// A file of a model where a load's source holds it: one file at 0, or a sharded checkpoint's
// shards, each at its base in the loader's address space.
struct placed_file {
  std::string name;  // as the manifest names it
  std::uint64_t base = 0, size_bytes = 0;
};

// The digests of the files a load reads, taken from its bytes (a byte_observer): each file's
// SHA-256, or each shard's, every file and shard a chain of its own (hashed side by side).
class file_digests final : public byte_observer {
 public:
  file_digests(std::vector<placed_file> files, serialization how);
  void bytes(std::uint64_t offset, std::span<const std::byte> piece) override;
  void end(std::uint64_t size) override;
  std::vector<extent> chains(std::uint64_t size) const override;
  // The resources seen, once end() was called after every byte of every chain in order; nullopt otherwise.
  std::optional<std::map<std::string, sha256_digest>> digests() const;

 private:
  struct chain {  // a shard, or a whole file
    std::string resource;
    std::uint64_t begin = 0, end = 0, at = 0;
    sha256_hasher hasher;
  };
  std::vector<chain> chains_;  // in offset order; each fed by one caller at a time
  mutable std::mutex mutex_;   // the flags and the digests
  bool ended_ = false, broken_ = false;
  std::map<std::string, sha256_digest> digests_;
};

// A signed load's check: the signature verified up front, the model's other files hashed beside the
// load, the loaded files' digests taken in the load (observer()); finish() compares them all.
class signed_load {
 public:
  // A loaded file: its local path and where the load's source holds it (0 for one file; a
  // checkpoint's shard at its base).
  struct loaded_file {
    std::filesystem::path path;
    std::uint64_t base = 0;
  };
  // `loaded` are the weights files a load reads (local paths: a remote model's other files cannot
  // be listed); the model is their directory unless `root` names one, or the file alone when the
  // signature covers one file.
  static result<std::unique_ptr<signed_load>> open(std::span<const loaded_file> loaded, const std::filesystem::path& root,
                                                   const std::filesystem::path& signature, const trust& who);
  std::shared_ptr<byte_observer> observer() const { return observer_; }
  // After the load: every digest matched, or an error naming the file and both digests.
  result<void> finish();

 private:
  manifest expected_;
  std::shared_ptr<file_digests> observer_;
  std::vector<model_file> others_;
  std::future<result<manifest>> others_digests_;
};

}  // namespace tz::signing
