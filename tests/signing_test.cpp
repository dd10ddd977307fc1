// Signed models (signing/): the signature bundle signed and verified, and refused when its statement,
// key or material is not what the caller trusts; a file's digests taken from pieces as a load hands
// them over (whole and sharded, any cut), and refused out of order; the engine's observed loads hand
// over every byte of the file in order, whatever the load selects, verifies or decrypts, and nothing
// complete when a read fails. (Interop with OpenSSF's model-signing: signing_interop.sh.)
#include "tz/backends/memory_source.hpp"
#include "tz/crypto/sodium.hpp"
#include "tz/engine/loader.hpp"
#include "tz/format/encryption.hpp"
#include "tz/signing/model_signing.hpp"

#include "float_model.hpp"
#include "temp_dir.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <fstream>
#include <mutex>
#include <random>

namespace {

// Test keys, made for this file only (openssl ecparam -name prime256v1 -genkey | openssl pkcs8 -topk8 -nocrypt).
constexpr const char* signer_pem =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgKM8ZMjAT8fpEGZhq\n"
    "/nfLLhwMRk7Aq3uKnaWD4EvpvHWhRANCAAQUajffroyayDPP+Y7Ksyb68ikika8c\n"
    "msSBrnd6mRr1YVejOtQTnnkcaMRiCadyVt4sn9fEskJTpxPonD09saAA\n"
    "-----END PRIVATE KEY-----\n";
constexpr const char* other_pem =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgeQDnA1jEq9/KnD7a\n"
    "HDZIxkMmGdRmhFfom9Vzx8d6WcOhRANCAATVJh0ZLx2h2sz3SMYla0FMMZQZi33j\n"
    "xB5xWRomOzySwEKH47SacT5msAmDwTHv2YGQy4SdPcmO+1Qh2JHEcOpB\n"
    "-----END PRIVATE KEY-----\n";

tz::ec_key private_key(const char* pem) { return tz::ec_key::private_from_pem(pem, "test key").value(); }
tz::ec_key public_half(const tz::ec_key& k) { return tz::ec_key::public_from_pem(k.public_pem(), "test key").value(); }

tz::signing::manifest sample_manifest() {
  tz::signing::manifest m;
  m.model_name = "sample";
  m.digests["model.tensors"] = tz::sha256(std::as_bytes(std::span("weights", 7)));
  m.digests["config.json"] = tz::sha256(std::as_bytes(std::span("{}", 2)));
  return m;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Re-encodes the bundle's statement after `change` (the signature then no longer covers it).
std::string with_statement_changed(const std::string& bundle, void (*change)(boost::json::object&)) {
  auto b = boost::json::parse(bundle).as_object();
  auto& env = b["dsseEnvelope"].as_object();
  auto payload = tz::base64_decode(std::string(env["payload"].as_string()), "payload").value();
  auto statement = boost::json::parse(payload).as_object();
  change(statement);
  env["payload"] = tz::base64_encode(boost::json::serialize(statement));
  return boost::json::serialize(b);
}

// Records what an observed load hands over, checking it comes in order.
struct recording_observer final : tz::byte_observer {
  std::mutex mutex;
  std::vector<std::byte> seen;
  bool in_order = true, ended = false;
  std::uint64_t end_size = 0;
  void bytes(std::uint64_t offset, std::span<const std::byte> piece) override {
    std::lock_guard lock(mutex);
    in_order = in_order && offset == seen.size();
    seen.insert(seen.end(), piece.begin(), piece.end());
  }
  void end(std::uint64_t size) override {
    std::lock_guard lock(mutex);
    ended = true, end_size = size;
  }
};

// Chains of `chain` bytes: each chain's pieces in order; records when each chain began and ended.
struct chained_observer final : tz::byte_observer {
  explicit chained_observer(std::uint64_t chain, std::size_t size)
      : chain(chain), seen(size), at((size + chain - 1) / chain), began(at.size(), -1), ended(at.size(), -1) {
    for (std::size_t k = 0; k < at.size(); ++k) at[k] = k * chain;
  }
  std::vector<extent> chains(std::uint64_t size) const override {
    std::vector<extent> out;
    for (std::uint64_t b = 0; b < size; b += chain) out.push_back({b, std::min(size, b + chain)});
    return out;
  }
  void bytes(std::uint64_t offset, std::span<const std::byte> piece) override {
    std::lock_guard lock(mutex);
    const std::size_t k = offset / chain;
    in_order = in_order && offset == at[k] && offset + piece.size() <= std::min<std::uint64_t>(seen.size(), (k + 1) * chain);
    if (at[k] == k * chain) began[k] = events;
    std::copy(piece.begin(), piece.end(), seen.begin() + static_cast<std::ptrdiff_t>(offset));
    at[k] += piece.size();
    if (at[k] == std::min<std::uint64_t>(seen.size(), (k + 1) * chain)) ended[k] = events;
    ++events;
  }
  void end(std::uint64_t) override { finished = true; }
  std::uint64_t chain;
  std::mutex mutex;
  std::vector<std::byte> seen;
  std::vector<std::uint64_t> at;
  std::vector<long> began, ended;  // per chain: the piece (counted over all chains) it began / ended with
  long events = 0;
  bool in_order = true, finished = false;
};

}  // namespace

TEST_CASE("a signed manifest verifies under its key, and its statement, key and material are checked") {
  const auto key = private_key(signer_pem);
  const auto m = sample_manifest();
  const auto bundle = tz::signing::sign_manifest(m, key).value();
  tz::signing::trust who{public_half(key), {}};
  auto back = tz::signing::verify_bundle(bundle, who, "sig");
  REQUIRE_MESSAGE(back.has_value(), back.error().message);
  CHECK(back->digests == m.digests);
  CHECK(back->model_name == "sample");
  CHECK(back->how.method == "files");

  SUBCASE("a changed digest in the statement breaks the signature") {
    auto forged = with_statement_changed(bundle, [](boost::json::object& s) {
      s["predicate"].as_object()["resources"].as_array()[0].as_object()["digest"] = std::string(64, '0');
    });
    auto r = tz::signing::verify_bundle(forged, who, "sig");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::crypto);
    CHECK_MESSAGE(contains(r.error().message, "does not verify"), r.error().message);
  }
  SUBCASE("another key is named by its hint, and refused") {
    tz::signing::trust other{public_half(private_key(other_pem)), {}};
    auto r = tz::signing::verify_bundle(bundle, other, "sig");
    REQUIRE_FALSE(r.has_value());
    CHECK_MESSAGE(contains(r.error().message, "signed by another key"), r.error().message);
  }
  SUBCASE("no key given, a certificate-chain bundle without a chain, and keyless bundles fail clearly") {
    auto none = tz::signing::verify_bundle(bundle, {}, "sig");
    REQUIRE_FALSE(none.has_value());
    CHECK(none.error().code == tz::errc::invalid_argument);
    auto b = boost::json::parse(bundle).as_object();
    b["verificationMaterial"] = boost::json::object{{"certificate", boost::json::object{{"rawBytes", "AAAA"}}}};
    auto keyless = tz::signing::verify_bundle(boost::json::serialize(b), who, "sig");
    REQUIRE_FALSE(keyless.has_value());
    CHECK(keyless.error().code == tz::errc::unsupported);
    CHECK_MESSAGE(contains(keyless.error().message, "keyless"), keyless.error().message);
    const std::string chain[] = {"not DER"};
    auto with_chain = tz::signing::sign_manifest(m, key, chain);  // signing does not check the chain
    REQUIRE(with_chain.has_value());
    auto no_trust = tz::signing::verify_bundle(*with_chain, who, "sig");
    REQUIRE_FALSE(no_trust.has_value());
    CHECK_MESSAGE(contains(no_trust.error().message, "--certificate-chain"), no_trust.error().message);
  }
  SUBCASE("a bundle that is not one fails naming the field") {
    for (const char* text : {"", "[]", "{\"mediaType\": \"application/vnd.dev.sigstore.bundle.v0.3+json\"}"}) {
      auto r = tz::signing::verify_bundle(text, who, "sig");
      REQUIRE_FALSE(r.has_value());
      CHECK(r.error().code == tz::errc::format);
    }
  }
}

