// Name resolution bounded by a deadline, for the HTTP and Redis clients. glibc's getaddrinfo
// cannot be stopped, and both Asio's resolver (its service joins the lookup thread at shutdown)
// and hiredis (it resolves inside redisConnect) would wait for it: a DNS server that never answers
// held a load for 90 s whatever the connect timeout. A lookup here runs on a detached thread of
// its own; the caller waits for it until the deadline and, past it, leaves it to finish alone.
#pragma once

#include "tz/base/error.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tz::net {

struct name_lookup;  // shared by the caller and the lookup thread

// True for an IPv4 or IPv6 literal, which needs no lookup.
bool is_numeric_host(const std::string& host);

// Starts resolving `host` (TCP, any family) on a thread of its own.
std::shared_ptr<name_lookup> start_lookup(const std::string& host);

// Non-blocking: whether the lookup has finished.
bool lookup_done(const name_lookup& lookup);

// Blocks until the lookup finishes (true) or `ends` passes (false; time_point::max(): no limit).
// The timeout error is the caller's to word: it knows which limit `ends` is.
bool wait_lookup(name_lookup& lookup, std::chrono::steady_clock::time_point ends);

// The numeric addresses of a finished lookup, in getaddrinfo's order, or its failure
// (errc::network, "resolving HOST failed: <gai_strerror>").
result<std::vector<std::string>> lookup_addresses(const name_lookup& lookup);

}  // namespace tz::net
