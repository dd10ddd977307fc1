// Model signing's signature file: the Sigstore bundle (v0.3 JSON), its DSSE envelope and the in-toto
// statement inside (model_signing.hpp). Parsing checks every field it relies on and names it.
#include "tz/signing/model_signing.hpp"

#include <boost/json.hpp>

#include <algorithm>

namespace tz::signing {
namespace json = boost::json;
namespace {

constexpr std::string_view bundle_media_type = "application/vnd.dev.sigstore.bundle.v0.3+json";
constexpr std::string_view payload_type = "application/vnd.in-toto+json";
constexpr std::string_view statement_type = "https://in-toto.io/Statement/v1";
constexpr std::string_view predicate_type = "https://model_signing/signature/v1.0";

// DSSE's pre-authentication encoding: what the signature signs.
std::string pae(std::string_view payload) {
  return "DSSEv1 " + std::to_string(payload_type.size()) + " " + std::string(payload_type) + " " +
         std::to_string(payload.size()) + " " + std::string(payload);
}

// The field at `path` (dotted, for messages) of `v`, with a clear error when absent or mistyped.
result<const json::value*> field(const json::value& v, std::string_view key, const std::string& where) {
  const auto* object = v.if_object();
  const json::value* found = object ? object->if_contains(key) : nullptr;
  if (!found) return make_error(errc::format, where + ": no \"" + std::string(key) + "\"");
  return found;
}

result<std::string> string_field(const json::value& v, std::string_view key, const std::string& where) {
  TZ_TRY(found, field(v, key, where));
  if (!found->is_string()) return make_error(errc::format, where + ": \"" + std::string(key) + "\" is not a string");
  return std::string(found->get_string());
}

result<sha256_digest> parse_digest(std::string_view hex, const std::string& where) {
  sha256_digest d{};
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (hex.size() != 64) return make_error(errc::format, where + ": a SHA-256 digest has 64 hex digits, got '" + std::string(hex) + "'");
  for (std::size_t i = 0; i < 32; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return make_error(errc::format, where + ": '" + std::string(hex) + "' is not lower-case hex");
    d[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return d;
}

std::string algorithm_of(const serialization& how) {
  return how.method == "shards" ? "sha256-sharded-" + std::to_string(how.shard_size) : "sha256";
}

result<serialization> parse_serialization(const json::value& v, const std::string& where) {
  serialization how;
  TZ_TRY(method, string_field(v, "method", where));
  TZ_TRY(hash_type, string_field(v, "hash_type", where));
  if (method != "files" && method != "shards")
    return make_error(errc::unsupported, where + ": serialization method '" + method + "' (known: files, shards)");
  if (hash_type != "sha256")
    return make_error(errc::unsupported, where + ": hash type '" + hash_type + "' (supported: sha256)");
  how.method = method;
  if (const auto* s = v.as_object().if_contains("allow_symlinks"); s && s->is_bool()) how.allow_symlinks = s->get_bool();
  if (method == "shards") {
    TZ_TRY(size, field(v, "shard_size", where));
    const double d = size->is_number() ? size->to_number<double>() : 0;
    if (!(d >= 1) || d != static_cast<double>(static_cast<std::uint64_t>(d)))
      return make_error(errc::format, where + ": shard_size must be a positive integer");
    how.shard_size = static_cast<std::uint64_t>(d);
  }
  if (const auto* ignored = v.as_object().if_contains("ignore_paths"); ignored && ignored->is_array())
    for (const auto& p : ignored->as_array())
      if (p.is_string()) how.ignore_paths.emplace_back(p.get_string());
  return how;
}

// The statement's manifest, its root digest checked against its resources (in their order).
result<manifest> parse_statement(std::string_view payload, const std::string& what) {
  boost::system::error_code ec;
  auto v = json::parse(payload, ec);
  if (ec) return make_error(errc::format, what + ": the signed statement is not JSON (" + ec.message() + ")");
  TZ_TRY(type, string_field(v, "_type", what + ": statement"));
  if (type != statement_type) return make_error(errc::format, what + ": statement type '" + type + "', expected " + std::string(statement_type));
  TZ_TRY(predicate_kind, string_field(v, "predicateType", what + ": statement"));
  if (predicate_kind != predicate_type)
    return make_error(errc::unsupported, what + ": predicate type '" + predicate_kind + "' (supported: " + std::string(predicate_type) + ")");
  TZ_TRY(subjects, field(v, "subject", what + ": statement"));
  if (!subjects->is_array() || subjects->as_array().size() != 1)
    return make_error(errc::format, what + ": the statement must have exactly one subject");
  const auto& subject = subjects->as_array()[0];
  manifest m;
  TZ_TRY(name, string_field(subject, "name", what + ": subject"));
  m.model_name = name;
  TZ_TRY(digest, field(subject, "digest", what + ": subject"));
  TZ_TRY(root_hex, string_field(*digest, "sha256", what + ": subject digest"));
  TZ_TRY(predicate, field(v, "predicate", what + ": statement"));
  TZ_TRY(how_value, field(*predicate, "serialization", what + ": predicate"));
  TZ_TRY(how, parse_serialization(*how_value, what + ": serialization"));
  m.how = std::move(how);
  TZ_TRY(resources, field(*predicate, "resources", what + ": predicate"));
  if (!resources->is_array()) return make_error(errc::format, what + ": \"resources\" is not a list");
  sha256_hasher root;
  for (const auto& r : resources->as_array()) {
    TZ_TRY(rname, string_field(r, "name", what + ": resource"));
    TZ_TRY(algorithm, string_field(r, "algorithm", what + ": resource " + rname));
    TZ_TRY(hex, string_field(r, "digest", what + ": resource " + rname));
    if (algorithm != algorithm_of(m.how))
      return make_error(errc::unsupported, what + ": resource " + rname + " uses '" + algorithm + "', expected '" + algorithm_of(m.how) + "'");
    TZ_TRY(d, parse_digest(hex, what + ": resource " + rname));
    root.update(std::as_bytes(std::span(d)));
    if (!m.digests.emplace(rname, d).second) return make_error(errc::format, what + ": resource " + rname + " is listed twice");
  }
  const auto computed = root.finish();
  if (to_hex(computed) != root_hex)
    return make_error(errc::crypto, what + ": inconsistent manifest: the subject's digest is " + root_hex +
                                        " but the resources hash to " + to_hex(computed));
  return m;
}

// The key the bundle's verification material leads to under `who`.
result<ec_key> signer_key(const json::value& material, const trust& who, const std::string& what) {
  const auto& o = material.as_object();
  if (o.contains("certificate") || (o.contains("tlogEntries") && o.at("tlogEntries").is_array() && !o.at("tlogEntries").as_array().empty()))
    return make_error(errc::unsupported, what + ": a keyless Sigstore signature (a Fulcio certificate and transparency-log "
                                                "entries): checking it needs Sigstore's trust root and log, which this offline "
                                                "verifier does not take; verify it with `model_signing verify sigstore`, or sign "
                                                "with a key or a certificate");
  if (const auto* chain = o.if_contains("x509CertificateChain")) {
    if (who.certificates.empty())
      return make_error(errc::invalid_argument, what + ": signed with a certificate: give the trusted chain (--certificate-chain)");
    TZ_TRY(list, field(*chain, "certificates", what + ": x509CertificateChain"));
    std::vector<std::string> ders;
    for (const auto& c : list->is_array() ? list->as_array() : json::array{}) {
      TZ_TRY(b64, string_field(c, "rawBytes", what + ": certificate"));
      TZ_TRY(der, base64_decode(b64, what + ": certificate"));
      ders.push_back(std::move(der));
    }
    return verify_certificate_chain(ders, who.certificates);
  }
  if (!who.public_key)
    return make_error(errc::invalid_argument, what + ": signed with a key: give its public key (--public-key)");
  if (const auto* key = o.if_contains("publicKey")) {
    const auto* hint = key->is_object() ? key->as_object().if_contains("hint") : nullptr;
    if (hint && hint->is_string() && !hint->get_string().empty()) {
      const auto pem = who.public_key->public_pem();
      const auto expected = to_hex(sha256(std::as_bytes(std::span(pem.data(), pem.size()))));
      if (hint->get_string() != expected)
        return make_error(errc::crypto, what + ": signed by another key: the signature names key " +
                                            std::string(hint->get_string()) + ", the given public key is " + expected);
    }
  }
  return *who.public_key;
}

}  // namespace

result<manifest> verify_bundle(std::string_view bundle_json, const trust& who, const std::string& what) {
  boost::system::error_code ec;
  auto bundle = json::parse(bundle_json, ec);
  if (ec || !bundle.is_object()) return make_error(errc::format, what + ": not a JSON signature bundle");
  TZ_TRY(media, string_field(bundle, "mediaType", what));
  if (media != bundle_media_type)
    return make_error(errc::unsupported, what + ": bundle media type '" + media + "', expected " + std::string(bundle_media_type));
  TZ_TRY(material, field(bundle, "verificationMaterial", what));
  if (!material->is_object()) return make_error(errc::format, what + ": \"verificationMaterial\" is not an object");
  TZ_TRY(key, signer_key(*material, who, what));
  TZ_TRY(envelope, field(bundle, "dsseEnvelope", what));
  TZ_TRY(type, string_field(*envelope, "payloadType", what + ": dsseEnvelope"));
  if (type != payload_type) return make_error(errc::format, what + ": payload type '" + type + "', expected " + std::string(payload_type));
  TZ_TRY(payload_b64, string_field(*envelope, "payload", what + ": dsseEnvelope"));
  TZ_TRY(payload, base64_decode(payload_b64, what + ": payload"));
  TZ_TRY(signatures, field(*envelope, "signatures", what + ": dsseEnvelope"));
  if (!signatures->is_array() || signatures->as_array().size() != 1)
    return make_error(errc::format, what + ": the envelope must carry exactly one signature");
  TZ_TRY(sig_b64, string_field(signatures->as_array()[0], "sig", what + ": signature"));
  TZ_TRY(sig, base64_decode(sig_b64, what + ": signature"));
  if (!key.verify(pae(payload), sig))
    return make_error(errc::crypto, what + ": the signature does not verify under the " +
                                        std::string(who.certificates.empty() ? "given public key" : "signing certificate's key") +
                                        " (a different signer, or the statement was changed)");
  return parse_statement(payload, what);
}

result<std::string> sign_manifest(const manifest& m, const ec_key& key, std::span<const std::string> chain) {
  json::array resources;
  sha256_hasher root;
  std::vector<std::pair<std::string, sha256_digest>> ordered(m.digests.begin(), m.digests.end());
  for (const auto& [name, d] : ordered) {
    root.update(std::as_bytes(std::span(d)));
    resources.push_back(json::object{{"name", name}, {"algorithm", algorithm_of(m.how)}, {"digest", to_hex(d)}});
  }
  json::object how{{"method", m.how.method}, {"hash_type", "sha256"}, {"allow_symlinks", m.how.allow_symlinks}};
  if (m.how.method == "shards") how["shard_size"] = m.how.shard_size;
  if (!m.how.ignore_paths.empty()) {
    json::array ignored;
    for (const auto& p : m.how.ignore_paths) ignored.push_back(json::string(p));
    how["ignore_paths"] = std::move(ignored);
  }
  const auto root_digest = root.finish();
  json::object statement{
      {"_type", statement_type},
      {"subject", json::array{json::object{{"name", m.model_name}, {"digest", json::object{{"sha256", to_hex(root_digest)}}}}}},
      {"predicateType", predicate_type},
      {"predicate", json::object{{"serialization", std::move(how)}, {"resources", std::move(resources)}}}};
  const std::string payload = json::serialize(statement);
  TZ_TRY(sig, key.sign(pae(payload)));
  json::object material{{"tlogEntries", json::array{}}};
  if (chain.empty()) {
    const auto pem = key.public_pem();
    material["publicKey"] = json::object{{"hint", to_hex(sha256(std::as_bytes(std::span(pem.data(), pem.size()))))}};
  } else {
    json::array certificates;
    for (const auto& der : chain) certificates.push_back(json::object{{"rawBytes", base64_encode(der)}});
    material["x509CertificateChain"] = json::object{{"certificates", std::move(certificates)}};
  }
  json::object bundle{{"mediaType", bundle_media_type},
                      {"verificationMaterial", std::move(material)},
                      {"dsseEnvelope", json::object{{"payload", base64_encode(payload)},
                                                    {"payloadType", payload_type},
                                                    {"signatures", json::array{json::object{{"sig", base64_encode(sig)}, {"keyid", ""}}}}}}};
  return json::serialize(bundle);
}

}  // namespace tz::signing
