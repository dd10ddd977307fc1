// Bounded name resolution: one detached getaddrinfo thread per lookup (see resolve.hpp).
#include "resolve.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace tz::net {

struct name_lookup {
  std::string host;
  mutable std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  int rc = 0;
  std::vector<std::string> addresses;
};

bool is_numeric_host(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

namespace {

void resolve_now(name_lookup& l) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(l.host.c_str(), nullptr, &hints, &found);
  std::vector<std::string> addresses;
  for (const addrinfo* a = rc == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      addresses.emplace_back(text);
  }
  if (found) ::freeaddrinfo(found);
  std::lock_guard lock(l.mutex);
  l.rc = rc;
  l.addresses = std::move(addresses);
  l.done = true;
  l.finished.notify_all();
}

}  // namespace

std::shared_ptr<name_lookup> start_lookup(const std::string& host) {
  auto l = std::make_shared<name_lookup>();
  l->host = host;
  std::thread([l] { resolve_now(*l); }).detach();
  return l;
}

bool lookup_done(const name_lookup& lookup) {
  std::lock_guard lock(lookup.mutex);
  return lookup.done;
}

bool wait_lookup(name_lookup& lookup, std::chrono::steady_clock::time_point ends) {
  std::unique_lock lock(lookup.mutex);
  const auto done = [&] { return lookup.done; };
  if (ends == std::chrono::steady_clock::time_point::max()) {
    lookup.finished.wait(lock, done);
    return true;
  }
  return lookup.finished.wait_until(lock, ends, done);
}

result<std::vector<std::string>> lookup_addresses(const name_lookup& lookup) {
  std::lock_guard lock(lookup.mutex);
  if (lookup.rc != 0)
    return make_error(errc::network, "resolving " + lookup.host + " failed: " + ::gai_strerror(lookup.rc));
  if (lookup.addresses.empty()) return make_error(errc::network, "resolving " + lookup.host + " gave no address");
  return lookup.addresses;
}

}  // namespace tz::net
