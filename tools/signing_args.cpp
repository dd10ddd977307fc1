// The CLI's model-signing options (see signing_args.hpp).
#include "signing_args.hpp"

#include <fstream>
#include <sstream>

namespace tz::cli {

result<std::string> read_small_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::not_found, std::string(what) + " " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (64u << 20)) return make_error(errc::invalid_argument, std::string(what) + " " + path + ": larger than 64 MiB");
  return text.str();
}

result<signing::trust> trust_from(const args& a) {
  signing::trust who;
  if (auto path = a.get("--public-key")) {
    TZ_TRY(pem, read_small_file(*path, "public key"));
    TZ_TRY(key, ec_key::public_from_pem(pem, "public key " + *path));
    who.public_key = std::move(key);
  }
  if (auto path = a.get("--certificate-chain")) {
    TZ_TRY(pem, read_small_file(*path, "certificate chain"));
    TZ_TRY(ders, pem_certificates_to_der(pem, "certificate chain " + *path));
    who.certificates = std::move(ders);
  }
  if (!who.public_key && who.certificates.empty())
    return make_error(errc::invalid_argument, "--signature needs --public-key or --certificate-chain");
  return who;
}

result<std::unique_ptr<signing::signed_load>> signed_load_from(const args& a, const std::string& model) {
  TZ_TRY(who, trust_from(a));
  if (model.find("://") != std::string::npos)
    return make_error(errc::unsupported, model + ": --signature checks local models (a remote model's other files are not listed)");
  return signing::signed_load::open(model, a.get("--model-root").value_or(""), *a.get("--signature"), who);
}

}  // namespace tz::cli
