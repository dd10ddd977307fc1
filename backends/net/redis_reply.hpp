// What the Redis source makes of a server's replies: pure checks on hiredis reply objects, and a
// reader guard that bounds what a hostile reply may make hiredis allocate. No I/O here.
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

struct redisReply;
struct redisReader;

namespace tz::net {

// The most elements one multi-bulk reply may declare. hiredis 0.14 allocates the element array as
// soon as it reads the count (up to 2^31 pointers: 16 GiB); SCAN pages with COUNT 1000 are far smaller.
inline constexpr int redis_array_elements_max = 1 << 20;

// Makes `reader` refuse (as a protocol error) arrays declaring more than redis_array_elements_max
// elements; every other reply is built by hiredis' own functions.
void guard_redis_reader(redisReader& reader) noexcept;

// Why a reply is not the one expected: the server's error text, or the reply's type.
std::string describe_reply(const redisReply& reply);

// One SCAN page: the next cursor and the keys.
struct redis_scan_page {
  std::string cursor;
  std::vector<std::string> keys;
};
// A SCAN reply: a 2-element array of a bulk-string cursor and an array of bulk-string keys.
result<redis_scan_page> scan_page_of(const redisReply& reply);
// A STRLEN reply: a non-negative integer.
result<std::uint64_t> strlen_of(const redisReply& reply);
// A GETRANGE reply: a bulk string of exactly `expected_bytes` bytes (errc::io when the length differs).
result<std::span<const std::byte>> getrange_bytes_of(const redisReply& reply, std::uint64_t expected_bytes);

}  // namespace tz::net
