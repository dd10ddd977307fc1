// What sees every byte of a source, in order, while a load reads it: a signed model's digests are
// taken from the bytes the load already moves, not from a second pass (signing/, engine/ pipeline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tz {

class byte_observer {
 public:
  // A part of the source the observer hashes apart from the others: [begin, end).
  struct extent {
    std::uint64_t begin = 0, end = 0;
  };
  virtual ~byte_observer() = default;
  // The pieces of each chain (chains()) in order, each byte once, never concurrently within a
  // chain; different chains' pieces may come concurrently (the load hands the chains over side by
  // side), and a piece never crosses a chain's end. Bytes outside every chain are never handed over.
  virtual void bytes(std::uint64_t offset, std::span<const std::byte> piece) = 0;
  // After every chain's last piece: `size` is the source's size.
  virtual void end(std::uint64_t size) = 0;
  // The chains over a source of `size` bytes, in order, not overlapping: one, the whole source, by
  // default; model signing's shards, or a checkpoint's shard files (whose padding is in none).
  virtual std::vector<extent> chains(std::uint64_t size) const { return {{0, size}}; }
};

}  // namespace tz
