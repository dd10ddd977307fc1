// The CLI's model-signing options (see signing_args.hpp).
#include "signing_args.hpp"

#include "tz/sources/signed_load.hpp"

namespace tz::cli {

result<signing::trust> trust_from(const args& a) {
  if (!a.has("--public-key") && !a.has("--certificate-chain"))
    return make_error(errc::invalid_argument, "--signature needs --public-key or --certificate-chain");
  return signing::trust_from_files(a.get("--public-key").value_or(""), a.get("--certificate-chain").value_or(""));
}

result<std::unique_ptr<signing::signed_load>> signed_load_from(const args& a, const loader& l, const std::string& input) {
  TZ_TRY(who, trust_from(a));
  return open_signed_load(l, input, a.get("--model-root").value_or(""), *a.get("--signature"), who);
}

}  // namespace tz::cli
