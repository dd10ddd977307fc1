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

// Applies --connect-timeout S and the other time-limit options.
result<void> time_limits_from(const args& a, remote_options& o) {
  for (const char* name : time_limit_names) {
    std::string option = "--" + std::string(name);
    std::replace(option.begin(), option.end(), '_', '-');
    auto text = a.get(option);
    if (!text) continue;
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size())
      return make_error(errc::invalid_argument, "option " + option + " expects seconds, got '" + *text + "'");
    if (auto r = set_time_limit(o, name, seconds); !r)
      return make_error(errc::invalid_argument, "option " + option + ": " + r.error().message);
  }
  return {};
}

}  // namespace

std::vector<std::string> with_remote_valued(std::vector<std::string> own) { return joined(std::move(own), remote_valued_options); }
std::vector<std::string> with_remote_flags(std::vector<std::string> own) { return joined(std::move(own), remote_flag_options); }

result<remote_options> remote_options_from(const args& a) {
  remote_options o;
  TZ_CHECK(time_limits_from(a, o));
  TZ_TRY(cache, cache_options_from_env());
  o.cache = std::move(cache);
  if (auto d = a.get("--cache-dir")) o.cache.dir = *d;
  if (auto m = a.get("--cache-max-size")) {
    auto bytes = parse_byte_size(*m);
    if (!bytes) return make_error(errc::invalid_argument, "option --cache-max-size: " + bytes.error().message);
    o.cache.max_bytes = *bytes;
  }
  if (auto f = a.get("--ca-file")) o.http.ca_file = *f;
  o.http.verify_peer = !a.has("--insecure");
  if (auto n = a.get("--connections")) {
    TZ_TRY(count, to_uint("--connections", *n));
    if (count == 0 || count > 256)
      return make_error(errc::invalid_argument, "option --connections expects 1..256, got " + *n);
    o.http.connections = static_cast<std::size_t>(count);
    o.redis.connections = static_cast<std::size_t>(count);
    o.s3.upload_concurrency = static_cast<std::size_t>(count);
  }
  o.s3.http = o.http;
  if (auto f = a.get("--s3-config")) o.s3.s3_config_path = *f;
  if (auto e = a.get("--s3-endpoint")) {
    o.s3.endpoint = *e;
    // Typed on the command line, an http:// endpoint is the user's explicit choice.
    o.s3.force_http = e->rfind("http://", 0) == 0;
  }
  if (auto r = a.get("--s3-region")) o.s3.region = *r;
  o.s3.virtual_host_style = a.has("--s3-virtual-host");
  return o;
}

}  // namespace tz::cli
