// Runs a set of deferred coroutine operations concurrently and joins their tz::result<void>s.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/task.hpp"

#include <boost/asio/experimental/parallel_group.hpp>

#include <exception>
#include <vector>

namespace tz::net {

// Waits for every operation (each a co_spawn(..., deferred) of a task<result<void>>); completes
// with the first error in launch order, rethrows a thrown exception, or succeeds.
template <class Op>
task<result<void>> all_succeed(std::vector<Op> ops) {
  auto [order, exceptions, results] = co_await boost::asio::experimental::make_parallel_group(std::move(ops))
                                          .async_wait(boost::asio::experimental::wait_for_all(), use_task);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (exceptions[i]) std::rethrow_exception(exceptions[i]);
    if (!results[i]) co_return results[i].error();
  }
  co_return result<void>{};
}

}  // namespace tz::net
