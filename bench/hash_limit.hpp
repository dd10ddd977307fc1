// The N-core hashing limit of a .tensors file in memory: what a verified load is measured against.
//
// Hashes every tensor's H || D (FORMAT.md §8.2: the zeroed header prefix, then the data) with the
// libraries the engine uses (tz/hash.hpp), on `threads` threads, in two schedules:
//   split: one job per tensor for its SHA-256 (in file order, as it must be; largest tensors first),
//          then its CRC-32 in pieces of at most 4 MiB, joined with crc32_combine. The jobs go to
//          whichever thread is free, so the CRC pieces fill the gaps the long SHA jobs leave.
//   fused: one job per tensor, largest first; each 256 KiB block goes through CRC-32 and SHA-256
//          while it is in cache (the data is read from memory once).
// And SHA-256 alone (hash_sha256_only): what the host hashes when the GPU takes the CRC32s.
// Each run recomputes and checks every stored hash, so the limit measures the real work.
#pragma once

#include "tz/format/tensorizer.hpp"
#include "tz/crypto/hash.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tz::bench {

struct hashed_tensor {
  std::span<const std::byte> prefix, data;  // H and D
  std::vector<format::stored_hash> stored;
};

// The tensors of `index` whose bytes lie in `file` (the whole file, at file offsets).
inline std::vector<hashed_tensor> hashed_tensors(const format::file_index& index, std::span<const std::byte> file,
                                                 std::vector<format::tensor_header>& headers) {
  headers.clear();
  headers.reserve(index.tensors.size());
  std::vector<hashed_tensor> out;
  for (const auto& e : index.tensors) {
    auto h = format::parse_tensor_header(file.subspan(e.header_offset, e.header_bytes()), index.header, e,
                                         index.source);
    if (!h) throw std::runtime_error(h.error().message);
    headers.push_back(std::move(*h));
    out.push_back({headers.back().hash_prefix, file.subspan(e.data_offset, e.data_length), headers.back().hashes});
  }
  return out;
}

// Tensor positions, largest first: the longest indivisible jobs start first.
inline std::vector<std::size_t> largest_first(const std::vector<hashed_tensor>& tensors) {
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensors[a].data.size() > tensors[b].data.size(); });
  return order;
}

// Runs job(i) for i in [0, count) on `threads` threads, each taking the next index when free.
template <class Job>
void run_jobs(std::size_t count, unsigned threads, Job job) {
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) job(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

// Whether a tensor's recomputed hashes equal its stored ones.
inline bool hashes_match(const hashed_tensor& t, std::uint32_t crc, const sha256_digest& sha) {
  for (const auto& s : t.stored) {
    if (s.kind == format::hash_kind::crc32) {
      std::uint32_t stored = 0;
      for (std::size_t i = 0; i < 4 && i < s.value.size(); ++i) stored |= std::uint32_t{s.value[i]} << (8 * i);
      if (stored != crc) return false;
    } else if (!std::equal(s.value.begin(), s.value.end(), sha.begin(), sha.end())) {
      return false;
    }
  }
  return true;
}

struct hash_results {
  std::vector<std::uint32_t> crc;
  std::vector<sha256_digest> sha;
  // How many tensors' recomputed hashes differ from the stored ones (0 unless the file is encrypted).
  std::size_t mismatches(const std::vector<hashed_tensor>& tensors) const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) bad += hashes_match(tensors[i], crc[i], sha[i]) ? 0 : 1;
    return bad;
  }
};

// The split schedule: SHA-256 per tensor, CRC-32 per piece of <= piece_bytes, combined in order.
inline hash_results hash_split(const std::vector<hashed_tensor>& tensors, unsigned threads,
                               std::size_t piece_bytes = std::size_t{4} << 20) {
  struct crc_piece {
    std::size_t tensor;
    std::span<const std::byte> bytes;
  };
  const auto order = largest_first(tensors);
  std::vector<crc_piece> pieces;
  for (std::size_t i : order) {
    pieces.push_back({i, tensors[i].prefix});
    const auto d = tensors[i].data;
    for (std::size_t off = 0; off < d.size(); off += piece_bytes)
      pieces.push_back({i, d.subspan(off, std::min(piece_bytes, d.size() - off))});
  }
  hash_results r{std::vector<std::uint32_t>(tensors.size()), std::vector<sha256_digest>(tensors.size())};
  std::vector<std::uint32_t> piece_crc(pieces.size());
  run_jobs(order.size() + pieces.size(), threads, [&](std::size_t j) {
    if (j < order.size()) {
      sha256_hasher h;
      h.update(tensors[order[j]].prefix);
      h.update(tensors[order[j]].data);
      r.sha[order[j]] = h.finish();
    } else {
      piece_crc[j - order.size()] = crc32_update(0, pieces[j - order.size()].bytes);
    }
  });
  // The pieces of a tensor are adjacent and in order in `pieces`: join them (a few hundred ns each).
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    auto& crc = r.crc[pieces[p].tensor];
    crc = crc32_combine(crc, piece_crc[p], pieces[p].bytes.size());
  }
  return r;
}

// The fused schedule: one job per tensor, each block hashed by both while in cache.
inline hash_results hash_fused(const std::vector<hashed_tensor>& tensors, unsigned threads,
                               std::size_t block_bytes = std::size_t{256} << 10) {
  const auto order = largest_first(tensors);
  hash_results r{std::vector<std::uint32_t>(tensors.size()), std::vector<sha256_digest>(tensors.size())};
  run_jobs(order.size(), threads, [&](std::size_t j) {
    const auto& t = tensors[order[j]];
    sha256_hasher sha;
    std::uint32_t crc = crc32_update(0, t.prefix);
    sha.update(t.prefix);
    for (std::size_t off = 0; off < t.data.size(); off += block_bytes) {
      const auto block = t.data.subspan(off, std::min(block_bytes, t.data.size() - off));
      crc = crc32_update(crc, block);
      sha.update(block);
    }
    r.crc[order[j]] = crc;
    r.sha[order[j]] = sha.finish();
  });
  return r;
}

// SHA-256 alone, one job per tensor, largest first: the host's share of a verified device load
// whose CRC32s run on the GPU (device_load_options::crc_on_device). Returns how many tensors'
// SHA-256 differ from the stored one.
inline std::size_t hash_sha256_only(const std::vector<hashed_tensor>& tensors, unsigned threads) {
  const auto order = largest_first(tensors);
  std::atomic<std::size_t> bad{0};
  run_jobs(order.size(), threads, [&](std::size_t j) {
    const auto& t = tensors[order[j]];
    sha256_hasher sha;
    sha.update(t.prefix);
    sha.update(t.data);
    const sha256_digest d = sha.finish();
    for (const auto& s : t.stored)
      if (s.kind == format::hash_kind::sha256 && !std::equal(s.value.begin(), s.value.end(), d.begin(), d.end())) ++bad;
  });
  return bad.load();
}

}  // namespace tz::bench
