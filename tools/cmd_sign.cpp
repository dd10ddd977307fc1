// tensorizer sign: signs a model as OpenSSF model signing does (a Sigstore bundle over an in-toto
// statement of every file's SHA-256), so that `model_signing verify` and `tensorizer verify
// --signature` / `load --signature` accept it. Files are hashed on every core.
#include "cli.hpp"
#include "signing_args.hpp"

#include "tz/base/posix_io.hpp"

#include <cstdio>
#include <filesystem>
#include <thread>

using namespace tz;

namespace {

constexpr const char* sign_help =
    "usage: tensorizer sign --private-key PEM [--signing-certificate CERT [--certificate-chain PEM]]\n"
    "                       [--signature OUT] [--shards [--shard-size BYTES]] [--ignore-paths P,Q]\n"
    "                       [--allow-symlinks] [--threads N] MODEL\n"
    "  Signs MODEL (a directory, or one file) with an EC private key (P-256/384/521, unencrypted PEM):\n"
    "  the key method, or with --signing-certificate the certificate method (the bundle carries the\n"
    "  certificate and the chain's certificates). Writes OUT (default model.sig), which\n"
    "  `model_signing verify key|certificate` accepts. git's files and OUT itself are left out.\n"
    "  --shards         one digest per --shard-size bytes of each file (default 1000000000)\n";

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    auto comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    if (comma > at) out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// The certificate method's chain: the signing certificate (which must hold the key) first.
result<std::vector<std::string>> chain_from(const cli::args& a, const ec_key& key) {
  std::vector<std::string> chain;
  auto cert = a.get("--signing-certificate");
  if (!cert) return chain;
  TZ_TRY(pem, signing::read_small_file(*cert, "signing certificate"));
  TZ_TRY(ders, pem_certificates_to_der(pem, "signing certificate " + *cert));
  TZ_TRY(cert_key, certificate_public_key(ders[0], "signing certificate " + *cert));
  if (!cert_key.same_public_key(key))
    return make_error(errc::invalid_argument, "signing certificate " + *cert + ": its public key is not the private key's");
  chain.push_back(ders[0]);
  if (auto more = a.get("--certificate-chain")) {
    TZ_TRY(pem_chain, signing::read_small_file(*more, "certificate chain"));
    TZ_TRY(rest, pem_certificates_to_der(pem_chain, "certificate chain " + *more));
    chain.insert(chain.end(), rest.begin(), rest.end());
  }
  return chain;
}

result<signing::serialization> serialization_from(const cli::args& a, const std::filesystem::path& root,
                                                  const std::filesystem::path& out) {
  signing::serialization how;
  how.allow_symlinks = a.has("--allow-symlinks");
  if (a.has("--shards")) how.method = "shards";
  if (auto v = a.get("--shard-size")) {
    TZ_TRY(n, cli::to_uint("--shard-size", *v));
    if (n == 0) return make_error(errc::invalid_argument, "--shard-size must be positive");
    how.shard_size = n;
  }
  if (auto v = a.get("--ignore-paths")) how.ignore_paths = split_commas(*v);
  // Recorded as model signing records them: git's files, and the signature when inside the model.
  for (const char* git : {".git", ".gitattributes", ".github", ".gitignore"}) how.ignore_paths.emplace_back(git);
  std::error_code ec;
  const auto rel = std::filesystem::weakly_canonical(out, ec).lexically_relative(std::filesystem::weakly_canonical(root, ec));
  if (std::filesystem::is_directory(root) && !rel.empty() && *rel.begin() != "..") how.ignore_paths.push_back(rel.generic_string());
  return how;
}

result<std::string> sign_model(const cli::args& a, const std::string& model, const std::string& out, unsigned threads) {
  TZ_TRY(pem, signing::read_small_file(*a.get("--private-key"), "private key"));
  TZ_TRY(key, ec_key::private_from_pem(pem, "private key " + *a.get("--private-key")));
  TZ_TRY(chain, chain_from(a, key));
  TZ_TRY(how, serialization_from(a, model, out));
  TZ_TRY(files, signing::list_model(model, how, out));
  TZ_TRY(m, signing::hash_files(signing::model_name_of(model), files, how, threads));
  TZ_TRY(bundle, signing::sign_manifest(m, key, chain));
  TZ_CHECK(write_file_atomically(out, std::as_bytes(std::span(bundle.data(), bundle.size()))));
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.size_bytes;
  return std::to_string(files.size()) + " files, " + std::to_string(bytes) + " bytes, " + std::to_string(m.digests.size()) +
         " digests (" + how.method + "), " + (chain.empty() ? "key " + key.curve_name() : "certificate") + " -> " + out;
}

}  // namespace

int cmd_sign(int argc, char** argv) {
  auto a = cli::parse(argc, argv, 2,
                      {"--private-key", "--signing-certificate", "--certificate-chain", "--signature", "--shard-size",
                       "--ignore-paths", "--threads"},
                      {"--shards", "--allow-symlinks", "--help"});
  if (!a) return cli::usage_error("sign", a.error().message, sign_help);
  if (a->has("--help")) return std::printf("%s", sign_help), 0;
  if (a->positional.size() != 1) return cli::usage_error("sign", "expected one MODEL", sign_help);
  if (!a->has("--private-key")) return cli::usage_error("sign", "--private-key is required", sign_help);
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  if (auto v = a->get("--threads")) {
    auto n = cli::to_uint("--threads", *v);
    if (!n || *n == 0 || *n > 4096) return cli::usage_error("sign", "--threads must be 1..4096", sign_help);
    threads = static_cast<unsigned>(*n);
  }
  auto done = sign_model(*a, a->positional[0], a->get("--signature").value_or("model.sig"), threads);
  if (!done) return cli::fail("sign", done.error());
  std::printf("signed: %s\n", done->c_str());
  return 0;
}
