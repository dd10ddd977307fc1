// Blocking hiredis 0.14 helpers: connections, argv commands, pooled reconnects (see redis_client.hpp).
#include "redis_client.hpp"

#include "redis_reply.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <random>
#include <thread>

namespace tz::net {

void redis_context_free::operator()(redisContext* c) const noexcept { redisFree(c); }
void redis_reply_free::operator()(redisReply* r) const noexcept { freeReplyObject(r); }

namespace {

struct argv_arrays {
  std::vector<const char*> data;
  std::vector<std::size_t> sizes;
  explicit argv_arrays(const std::vector<std::string_view>& argv) {
    for (auto a : argv) {
      data.push_back(a.data());
      sizes.push_back(a.size());
    }
  }
};

timeval to_timeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

}  // namespace

redis_reply_ptr redis_command(redisContext& ctx, const std::vector<std::string_view>& argv) {
  argv_arrays a(argv);
  return redis_reply_ptr(static_cast<redisReply*>(
      redisCommandArgv(&ctx, static_cast<int>(a.data.size()), a.data.data(), a.sizes.data())));
}

bool redis_append(redisContext& ctx, const std::vector<std::string_view>& argv) {
  argv_arrays a(argv);
  return redisAppendCommandArgv(&ctx, static_cast<int>(a.data.size()), a.data.data(), a.sizes.data()) == REDIS_OK;
}

redis_reply_ptr redis_next_reply(redisContext& ctx) {
  void* reply = nullptr;
  if (redisGetReply(&ctx, &reply) != REDIS_OK) return nullptr;
  return redis_reply_ptr(static_cast<redisReply*>(reply));
}

std::string redis_failure(redisContext& ctx, const redisReply* reply) {
  if (ctx.err) return "connection error: " + std::string(ctx.errstr);
  if (!reply) return "no reply";
  return describe_reply(*reply);
}

redis_pool::redis_pool(std::string host, int port, std::chrono::milliseconds timeout, retry_options retry)
    : host_(std::move(host)), port_(port), address_("redis://" + host_ + ":" + std::to_string(port)),
      timeout_(timeout), retry_(retry) {}

result<redis_context_ptr> redis_pool::connect() {
  redis_context_ptr ctx(redisConnectWithTimeout(host_.c_str(), port_, to_timeval(timeout_)));
  if (!ctx) return make_error(errc::network, address_ + ": cannot allocate a hiredis context");
  if (ctx->err) return make_error(errc::network, address_ + ": connect failed: " + std::string(ctx->errstr));
  redisSetTimeout(ctx.get(), to_timeval(timeout_));
  guard_redis_reader(*ctx->reader);
  return ctx;
}

result<void> redis_pool::with_connection(const std::function<result<void>(redisContext&)>& work,
                                         const std::string& what) {
  error last;
  const int attempts = std::max(1, retry_.attempts_max);
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      auto delay = std::min(retry_.backoff_initial * (1 << std::min(attempt - 2, 16)), retry_.backoff_max);
      thread_local std::minstd_rand random{std::random_device{}()};
      std::this_thread::sleep_for(delay / 2 + std::chrono::milliseconds(random() % (delay.count() / 2 + 1)));
    }
    redis_context_ptr ctx;
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        ctx = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!ctx) {
      auto fresh = connect();
      if (!fresh) {
        last = fresh.error();
        continue;
      }
      ctx = std::move(*fresh);
    }
    auto r = work(*ctx);
    if (ctx->err) {  // the connection broke: drop it and retry on a new one
      last = r ? make_error(errc::network, address_ + ": " + what + ": " + ctx->errstr) : r.error();
      continue;
    }
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(ctx));
    return r;
  }
  return make_error(last.code == errc::timeout ? errc::timeout : errc::network,
                    address_ + ": " + what + " failed after " + std::to_string(attempts) + " attempts, last: " +
                        last.message);
}

}  // namespace tz::net
