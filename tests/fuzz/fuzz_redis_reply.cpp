// libFuzzer harness: bytes from a hostile Redis server through hiredis' reply reader, guarded as the
// client's connections are (redis_reply.hpp), then through the Redis source's reply checks. The
// first input byte picks how many bytes each socket read delivers.
#include "fuzz_support.hpp"
#include "redis_reply.hpp"

#include <hiredis/hiredis.h>

using namespace tz;

namespace {

void check_reply(const redisReply& reply) {
  if (auto page = net::scan_page_of(reply)) {
    fuzz::require(reply.type == REDIS_REPLY_ARRAY && reply.elements == 2, "a SCAN page is a pair");
    fuzz::require(page->keys.size() == reply.element[1]->elements, "every key of the page is kept");
  }
  if (auto n = net::strlen_of(reply)) fuzz::require(reply.type == REDIS_REPLY_INTEGER && reply.integer >= 0, "STRLEN");
  const std::uint64_t expected = reply.len > 0 ? static_cast<std::uint64_t>(reply.len) : 0;
  if (auto bytes = net::getrange_bytes_of(reply, expected))
    fuzz::require(bytes->size() == expected && reply.type == REDIS_REPLY_STRING, "GETRANGE bytes");
  fuzz::require(net::describe_reply(reply).size() <= 300, "reply descriptions are bounded");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t read_bytes = std::size_t{data[0]} + 1;
  redisReader* reader = redisReaderCreate();
  net::guard_redis_reader(*reader);
  for (std::size_t at = 1; at < size;) {
    const std::size_t n = std::min(read_bytes, size - at);
    fuzz::require(redisReaderFeed(reader, reinterpret_cast<const char*>(data + at), n) == REDIS_OK, "feed");
    at += n;
    void* reply = nullptr;
    while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
      check_reply(*static_cast<redisReply*>(reply));
      freeReplyObject(reply);
      reply = nullptr;
    }
    if (reader->err) break;  // a protocol error ends the connection
  }
  redisReaderFree(reader);
  return 0;
}
