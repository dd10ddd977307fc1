// Private to engine/: tensors as they land. Counts what each selected tensor still waits for (the
// ranges that hold its bytes, a device fill) and hands a tensor to load_common_options::on_tensor_ready
// once nothing is left: in file order by default (a tensor waits for every earlier one), or as each
// completes. Nothing is handed over once the load has failed.
#pragma once

#include "tz/engine/load_plan.hpp"
#include "tz/engine/loader.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace tz {

struct pipeline;

class ready_order {
 public:
  // What a ready tensor is for the caller: the sink fills it (where its bytes are).
  using describe_fn = std::function<tensor_ready(std::uint32_t tensor)>;

  // Counts, per selected tensor, the ranges of p.plan that hold any of its pieces, its header check
  // when that runs beside the data (p.deferred_headers), plus `extra` units the sink completes
  // itself (a device load's allocation and zero-fills). Call after the plan.
  ready_order(const pipeline& p, describe_fn describe, std::chrono::steady_clock::time_point started,
              const std::vector<std::uint32_t>& extra = {});

  // Hands over what is ready before any read (tensors with no bytes to wait for). Call before the readers.
  void start();
  // Range r is in place and checked: one unit off each tensor with a piece in it. Any thread.
  void range_done(const load_range& r);
  // One unit off tensor t (a sink's own completion). Any thread.
  void unit_done(std::uint32_t t);

 private:
  void complete(std::uint32_t t);
  void hand_over(std::uint32_t t);  // under mutex_

  const pipeline& p_;
  describe_fn describe_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> left_;
  std::vector<char> done_;     // under mutex_
  std::size_t next_ = 0;       // file order: the first tensor not handed over yet (under mutex_)
  std::mutex mutex_;
  bool stopped_ = false;       // the callback threw: quiet for the rest of the load (under mutex_)
};

}  // namespace tz
