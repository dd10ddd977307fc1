// The CLI's remote-location options (--ca-file, --connections, --s3-*): parsed into tz::remote_options.
#pragma once

#include "cli.hpp"
#include "tz/sources/sources.hpp"

#include <string>
#include <vector>

namespace tz::cli {

// The options every FILE-taking command accepts, for cli::parse (valued, then bare flags).
inline const std::vector<std::string> remote_valued_options{
    "--ca-file",         "--connections",        "--s3-config",     "--s3-endpoint",   "--s3-region",
    "--connect-timeout", "--first-byte-timeout", "--stall-timeout", "--give-up-after", "--deadline",
    "--cache-dir",       "--cache-max-size"};
inline const std::vector<std::string> remote_flag_options{"--insecure", "--s3-virtual-host"};
// Help text describing them, to append to a command's usage.
extern const char* const remote_help;
// Help text on what a MODEL argument may be (tz::open_checkpoint).
extern const char* const model_help;

// Builds remote_options from --ca-file F, --insecure, --connections N, --s3-config F,
// --s3-endpoint URL, --s3-region R, --s3-virtual-host, and the time limits --connect-timeout,
// --first-byte-timeout, --stall-timeout, --give-up-after, --deadline (seconds, every scheme; see
// tz::set_time_limit), --cache-dir DIR and --cache-max-size SIZE (defaults: TENSORIZER_CACHE_DIR,
// TENSORIZER_CACHE_MAX_SIZE). S3 credentials and anything not given come
// from the environment and config files as resolve_s3 describes. An explicit http:// endpoint is
// accepted (the user asked for it). Fails with errc::invalid_argument for a bad --connections, time or size.
result<remote_options> remote_options_from(const args& a);

// Options for the command-line list of valued options: `own` plus the remote ones.
std::vector<std::string> with_remote_valued(std::vector<std::string> own);
std::vector<std::string> with_remote_flags(std::vector<std::string> own);

}  // namespace tz::cli
