// S3 credential, endpoint and region resolution (format/FORMAT.md §12.1 plus the AWS environment chain).
#include "tz/backends/s3.hpp"

#include <cstdlib>
#include <fstream>
#include <map>

namespace tz {
namespace {

using ini_file = std::map<std::string, std::map<std::string, std::string>>;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string trim(std::string s) {
  auto first = s.find_first_not_of(" \t\r");
  auto last = s.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// A minimal INI reader ([section], key = value, # and ; comments): enough for ~/.s3cfg and
// ~/.aws/credentials. Returns nullopt when the file cannot be opened.
std::optional<ini_file> read_ini(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  ini_file out;
  std::string line, section;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      out[section];
      continue;
    }
    auto eq = line.find('=');
    if (eq != std::string::npos) out[section][trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string home_file(const char* relative) {
  auto home = env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

struct endpoint_choice {
  std::string url;
  bool from_environment = false;
};

result<std::string> apply_scheme(const endpoint_choice& choice, bool force_http) {
  std::string url = choice.url;
  if (url.find("://") == std::string::npos) return (force_http ? "http://" : "https://") + url;
  if (url.rfind("https://", 0) == 0 && force_http) return "http://" + url.substr(8);
  if (url.rfind("http://", 0) == 0 && !force_http && !choice.from_environment)
    return make_error(errc::invalid_argument, "S3 endpoint '" + url + "': non-HTTPS endpoint URLs are not allowed "
                                                                      "(set force_http, or use AWS_ENDPOINT_URL)");
  return url;
}

std::string host_of(const std::string& url) {
  auto start = url.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  auto end = url.find_first_of(":/", start);
  return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace

result<s3_resolved> resolve_s3(const s3_options& options, bool for_write) {
  s3_resolved out;
  endpoint_choice endpoint{options.endpoint, false};
  bool force_http = options.force_http;
  bool have_keys = options.access_key_id && options.secret_access_key;
  if (have_keys) out.credentials = {*options.access_key_id, *options.secret_access_key, options.session_token};
  if (!have_keys && options.use_s3_config) {
    auto path = options.s3_config_path.empty() ? home_file(".s3cfg") : options.s3_config_path;
    auto cfg = path.empty() ? std::nullopt : read_ini(path);
    if (!cfg && !options.s3_config_path.empty())
      return make_error(errc::not_found, "S3 config '" + path + "' cannot be read");
    if (cfg && cfg->count("default")) {
      auto& d = (*cfg)["default"];
      if (d.count("access_key") && d.count("secret_key")) {
        out.credentials = {d["access_key"], d["secret_key"], ""};
        have_keys = true;
      }
      if (endpoint.url.empty() && d.count("host_base")) endpoint.url = d["host_base"];
      if (d["use_https"] == "False") force_http = true;
    }
  }
  if (!have_keys && !env("AWS_ACCESS_KEY_ID").empty()) {
    out.credentials = {env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN")};
    have_keys = true;
  }
  if (!have_keys) {
    auto path = env("AWS_SHARED_CREDENTIALS_FILE").empty() ? home_file(".aws/credentials") : env("AWS_SHARED_CREDENTIALS_FILE");
    auto profile = !options.profile.empty() ? options.profile : !env("AWS_PROFILE").empty() ? env("AWS_PROFILE") : "default";
    auto creds = path.empty() ? std::nullopt : read_ini(path);
    if (creds && creds->count(profile) && (*creds)[profile].count("aws_access_key_id")) {
      auto& p = (*creds)[profile];
      out.credentials = {p["aws_access_key_id"], p["aws_secret_access_key"], p["aws_session_token"]};
      have_keys = true;
    }
  }
  if (!have_keys && for_write)
    return make_error(errc::auth, "S3 upload: no credentials (explicit keys, ~/.s3cfg, AWS_ACCESS_KEY_ID or ~/.aws/credentials)");
  if (endpoint.url.empty()) {
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
      if (!env(name).empty()) {
        endpoint = {env(name), true};
        break;
      }
    }
  }
  if (endpoint.url.empty()) endpoint.url = for_write ? "object.ord1.coreweave.com" : "accel-object.ord1.coreweave.com";
  TZ_TRY(url, apply_scheme(endpoint, force_http));
  while (!url.empty() && url.back() == '/') url.pop_back();
  out.endpoint_url = url;
  out.region = !options.region.empty() ? options.region
               : !env("AWS_REGION").empty() ? env("AWS_REGION")
               : !env("AWS_DEFAULT_REGION").empty() ? env("AWS_DEFAULT_REGION") : "us-east-1";
  auto host = host_of(url);
  out.virtual_host_style = options.virtual_host_style || host == "cwobject.com" || host == "cwlota.com";
  return out;
}

}  // namespace tz
