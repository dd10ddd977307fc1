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

file_digests::file_digests(std::vector<placed_file> files, serialization how) {
  std::sort(files.begin(), files.end(), [](const placed_file& a, const placed_file& b) { return a.base < b.base; });
  for (const auto& f : files) {
    if (how.method != "shards") {
      chains_.push_back({f.name, f.base, f.base + f.size_bytes, f.base, {}});
      continue;
    }
    for (std::uint64_t start = 0; start < f.size_bytes; start += how.shard_size) {
      const auto stop = std::min(f.size_bytes, start + how.shard_size);
      chains_.push_back({f.name + ":" + std::to_string(start) + ":" + std::to_string(stop), f.base + start, f.base + stop,
                         f.base + start, {}});
    }
  }
}

std::vector<byte_observer::extent> file_digests::chains(std::uint64_t) const {
  std::vector<extent> out;
  for (const auto& c : chains_)
    if (c.end > c.begin) out.push_back({c.begin, c.end});
  return out;
}

void file_digests::bytes(std::uint64_t offset, std::span<const std::byte> piece) {
  auto it = std::upper_bound(chains_.begin(), chains_.end(), offset, [](std::uint64_t off, const chain& c) { return off < c.end; });
  if (it == chains_.end() || offset != it->at || offset + piece.size() > it->end) {  // the load's contract broken
    std::lock_guard lock(mutex_);
    broken_ = true;  // never a match
    return;
  }
  it->hasher.update(piece);
  it->at += piece.size();
}

void file_digests::end(std::uint64_t) {
  std::lock_guard lock(mutex_);
  ended_ = true;
  for (auto& c : chains_) {
    if (c.at != c.end) broken_ = true;  // bytes missing: no digests, so the check fails
    digests_[c.resource] = c.hasher.finish();
  }
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

result<std::unique_ptr<signed_load>> signed_load::open(std::span<const loaded_file> loaded, const fs::path& root,
                                                       const fs::path& signature, const trust& who) {
  if (loaded.empty()) return make_error(errc::invalid_argument, "a signed load needs the files it loads");
  for (const auto& f : loaded)
    if (f.path.string().find("://") != std::string::npos)
      return make_error(errc::unsupported, f.path.string() + ": a signature is checked for local models only (a remote "
                                                             "model's other files cannot be listed)");
  TZ_TRY(bundle, read_small_file(signature, "signature"));
  TZ_TRY(expected, verify_bundle(bundle, who, signature.string()));
  auto s = std::unique_ptr<signed_load>(new signed_load);
  const fs::path& first = loaded.front().path;
  const fs::path top = !root.empty()                                          ? root
                       : signs_one_file(expected) && loaded.size() == 1       ? first
                       : first.parent_path().empty()                          ? fs::path(".")
                                                                              : first.parent_path();
  TZ_TRY(files, list_model(top, expected.how, signature));
  std::error_code ec;
  std::vector<placed_file> placed;
  for (auto& f : files) {
    const auto canonical = fs::weakly_canonical(f.path, ec);
    auto hit = std::find_if(loaded.begin(), loaded.end(),
                            [&](const loaded_file& l) { return fs::weakly_canonical(l.path, ec) == canonical; });
    if (hit != loaded.end()) placed.push_back({f.name, hit->base, f.size_bytes});
    else s->others_.push_back(std::move(f));
  }
  if (placed.size() != loaded.size())
    return make_error(errc::invalid_argument, first.string() + ": the loaded files are not all files of the signed model at " + top.string());
  s->expected_ = std::move(expected);
  s->observer_ = std::make_shared<file_digests>(std::move(placed), s->expected_.how);
  // The files beside the weights (configs, tokenizers) are read once, on a thread of their own.
  s->others_digests_ = std::async(std::launch::async, [s = s.get()] {
    return hash_files(s->expected_.model_name, s->others_, s->expected_.how, 1);
  });
  return s;
}

result<void> signed_load::finish() {
  TZ_TRY(actual, others_digests_.get());
  const auto seen = observer_->digests();
  if (!seen) return make_error(errc::hash_mismatch, "model '" + expected_.model_name + "': the load did not hash every byte of its files in order");
  actual.digests.insert(seen->begin(), seen->end());
  actual.model_name = expected_.model_name;
  return compare(expected_, actual);
}

}  // namespace tz::signing
