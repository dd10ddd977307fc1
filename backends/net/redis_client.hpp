// Blocking hiredis 0.14 helpers for the Redis source/sink: connections, binary-safe argv commands,
// a small connection pool, and running blocking work off the caller's event loop.
#pragma once

#include "tz/base/error.hpp"
#include "tz/backends/net_options.hpp"
#include "tz/base/task.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

struct redisContext;
struct redisReply;

namespace tz::net {

struct redis_context_free {
  void operator()(redisContext* c) const noexcept;
};
struct redis_reply_free {
  void operator()(redisReply* r) const noexcept;
};
using redis_context_ptr = std::unique_ptr<redisContext, redis_context_free>;
using redis_reply_ptr = std::unique_ptr<redisReply, redis_reply_free>;

// Connections to one server, handed out to blocking work one at a time.
class redis_pool {
 public:
  // Takes the timeouts and retry policy of options.
  redis_pool(std::string host, int port, const redis_options& options);

  // Runs work(ctx) with a connection, reconnecting and retrying (with backoff) while the
  // connection itself fails (ctx->err set); other errors are returned as they are. Blocking.
  // The commands work sends are bounded by the pool's timeouts and, with the retries, by one
  // request_clock (retry.give_up_after, retry.deadline); a timeout fails with errc::timeout.
  result<void> with_connection(const std::function<result<void>(redisContext&)>& work, const std::string& what);

  const std::string& address() const noexcept { return address_; }

 private:
  result<redis_context_ptr> connect();
  // One try of with_connection: true when out is final (work ran on a connection that held up),
  // false when out holds a connection failure worth retrying.
  bool attempt_once(const std::function<result<void>(redisContext&)>& work, const std::string& what,
                    result<void>& out);
  std::string host_;
  int port_;
  std::string address_;  // "redis://host:port"
  std::chrono::milliseconds connect_timeout_, first_byte_timeout_, stall_timeout_;
  retry_options retry_;
  std::mutex mutex_;
  std::vector<redis_context_ptr> idle_;
};

// Sends one binary-safe command (argv, never an inline string) and waits for its reply.
redis_reply_ptr redis_command(redisContext& ctx, const std::vector<std::string_view>& argv);
// Queues one binary-safe command for pipelining; replies are collected with redis_next_reply.
bool redis_append(redisContext& ctx, const std::vector<std::string_view>& argv);
// Sends what is queued and reads the next reply; inside with_connection every wait is bounded
// (first reply byte: first_byte_timeout, then stall_timeout, both cut by the request clock).
redis_reply_ptr redis_next_reply(redisContext& ctx);

// Describes a failed command: the timeout that fired, the connection error, or the server's error reply.
std::string redis_failure(redisContext& ctx, const redisReply* reply);

template <class T>
task<T> call_blocking(std::function<T()> work) {
  co_return work();
}

// Runs blocking work on pool and resumes the awaiting coroutine on its own executor. (A plain
// coroutine function rather than a capturing coroutine lambda: GCC 12 mis-handles the latter.)
template <class T>
task<T> run_blocking(boost::asio::thread_pool& pool, std::function<T()> work) {
  co_return co_await boost::asio::co_spawn(pool, call_blocking<T>(std::move(work)), use_task);
}

}  // namespace tz::net
