// Helpers for walking a tz::scatter_list: sub-ranges, copying in, and the next spans to fill.
#pragma once

#include "tz/base/byte_source.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tz::net {

// Total number of bytes a scatter list holds.
inline std::uint64_t scatter_size(scatter_list dst) noexcept {
  std::uint64_t total = 0;
  for (auto s : dst) total += s.size();
  return total;
}

// The spans covering bytes [skip, skip + length) of dst (length clipped to what dst holds).
inline std::vector<std::span<std::byte>> scatter_slice(scatter_list dst, std::uint64_t skip, std::uint64_t length) {
  std::vector<std::span<std::byte>> out;
  for (auto s : dst) {
    if (length == 0) break;
    if (skip >= s.size()) {
      skip -= s.size();
      continue;
    }
    auto take = std::min<std::uint64_t>(s.size() - skip, length);
    out.push_back(s.subspan(skip, take));
    skip = 0;
    length -= take;
  }
  return out;
}

// A write position inside a scatter list.
class scatter_cursor {
 public:
  explicit scatter_cursor(scatter_list dst) : dst_(dst) { skip_empty(); }

  bool done() const noexcept { return index_ == dst_.size(); }

  // Copies bytes in at the cursor and advances; returns how many fitted.
  std::size_t copy_in(std::span<const std::byte> bytes) noexcept {
    std::size_t copied = 0;
    while (copied < bytes.size() && !done()) {
      auto room = dst_[index_].subspan(offset_);
      auto n = std::min(room.size(), bytes.size() - copied);
      std::memcpy(room.data(), bytes.data() + copied, n);
      copied += n;
      advance(n);
    }
    return copied;
  }

  // Up to max_spans spans starting at the cursor, for a scatter read.
  template <class Buffer, class Vector>
  void next_buffers(Vector& out, std::size_t max_spans) const {
    out.clear();
    std::size_t offset = offset_;
    for (std::size_t i = index_; i < dst_.size() && out.size() < max_spans; ++i, offset = 0)
      if (dst_[i].size() > offset) out.emplace_back(Buffer(dst_[i].data() + offset, dst_[i].size() - offset));
  }

  void advance(std::size_t n) noexcept {
    while (n > 0 && !done()) {
      auto step = std::min(n, dst_[index_].size() - offset_);
      offset_ += step;
      n -= step;
      skip_empty();
    }
  }

 private:
  void skip_empty() noexcept {
    while (index_ < dst_.size() && offset_ == dst_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  scatter_list dst_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
};

}  // namespace tz::net
