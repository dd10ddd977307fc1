// Checks on hiredis replies for the Redis source, and the reader's allocation guard (redis_reply.hpp).
#include "redis_reply.hpp"

#include <hiredis/hiredis.h>

namespace tz::net {
namespace {

bool is_text(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
         (r->str != nullptr || r->len == 0);
}

std::string text_of(const redisReply& r) { return r.len > 0 ? std::string(r.str, static_cast<std::size_t>(r.len)) : ""; }

error unexpected(const redisReply& reply, const char* wanted) {
  return make_error(errc::network, describe_reply(reply) + " (expected " + wanted + ")");
}

// hiredis keeps one functions table per reader; the guarded table delegates to the original.
redisReplyObjectFunctions* original_functions = nullptr;

void* guarded_create_array(const redisReadTask* task, int elements) {
  if (elements > redis_array_elements_max) return nullptr;  // hiredis reports "Out of memory": a reader error
  return original_functions->createArray(task, elements);
}

}  // namespace

void guard_redis_reader(redisReader& reader) noexcept {
  static redisReplyObjectFunctions guarded = [&] {
    original_functions = reader.fn;
    redisReplyObjectFunctions table = *reader.fn;
    table.createArray = guarded_create_array;
    return table;
  }();
  if (reader.fn == original_functions) reader.fn = &guarded;
}

std::string describe_reply(const redisReply& reply) {
  // Server text ends up in messages: cut it to a readable length.
  constexpr std::size_t text_max = 256;
  if (reply.type == REDIS_REPLY_ERROR) return "server error: " + text_of(reply).substr(0, text_max);
  return "unexpected reply type " + std::to_string(reply.type);
}

result<redis_scan_page> scan_page_of(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2) return unexpected(reply, "a 2-element SCAN array");
  if (!is_text(reply.element[0])) return unexpected(*reply.element[0], "a SCAN cursor string");
  const redisReply& keys = *reply.element[1];
  if (keys.type != REDIS_REPLY_ARRAY) return unexpected(keys, "an array of SCAN keys");
  redis_scan_page page{text_of(*reply.element[0]), {}};
  page.keys.reserve(keys.elements);
  for (std::size_t i = 0; i < keys.elements; ++i) {
    if (!is_text(keys.element[i])) return unexpected(*keys.element[i], "a key string");
    page.keys.push_back(text_of(*keys.element[i]));
  }
  return page;
}

result<std::uint64_t> strlen_of(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_INTEGER) return unexpected(reply, "an integer");
  if (reply.integer < 0)
    return make_error(errc::network, "negative length " + std::to_string(reply.integer) + " from the server");
  return static_cast<std::uint64_t>(reply.integer);
}

result<std::span<const std::byte>> getrange_bytes_of(const redisReply& reply, std::uint64_t expected_bytes) {
  if (reply.type != REDIS_REPLY_STRING || !is_text(&reply)) return unexpected(reply, "a bulk string");
  if (static_cast<std::uint64_t>(reply.len) != expected_bytes)
    return make_error(errc::io, "expected " + std::to_string(expected_bytes) + " bytes, got " +
                                    std::to_string(reply.len) + " (the key changed?)");
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(reply.str), static_cast<std::size_t>(reply.len));
}

}  // namespace tz::net
