// Blocking hiredis 0.14 helpers: connections, argv commands, pooled reconnects (see redis_client.hpp).
#include "redis_client.hpp"

#include "redis_reply.hpp"

#include <hiredis/hiredis.h>

#include "resolve.hpp"
#include "retry.hpp"

#include <pthread.h>
#include <sys/socket.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
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

// The limits of the with_connection call running on this thread. hiredis 0.14 contexts have no
// user-data slot, and all the commands of one call run on the calling thread, so it lives here.
struct call_state {
  std::chrono::milliseconds first_byte_timeout, stall_timeout;
  request_clock* clock;
  std::optional<timed_wait> wait;  // armed last, named when it fires
  bool timed_out = false;
};
thread_local call_state* current_call = nullptr;

// Bounds the next socket read or write (SO_RCVTIMEO / SO_SNDTIMEO). False, with ctx.err set as
// hiredis would, when the limit has already passed.
bool arm(redisContext& ctx, std::string_view name, std::chrono::milliseconds timeout) {
  if (!current_call) return true;
  auto& w = current_call->wait.emplace(name, timeout, current_call->clock);
  using clock = std::chrono::steady_clock;
  std::chrono::milliseconds left{0};  // 0: block without limit
  if (w.ends != clock::time_point::max()) {
    left = std::chrono::duration_cast<std::chrono::milliseconds>(w.ends - clock::now());
    if (left.count() <= 0) {
      current_call->timed_out = true;
      ctx.err = REDIS_ERR_IO;
      std::snprintf(ctx.errstr, sizeof ctx.errstr, "%s", std::strerror(EAGAIN));
      return false;
    }
  }
  const timeval tv = to_timeval(left);
  ::setsockopt(ctx.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(ctx.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return true;
}

// After a failed hiredis read or write: a socket timeout shows as EAGAIN in blocking mode.
void note_failure(int saved_errno) {
  if (current_call && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) current_call->timed_out = true;
}

void note_progress() {
  if (current_call && current_call->clock) current_call->clock->progressed();
}

// hiredis writes with write(2): to a peer that reset the connection that raises SIGPIPE, whose
// default action kills the process (seen in the soak, tests/soak). A library must not change the
// process's signal dispositions, so SIGPIPE is blocked on this thread for the call and one raised
// meanwhile is consumed before the mask is restored; write(2) then fails with EPIPE instead.
class sigpipe_blocked {
 public:
  sigpipe_blocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~sigpipe_blocked() {
    const timespec none{0, 0};
    if (!was_pending_)
      while (sigtimedwait(&pipe_, nullptr, &none) > 0) {
      }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
};

}  // namespace

redis_reply_ptr redis_command(redisContext& ctx, const std::vector<std::string_view>& argv) {
  if (!redis_append(ctx, argv)) return nullptr;
  return redis_next_reply(ctx);
}

bool redis_append(redisContext& ctx, const std::vector<std::string_view>& argv) {
  argv_arrays a(argv);
  return redisAppendCommandArgv(&ctx, static_cast<int>(a.data.size()), a.data.data(), a.sizes.data()) == REDIS_OK;
}

// redisGetReply with a bounded wait per socket call (it has one fixed timeout for all of them).
redis_reply_ptr redis_next_reply(redisContext& ctx) {
  void* reply = nullptr;
  if (redisGetReplyFromReader(&ctx, &reply) != REDIS_OK) return nullptr;
  const auto stall = current_call ? current_call->stall_timeout : std::chrono::milliseconds(0);
  for (int done = 0; !reply && !done;) {
    if (!arm(ctx, "stall timeout", stall)) return nullptr;
    if (redisBufferWrite(&ctx, &done) != REDIS_OK) {
      note_failure(errno);
      return nullptr;
    }
    note_progress();
  }
  for (bool first = true; !reply; first = false) {
    if (!arm(ctx, first ? "first-byte timeout" : "stall timeout",
             first ? (current_call ? current_call->first_byte_timeout : stall) : stall))
      return nullptr;
    if (redisBufferRead(&ctx) != REDIS_OK) {
      note_failure(errno);
      return nullptr;
    }
    note_progress();
    if (redisGetReplyFromReader(&ctx, &reply) != REDIS_OK) return nullptr;
  }
  return redis_reply_ptr(static_cast<redisReply*>(reply));
}

std::string redis_failure(redisContext& ctx, const redisReply* reply) {
  if (ctx.err && current_call && current_call->timed_out && current_call->wait) return current_call->wait->fired();
  if (ctx.err) return "connection error: " + std::string(ctx.errstr);
  if (!reply) return "no reply";
  return describe_reply(*reply);
}

redis_pool::redis_pool(std::string host, int port, const redis_options& options)
    : host_(std::move(host)), port_(port), address_("redis://" + host_ + ":" + std::to_string(port)),
      connect_timeout_(options.connect_timeout), first_byte_timeout_(options.first_byte_timeout),
      stall_timeout_(options.stall_timeout), retry_(options.retry) {}

result<redis_context_ptr> redis_pool::connect() {
  timed_wait wait("connect timeout", connect_timeout_, current_call ? current_call->clock : nullptr);
  using clock = std::chrono::steady_clock;
  // hiredis would resolve inside redisConnect, beyond any timeout: it gets a numeric address.
  std::string host = host_;
  if (!is_numeric_host(host_)) {
    auto lookup = start_lookup(host_);
    if (!wait_lookup(*lookup, wait.ends))
      return make_error(errc::timeout, address_ + ": resolving " + host_ + ": " + wait.fired());
    auto addresses = lookup_addresses(*lookup);
    if (!addresses) return make_error(addresses.error().code, address_ + ": " + addresses.error().message);
    host = addresses->front();
  }
  redis_context_ptr ctx;
  if (wait.ends == clock::time_point::max()) {
    ctx.reset(redisConnect(host.c_str(), port_));
  } else {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait.ends - clock::now());
    if (left.count() <= 0) return make_error(errc::timeout, address_ + ": connect: " + wait.fired());
    ctx.reset(redisConnectWithTimeout(host.c_str(), port_, to_timeval(left)));
  }
  const int saved_errno = errno;
  if (!ctx) return make_error(errc::network, address_ + ": cannot allocate a hiredis context");
  if (ctx->err && (saved_errno == ETIMEDOUT || std::string_view(ctx->errstr) == std::strerror(ETIMEDOUT)))
    return make_error(errc::timeout, address_ + ": connect: " + wait.fired());
  if (ctx->err) return make_error(errc::network, address_ + ": connect failed: " + std::string(ctx->errstr));
  guard_redis_reader(*ctx->reader);
  return ctx;
}

bool redis_pool::attempt_once(const std::function<result<void>(redisContext&)>& work, const std::string& what,
                              result<void>& out) {
  current_call->timed_out = false;
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
      out = fresh.error();
      return false;
    }
    ctx = std::move(*fresh);
  }
  out = work(*ctx);
  if (ctx->err) {  // the connection broke or timed out: drop it and retry on a new one
    errc code = current_call->timed_out ? errc::timeout : errc::network;
    std::string detail = out ? redis_failure(*ctx, nullptr) : out.error().message;
    out = make_error(code, address_ + ": " + what + ": " + detail);
    return false;
  }
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(ctx));
  return true;
}

result<void> redis_pool::with_connection(const std::function<result<void>(redisContext&)>& work,
                                         const std::string& what) {
  sigpipe_blocked no_sigpipe;
  request_clock clock(retry_);
  call_state state{first_byte_timeout_, stall_timeout_, &clock, std::nullopt, false};
  struct restore {
    call_state* previous;
    ~restore() { current_call = previous; }
  } restore_on_exit{std::exchange(current_call, &state)};
  error last;
  const int attempts_max = std::max(1, retry_.attempts_max);
  int attempt = 1;
  for (;; ++attempt) {
    if (attempt > 1)
      std::this_thread::sleep_until(std::min(std::chrono::steady_clock::now() + backoff_delay(retry_, attempt - 1), clock.limit()));
    result<void> r;
    if (attempt_once(work, what, r)) return r;
    last = r.error();
    clock.attempt_failed();
    if (attempt >= attempts_max || clock.expired()) break;
  }
  return retries_exhausted(last, address_ + ": " + what + " failed", attempt, clock);
}

}  // namespace tz::net
