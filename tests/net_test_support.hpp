// Helpers for net_test and net_cli_test: where the test servers live, starting them via
// scripts/servers (a suite whose server is not installed is skipped before any case runs), test
// data, and running a tz::task to completion.
#pragma once

#include "tz/base/task.hpp"

#include "requirements.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace net_test {

inline std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

inline std::string work_dir() { return env_or("TZ_NET_WORKDIR", TZ_NET_WORKDIR); }
inline int port_base() { return std::stoi(env_or("TZ_NET_PORT_BASE", std::to_string(TZ_NET_PORT_BASE))); }

// Starts (idempotently) a server with its script and returns the script's exit status (77: the
// server is not installed).
inline int start_server(const std::string& name) {
  const std::string command = std::string(TZ_NET_SCRIPTS) + "/" + name + ".sh start '" + work_dir() + "' " +
                              std::to_string(port_base());
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// For tz_test::suite_needs (requirements.hpp): "" when the server is installed (it is then started),
// else why not. A server that is installed but does not come up is no skip: require_server fails.
inline std::string server_absent(const std::string& name) {
  return start_server(name) == 77 ? name + " is not installed (" + TZ_NET_SCRIPTS "/" + name + ".sh start: exit 77)"
                                  : std::string();
}

// Declares that every case of `suite` needs server `name` (decided before any case runs).
inline tz_test::suite_needs suite_needs_server(const char* suite, const char* name) {
  return tz_test::suite_needs(suite, std::string("the ") + name + " server", [name] { return server_absent(name); });
}

// Starts the server if needed (idempotent) and fails the case when it does not come up.
inline void require_server(const std::string& name) {
  const int rc = start_server(name);
  REQUIRE_MESSAGE(rc == 0, "could not start " << name << " with " << TZ_NET_SCRIPTS << "/" << name
                                              << ".sh start (exit " << rc << ")");
}

// Deterministic pseudo-random bytes (splitmix64), the same for every run.
inline std::vector<std::byte> pattern_bytes(std::size_t size, std::uint64_t seed = 42) {
  std::vector<std::byte> out(size);
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < size; i += 8) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    for (std::size_t k = 0; k < 8 && i + k < size; ++k) out[i + k] = static_cast<std::byte>(z >> (8 * k));
  }
  return out;
}

// Writes bytes to path unless a file of that size is already there.
inline void ensure_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == bytes.size() && !ec) return;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Runs a task on a fresh io_context and returns its value (rethrows its exception).
template <class T>
T run(tz::task<T> t) {
  boost::asio::io_context io;
  std::optional<T> value;
  std::exception_ptr failure;
  boost::asio::co_spawn(io, std::move(t), [&](std::exception_ptr e, T v) {
    failure = e;
    if (!e) value.emplace(std::move(v));
  });
  io.run();
  if (failure) std::rethrow_exception(failure);
  return std::move(*value);
}

}  // namespace net_test
