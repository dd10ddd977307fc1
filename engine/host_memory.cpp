// Anonymous mappings for loader-owned destinations and ring slots, and parallel-friendly pre-faulting.
#include "tz/engine/host_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <new>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace tz {

namespace {
std::size_t round_up_pages(std::size_t n) { return (n + page_bytes - 1) / page_bytes * page_bytes; }
// Once the kernel says EINVAL (older than 5.14), stop asking.
std::atomic<bool> populate_unsupported{false};
}  // namespace

host_buffer::host_buffer(std::size_t size_bytes, bool huge_pages) : size_bytes_(size_bytes) {
  if (size_bytes == 0) return;
  constexpr std::size_t huge_bytes = 2 << 20;
  mapped_bytes_ = round_up_pages(size_bytes) + (huge_pages ? huge_bytes : 0);
  void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  map_base_ = p;
  auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (huge_pages) {
    addr = (addr + huge_bytes - 1) / huge_bytes * huge_bytes;
    // Advisory: without THP support this is a no-op and 4 KiB pages are used.
    ::madvise(reinterpret_cast<void*>(addr), round_up_pages(size_bytes), MADV_HUGEPAGE);
  }
  data_ = reinterpret_cast<std::byte*>(addr);
}

host_buffer::host_buffer(host_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      map_base_(std::exchange(other.map_base_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

host_buffer& host_buffer::operator=(host_buffer&& other) noexcept {
  if (this != &other) {
    host_buffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    map_base_ = std::exchange(other.map_base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

host_buffer::~host_buffer() {
  if (map_base_ != nullptr) ::munmap(map_base_, mapped_bytes_);
}

void prefault(std::span<std::byte> bytes) noexcept {
  if (bytes.empty()) return;
  auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  auto end = begin + bytes.size();
  auto page_begin = begin / page_bytes * page_bytes;
  auto page_end = (end + page_bytes - 1) / page_bytes * page_bytes;
  if (!populate_unsupported.load(std::memory_order_relaxed)) {
    if (::madvise(reinterpret_cast<void*>(page_begin), page_end - page_begin, MADV_POPULATE_WRITE) == 0) return;
    if (errno == EINVAL) populate_unsupported.store(true, std::memory_order_relaxed);
  }
  // Touch one byte per page without changing it. volatile: the compiler must not drop the store.
  for (auto p = std::max(begin, page_begin); p < end; p = (p / page_bytes + 1) * page_bytes) {
    auto* b = reinterpret_cast<volatile std::byte*>(p);
    *b = *b;
  }
}

}  // namespace tz
