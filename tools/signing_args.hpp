// The CLI's model-signing options (sign, verify --signature, load --signature): reading keys and
// certificates from files, and the signed-load check shared by verify and load.
#pragma once

#include "cli.hpp"

#include "tz/engine/loader.hpp"
#include "tz/signing/model_signing.hpp"

#include <memory>

namespace tz::cli {

// --signature SIG, --public-key PEM, --certificate-chain PEM (every certificate in it trusted),
// --model-root DIR (the signed model's directory, when it is not the loaded file's).
inline const std::vector<std::string> verify_signature_options{"--signature", "--public-key", "--certificate-chain",
                                                               "--model-root"};
inline constexpr const char* signature_help =
    "signature (OpenSSF model signing; `model_signing sign key|certificate` makes them, as does `tensorizer sign`):\n"
    "  --signature SIG  the model's signature bundle: every file of the model (or of the --model-root\n"
    "                   directory; by default the loaded file's directory, or the file itself when the\n"
    "                   signature covers one file) is hashed, the loaded file as it loads, and nothing\n"
    "                   is reported loaded unless every digest matches; a missing, extra or changed file\n"
    "                   fails naming it and both digests\n"
    "  --public-key PEM the signer's EC public key (key signatures)\n"
    "  --certificate-chain PEM  trusted certificates the signing certificate must chain to\n"
    "                   (certificate signatures); keyless Sigstore signatures are refused\n"
    "  --model-root DIR the signed model's directory\n";

// Who must have signed (from --public-key / --certificate-chain); an error when neither is given.
result<signing::trust> trust_from(const args& a);

// For load --signature: the check of the signature of `l` (opened from `input`: a file, or a
// checkpoint), whose observer goes into the load's options.
result<std::unique_ptr<signing::signed_load>> signed_load_from(const args& a, const loader& l, const std::string& input);

}  // namespace tz::cli