TEST_CASE("a file's digests from the pieces a load hands over equal a pass over the file, whole or sharded") {
  tz_test::temp_dir dir;
  std::vector<std::byte> data(3'000'017);
  std::mt19937 rng(7);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  const auto path = dir.path / "w.bin";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  for (const char* method : {"files", "shards"}) {
    CAPTURE(method);
    tz::signing::serialization how;
    how.method = method;
    how.shard_size = 1'000'003;  // pieces cross shard ends
    const tz::signing::model_file f{"w.bin", path, data.size()};
    auto pass = tz::signing::hash_files("m", std::span(&f, 1), how, 2).value();
    CHECK(pass.digests.size() == (how.method == "shards" ? 3u + 1u : 1u));  // 3 whole shards and 8 bytes
    tz::signing::file_digests seen({{"w.bin", 0, data.size()}}, how);
    // Pieces of random sizes, cut at the shards' ends (as a load cuts them); the shards' pieces
    // interleaved, as a load hands its chains over side by side.
    const std::uint64_t chain = how.method == "shards" ? how.shard_size : data.size();
    CHECK(seen.chains(data.size()).size() == (how.method == "shards" ? 4u : 1u));
    std::vector<std::uint64_t> at;
    for (std::uint64_t c = 0; c < data.size(); c += chain) at.push_back(c);
    for (bool more = true; more;) {
      more = false;
      for (std::size_t k = 0; k < at.size(); ++k) {
        const std::uint64_t end = std::min<std::uint64_t>(data.size(), (k + 1) * chain);
        if (at[k] == end) continue;
        const std::size_t n = std::min<std::size_t>(end - at[k], 1 + rng() % 400'000);
        seen.bytes(at[k], std::span(data).subspan(at[k], n));
        at[k] += n;
        more = true;
      }
    }
    CHECK_FALSE(seen.digests().has_value());  // not ended yet
    seen.end(data.size());
    REQUIRE(seen.digests().has_value());
    CHECK(*seen.digests() == pass.digests);
    if (how.method == "shards") {  // a piece across a shard's end breaks the contract: never a match
      tz::signing::file_digests across({{"w.bin", 0, data.size()}}, how);
      across.bytes(0, std::span(data).first(how.shard_size + 1));
      across.end(data.size());
      CHECK_FALSE(across.digests().has_value());
    }
    tz::signing::file_digests skipped({{"w.bin", 0, data.size()}}, how);  // a piece out of order: never a match
    skipped.bytes(0, std::span(data).first(10));
    skipped.bytes(20, std::span(data).subspan(20, 10));
    skipped.end(data.size());
    CHECK_FALSE(skipped.digests().has_value());
  }
}

TEST_CASE("an observed load hands over every byte of the file in order, whatever it selects, verifies or decrypts") {
  tz::scheduler sched(2);
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  for (bool encrypted : {false, true}) {
    const auto bytes = tz_test::write_floats(20, 150'000, encrypted ? &enc : nullptr);
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
    for (bool verify : {false, true}) {
      for (std::vector<std::size_t> which : {std::vector<std::size_t>{}, std::vector<std::size_t>{3, 4, 11, 17}}) {
        CAPTURE(encrypted);
        CAPTURE(verify);
        const std::size_t selected = which.size();
        CAPTURE(selected);
        auto seen = std::make_shared<recording_observer>();
        tz::load_options o;
        o.verify = verify;
        o.readers = 8;
        o.range_bytes = 64 << 10;  // many ranges, out of order on the workers
        o.observe = seen;
        if (encrypted) o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
        auto loaded = l.load(sched, which, o);
        REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message);
        CHECK(seen->in_order);
        CHECK(seen->ended);
        CHECK(seen->end_size == bytes.size());
        CHECK(seen->seen == bytes);  // the file's own bytes: ciphertext, before the checks decrypt it
      }
    }
  }
}

TEST_CASE("an observed load whose read fails ends with the error and never reports the observer complete") {
  tz::scheduler sched(2);
  const auto bytes = tz_test::write_floats(12, 200'000);
  auto src = std::make_shared<tz::memory_source>(bytes);
  auto l = tz::loader::open(sched, src).value();
  src->inject({bytes.size() * 2 / 3, tz::injected_fault::kind::hard, 0});
  auto seen = std::make_shared<recording_observer>();
  tz::load_options o;
  o.readers = 4;
  o.range_bytes = 64 << 10;
  o.observe = seen;
  auto loaded = l.load(sched, {}, o);
  REQUIRE_FALSE(loaded.has_value());
  CHECK_FALSE(seen->ended);
  CHECK(seen->in_order);
  CHECK(seen->seen.size() <= bytes.size() * 2 / 3);
}

TEST_CASE("an observer's chains are handed over side by side, each in order, every byte once") {
  tz::scheduler sched(2);
  const auto bytes = tz_test::write_floats(40, 100'000);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  for (bool verify : {false, true}) {
    CAPTURE(verify);
    auto seen = std::make_shared<chained_observer>(bytes.size() / 3 + 4321, bytes.size());  // 3 chains
    tz::load_options o;
    o.verify = verify;
    o.readers = 4;
    o.range_bytes = 64 << 10;  // ranges across the chains' ends too
    o.observe = seen;
    auto loaded = l.load(sched, {}, o);
    REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message);
    CHECK(seen->in_order);
    CHECK(seen->finished);
    CHECK(seen->seen == bytes);
    REQUIRE(seen->began.size() == 3);
    CHECK(*std::min_element(seen->began.begin(), seen->began.end()) >= 0);
    CHECK(*std::min_element(seen->ended.begin(), seen->ended.end()) >= 0);
    if (!verify) {  // alternated: every chain began before any ended (verified loads keep file order)
      CHECK(*std::max_element(seen->began.begin(), seen->began.end()) <
            *std::min_element(seen->ended.begin(), seen->ended.end()));
    }
  }
}
