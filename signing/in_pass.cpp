// Signed loads: the weights file's digests taken from the bytes the load reads (file_digests, a
// byte_observer the pipeline feeds in file order), the model's other files hashed on a thread beside
// the load, one comparison at the end (model_signing.hpp).
#include "tz/signing/model_signing.hpp"

#include "tz/base/posix_io.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

namespace tz::signing {
namespace fs = std::filesystem;

file_digests::file_digests(std::string name, serialization how) : name_(std::move(name)), how_(std::move(how)) {}

file_digests::chain& file_digests::chain_at(std::uint64_t offset) {
  const std::uint64_t start = chain_bytes() == 0 ? 0 : offset / chain_bytes() * chain_bytes();
  std::lock_guard lock(mutex_);
  auto [it, fresh] = chains_.try_emplace(start);
  if (fresh) it->second.start = it->second.at = start;
  return it->second;  // std::map: stays put while other chains are added
}

void file_digests::bytes(std::uint64_t offset, std::span<const std::byte> piece) {
  auto& c = chain_at(offset);
  const bool crosses = chain_bytes() != 0 && offset + piece.size() > c.start + chain_bytes();
  if (offset != c.at || crosses) {  // the load's contract broken: never let it pass as a match
    std::lock_guard lock(mutex_);
    broken_ = true;
    return;
  }
  c.hasher.update(piece);
  c.at += piece.size();
}

void file_digests::end(std::uint64_t size) {
  std::lock_guard lock(mutex_);
  ended_ = true;
  if (size == 0 && how_.method != "shards") chains_.try_emplace(0);  // an empty file has a digest
  std::uint64_t expected = 0;  // the chains must tile [0, size)
  for (auto& [start, c] : chains_) {
    if (start != expected || (c.at != std::min(size, start + (chain_bytes() ? chain_bytes() : size)))) broken_ = true;
    expected = c.at;
    if (how_.method == "shards") digests_[name_ + ":" + std::to_string(start) + ":" + std::to_string(c.at)] = c.hasher.finish();
    else digests_[name_] = c.hasher.finish();
  }
  if (expected != size) broken_ = true;
}

std::optional<std::map<std::string, sha256_digest>> file_digests::digests() const {
  std::lock_guard lock(mutex_);
  if (!ended_ || broken_) return std::nullopt;
  return digests_;
}

result<std::string> read_small_file(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::not_found, std::string(what) + " " + path.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (64u << 20)) return make_error(errc::invalid_argument, std::string(what) + " " + path.string() + ": over 64 MiB");
  return text.str();
}

result<trust> trust_from_files(const std::string& public_key_path, const std::string& certificate_chain_path) {
  trust who;
  if (!public_key_path.empty()) {
    TZ_TRY(pem, read_small_file(public_key_path, "public key"));
    TZ_TRY(key, ec_key::public_from_pem(pem, "public key " + public_key_path));
    who.public_key = std::move(key);
  }
  if (!certificate_chain_path.empty()) {
    TZ_TRY(pem, read_small_file(certificate_chain_path, "certificate chain"));
    TZ_TRY(ders, pem_certificates_to_der(pem, "certificate chain " + certificate_chain_path));
    who.certificates = std::move(ders);
  }
  if (!who.public_key && who.certificates.empty())
    return make_error(errc::invalid_argument, "a signature check needs the signer's public key or a trusted certificate chain");
  return who;
}

namespace {

// A one-file model is signed as ".": its manifest's only file.
bool signs_one_file(const manifest& m) {
  return !m.digests.empty() && std::all_of(m.digests.begin(), m.digests.end(), [](const auto& d) {
           return d.first == "." || d.first.rfind(".:", 0) == 0;
         });
}

}  // namespace

result<std::unique_ptr<signed_load>> signed_load::open(const fs::path& model, const fs::path& root,
                                                       const fs::path& signature, const trust& who) {
  if (model.string().find("://") != std::string::npos)
    return make_error(errc::unsupported, model.string() + ": a signature is checked for local models only (a remote "
                                                          "model's other files cannot be listed)");
  TZ_TRY(bundle, read_small_file(signature, "signature"));
  TZ_TRY(expected, verify_bundle(bundle, who, signature.string()));
  auto s = std::unique_ptr<signed_load>(new signed_load);
  const fs::path top = !root.empty() ? root : signs_one_file(expected) ? model : model.parent_path().empty() ? fs::path(".") : model.parent_path();
  TZ_TRY(files, list_model(top, expected.how, signature));
  std::error_code ec;
  const auto loaded = fs::weakly_canonical(model, ec);
  for (auto& f : files) {
    if (fs::weakly_canonical(f.path, ec) == loaded) s->loaded_name_ = f.name;
    else s->others_.push_back(std::move(f));
  }
  if (s->loaded_name_.empty())
    return make_error(errc::invalid_argument, model.string() + ": not a file of the signed model at " + top.string());
  s->expected_ = std::move(expected);
  s->observer_ = std::make_shared<file_digests>(s->loaded_name_, s->expected_.how);
  // The files beside the weights (configs, tokenizers) are read once, on a thread of their own.
  s->others_digests_ = std::async(std::launch::async, [s = s.get()] {
    return hash_files(s->expected_.model_name, s->others_, s->expected_.how, 1);
  });
  return s;
}

result<void> signed_load::finish() {
  TZ_TRY(actual, others_digests_.get());
  const auto seen = observer_->digests();
  if (!seen) return make_error(errc::hash_mismatch, loaded_name_ + ": the load did not hash every byte of it in order");
  actual.digests.insert(seen->begin(), seen->end());
  actual.model_name = expected_.model_name;
  return compare(expected_, actual);
}

}  // namespace tz::signing
