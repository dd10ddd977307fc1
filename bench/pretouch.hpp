// Pre-touching memory before a benchmark run that loads into fresh memory.
//
// This machine is a KVM guest whose virtio-balloon driver reports freed memory to the host (free
// page reporting, 2 MiB blocks, ~2 s after the free); the host drops the backing, and the next
// first touch of those pages costs ~1.7 s per GiB on the host side, for whichever run meets them.
// Writing to (and freeing) as much memory as a run will allocate, just before it, hands every
// fresh-memory run what a bare-metal host has: memory new to the process, but backed.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstring>

namespace tz::bench {

inline void pretouch(std::uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  ::madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 1, bytes);
  ::munmap(p, bytes);
}

}  // namespace tz::bench
