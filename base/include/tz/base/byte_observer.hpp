// What sees every byte of a source, in order, while a load reads it: a signed model's digests are
// taken from the bytes the load already moves, not from a second pass (signing/, engine/ pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tz {

class byte_observer {
 public:
  virtual ~byte_observer() = default;
  // Consecutive pieces from offset 0 to the source's end, each once, never concurrently with itself
  // (a load hands them over in file order; the bytes it does not place, it reads for this).
  virtual void bytes(std::uint64_t offset, std::span<const std::byte> piece) = 0;
  // After the last piece: `size` is the source's size (the offset the pieces reached).
  virtual void end(std::uint64_t size) = 0;
};

}  // namespace tz
