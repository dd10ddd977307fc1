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
  // Consecutive pieces from offset 0 to the source's end, each once (a load hands them over in
  // file order; the bytes it does not place, it reads for this). With chains (chain_bytes), the
  // pieces of each chain come in order and never concurrently with each other, but different
  // chains' pieces may come concurrently; a piece never crosses a chain's end.
  virtual void bytes(std::uint64_t offset, std::span<const std::byte> piece) = 0;
  // The source as independent chains of this many bytes ([k*n, (k+1)*n)), which the load then
  // hands over side by side (model signing's shards hash apart); 0: one chain, the whole source.
  virtual std::uint64_t chain_bytes() const noexcept { return 0; }
  // After the last piece: `size` is the source's size (the offset the pieces reached).
  virtual void end(std::uint64_t size) = 0;
};

}  // namespace tz
