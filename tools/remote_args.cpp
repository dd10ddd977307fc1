// The CLI's remote-location options and their help text.
#include "remote_args.hpp"

#include <algorithm>
#include <cstdlib>

namespace tz::cli {

const char* const model_help =
    "MODEL: a .tensors or safetensors FILE or URI (http(s)://, s3://, redis://); a sharded safetensors\n"
    "  checkpoint: its *.safetensors.index.json (FILE or URI: the shards it names are read beside it),\n"
    "  a directory holding one (else its *.safetensors files, else its one *.tensors file), an\n"
    "  http(s):// or s3:// prefix ending in '/' (PREFIX/model.safetensors.index.json), or several\n"
    "  safetensors FILEs or URIs. Shards are read concurrently in one pipeline; names are checked\n"
    "  against the index.\n";

const char* const remote_help =
    "  FILE / IN / OUT may be a local path or a URI: http(s)://host[:port]/path (read only),\n"
    "  s3://bucket/key, redis://host[:port]/prefix (tensorizer's key layout).\n"
    "  --ca-file F          trust this CA bundle for https (default: the system store, SSL_CERT_FILE)\n"
    "  --insecure           do not verify TLS certificates (explicit opt-out)\n"
    "  --connections N      a read of 16 MiB or more is split over up to N connections (default 4;\n"
    "                       the reads in flight, each on its own connection, are --readers)\n"
    "  --s3-config F        s3cmd config with access_key, secret_key, host_base (default ~/.s3cfg)\n"
    "  --s3-endpoint URL    S3 endpoint (else s3cfg host_base, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL)\n"
    "  --s3-region R        SigV4 region (else AWS_REGION, AWS_DEFAULT_REGION, us-east-1)\n"
    "  --s3-virtual-host    virtual-host style addressing (https://bucket.host/key)\n"
    "  Time limits, in seconds (fractions allowed), for http(s)://, s3:// and redis://:\n"
    "  --connect-timeout S     name lookup, then TCP connect (and TLS handshake), of one attempt (default 5)\n"
    "  --first-byte-timeout S  request sent -> first byte of the answer (default 10)\n"
    "  --stall-timeout S       no byte moved for S mid-transfer (default 10); slow but moving is never cut\n"
    "  --give-up-after S       report a request once S seconds went to failed attempts (fruitless\n"
    "                          waits and backoff; default 20; 0 = until the 6 attempts are spent)\n"
    "  --deadline S            hard limit per request, retries included, cuts even moving\n"
    "                          transfers (default 0 = none)\n"
    "  Node-local cache of http(s):// and s3:// objects (backends/CACHE.md):\n"
    "  --cache-dir DIR         keep a copy of each object loaded in DIR, keyed by URI + ETag; the next\n"
    "                          load of the unchanged object reads it (default: TENSORIZER_CACHE_DIR)\n"
    "  --cache-max-size SIZE   bound on DIR, least recently used copies evicted: bytes or 512M, 20G...\n"
    "                          (default: TENSORIZER_CACHE_MAX_SIZE, else half of DIR's file system)\n"
    "  S3 credentials: s3cfg, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,\n"
    "  ~/.aws/credentials (AWS_PROFILE); none: unsigned requests (public buckets).\n";

namespace {

std::vector<std::string> joined(std::vector<std::string> own, const std::vector<std::string>& more) {
  own.insert(own.end(), more.begin(), more.end());
  return own;
}

// "connect_timeout" -> "--connect-timeout".
std::string option_of(std::string_view keyword) {
  std::string option = "--" + std::string(keyword);
  std::replace(option.begin(), option.end(), '_', '-');
  return option;
}

// Reads --connect-timeout S and the other time-limit options (their range is checked with the rest).
result<void> time_limits_from(const args& a, remote_settings& s) {
  for (const char* name : time_limit_names) {
    const std::string option = option_of(name);
    auto text = a.get(option);
    if (!text) continue;
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size())
      return make_error(errc::invalid_argument, "option " + option + " expects seconds, got '" + *text + "'");
    s.time_limits.emplace_back(name, seconds);
  }
  return {};
}

}  // namespace

std::vector<std::string> with_remote_valued(std::vector<std::string> own) { return joined(std::move(own), remote_valued_options); }
std::vector<std::string> with_remote_flags(std::vector<std::string> own) { return joined(std::move(own), remote_flag_options); }

result<remote_options> remote_options_from(const args& a) {
  remote_settings s;
  s.spell = [](std::string_view keyword) { return "option " + option_of(keyword); };
  TZ_CHECK(time_limits_from(a, s));
  if (auto d = a.get("--cache-dir")) s.cache_dir = *d;
  if (auto m = a.get("--cache-max-size")) {
    auto bytes = parse_byte_size(*m);
    if (!bytes) return make_error(errc::invalid_argument, "option --cache-max-size: " + bytes.error().message);
    s.cache_max_bytes = *bytes;
  }
  if (auto f = a.get("--ca-file")) s.ca_file = *f;
  s.verify_tls = !a.has("--insecure");
  if (auto n = a.get("--connections")) {
    TZ_TRY(count, to_uint("--connections", *n));
    if (count == 0) return make_error(errc::invalid_argument, "option --connections expects 1..256, got 0");
    s.connections = count;
  }
  if (auto f = a.get("--s3-config")) s.s3_config_path = *f;
  if (auto e = a.get("--s3-endpoint")) s.s3_endpoint = *e;  // typed here, an http:// endpoint is an explicit choice
  if (auto r = a.get("--s3-region")) s.s3_region = *r;
  s.s3_virtual_host = a.has("--s3-virtual-host");
  return tz::remote_options_from(s);
}

}  // namespace tz::cli
