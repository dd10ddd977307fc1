// The one coroutine type of the engine.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace tz {

// Every asynchronous operation of the engine is a lazy tz::task<T>. Boost 1.81 predates Asio's
// default-completion-token change, so asynchronous Asio calls pass tz::use_task explicitly.
template <class T = void>
using task = boost::asio::awaitable<T>;

inline constexpr boost::asio::use_awaitable_t<> use_task{};

}  // namespace tz
