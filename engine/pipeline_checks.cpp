// The per-tensor checks of the pipeline, run by the reader that holds a range, on the bytes where
// they landed: parse each header against the index, decrypt whole cipher chunks in place, verify
// the stored hashes. A split tensor's CRC32 is taken per part on any worker and combined; its
// SHA-256 is fed in part order, beside the reads of other tensors. When the device sink takes the
// CRC32s on the GPU (pipeline::crc_on_device), only SHA-256 is hashed here.
#include "pipeline.hpp"

namespace tz {

namespace {

// Decrypts (encrypted files) and verifies (when asked) one whole tensor whose header and data are
// both in this range. `data` is empty for data-less tensors.
result<void> check_whole(pipeline& p, const format::tensor_header& h, std::span<std::byte> data, std::uint32_t tensor,
                         landing& where) {
  const std::string& name = p.source->name();
  if (p.encrypted && !data.empty() && p.decrypt_on_device) {
    TZ_TRY(key, p.options->decryption->key_for(h, name));
    auto header = std::make_shared<const format::tensor_header>(h);
    for (const auto& c : format::cipher_chunks(h, {0, format::cipher_chunk_count(h)}))
      where.sealed.push_back({tensor, c, key, header});
  } else if (p.encrypted && !data.empty()) {
    const auto t0 = pipeline_clock::now();
    TZ_TRY(key, p.options->decryption->key_for(h, name));
    auto ok = format::decrypt_chunks(h, data, {0, format::cipher_chunk_count(h)}, *key, name);
    p.counters.decrypt_ns += nanoseconds_since(t0);
    TZ_CHECK(ok);
  }
  if (p.options->verify) {
    const auto t0 = pipeline_clock::now();
    result<void> ok;
    if (p.crc_on_device) {  // the CRC32 is the device sink's (device_crc.hpp)
      sha256_hasher sha;
      sha.update(h.hash_prefix);
      sha.update(data);
      ok = format::check_tensor_hashes(h, std::nullopt, sha.finish(), name);
    } else {
      ok = format::verify_tensor(h, data, name);
    }
    p.counters.verify_ns += nanoseconds_since(t0);
    TZ_CHECK(ok);
  }
  p.tensors_done.fetch_add(1, std::memory_order_relaxed);
  return {};
}

// Whole tensors: each header piece is followed, in the same range, by its data piece (if any).
result<void> check_whole_tensors(pipeline& p, const load_range& r, landing& where) {
  for (std::size_t k = 0; k < r.pieces.size(); ++k) {
    const plan_piece& piece = r.pieces[k];
    if (!p.with_headers) {  // safetensors: no per-tensor header, nothing to check
      if (piece.what == plan_piece::kind::data) p.tensors_done.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (piece.what != plan_piece::kind::header) continue;
    const format::tensor_entry& e = *p.selected[piece.tensor];
    TZ_TRY(h, format::parse_tensor_header(where.pieces[k], p.index->header, e, p.source->name()));
    std::span<std::byte> data;
    if (k + 1 < r.pieces.size() && r.pieces[k + 1].what == plan_piece::kind::data && r.pieces[k + 1].tensor == piece.tensor)
      data = where.pieces[k + 1];
    TZ_CHECK(check_whole(p, h, data, piece.tensor, where));
    if (!p.headers.empty()) p.headers[piece.tensor] = std::move(h);
  }
  return {};
}

// The CRC32 of a split tensor's hash input: its header prefix, then every part in order.
std::uint32_t combined_crc(const split_state& s) {
  std::uint32_t crc = crc32(s.header.hash_prefix);
  for (std::size_t i = 0; i < s.part_crc.size(); ++i) crc = crc32_combine(crc, s.part_crc[i], s.part_bytes[i]);
  return crc;
}

// Feeds a part to its tensor's SHA-256 in its turn; the last part compares both hashes.
task<result<void>> hash_in_turn(pipeline& p, const load_range& r, split_state& s, std::span<const std::byte> bytes) {
  const std::string& name = p.source->name();
  if (!co_await s.turns.wait(r.part)) {
    co_return make_error(errc::cancelled, name + ": tensor " + s.header.name + ": verification abandoned (the load failed)");
  }
  const auto t0 = pipeline_clock::now();
  if (r.part == 0) s.sha->update(s.header.hash_prefix);
  s.sha->update(bytes);
  result<void> ok;
  // Every earlier part stored its CRC before its own turn passed, so all are in by now.
  if (r.part + 1 == s.part_crc.size()) {
    std::optional<std::uint32_t> crc;
    if (!p.crc_on_device) crc = combined_crc(s);
    ok = format::check_tensor_hashes(s.header, crc, s.sha->finish(), name);
  }
  p.counters.verify_ns += nanoseconds_since(t0);
  s.turns.pass();
  co_return ok;
}

// A part of a split tensor: decrypt its whole chunks (any order), take its CRC32, then its SHA-256
// turn.
task<result<void>> check_split_part(pipeline& p, const load_range& r, std::span<std::byte> bytes, landing& where) {
  split_state& s = *p.splits[r.split_tensor];
  const plan_piece& piece = r.pieces.front();
  if (p.encrypted && p.decrypt_on_device) {
    const std::uint64_t chunk = format::cipher_chunk_bytes(s.header);
    const crypto::chunk_range chunks{piece.data_begin_bytes / chunk,
                                     (piece.data_begin_bytes + piece.length_bytes - 1) / chunk + 1};
    auto header = std::make_shared<const format::tensor_header>(s.header);
    for (const auto& c : format::cipher_chunks(s.header, chunks))
      where.sealed.push_back({static_cast<std::uint32_t>(r.split_tensor), c, s.key, header});
  } else if (p.encrypted) {
    const auto t0 = pipeline_clock::now();
    const std::uint64_t chunk = format::cipher_chunk_bytes(s.header);
    // The last byte's chunk, + 1: no "+ chunk - 1" that a hostile chunk size near 2^64 would wrap
    // (a part is never empty, and its end lies inside the file).
    const crypto::chunk_range chunks{piece.data_begin_bytes / chunk,
                                     (piece.data_begin_bytes + piece.length_bytes - 1) / chunk + 1};
    auto ok = format::decrypt_chunks(s.header, bytes, chunks, *s.key, p.source->name());
    p.counters.decrypt_ns += nanoseconds_since(t0);
    TZ_CO_CHECK(ok);
  }
  if (r.part + 1 == s.part_crc.size()) p.tensors_done.fetch_add(1, std::memory_order_relaxed);
  if (!s.sha) co_return result<void>{};  // not verified
  if (!p.crc_on_device) {
    const auto t0 = pipeline_clock::now();
    s.part_crc[r.part] = crc32(bytes);
    p.counters.verify_ns += nanoseconds_since(t0);
  }
  co_return co_await hash_in_turn(p, r, s, bytes);
}

}  // namespace

task<result<void>> check_range(pipeline& p, const load_range& r, landing& where) {
  where.sealed.clear();
  if (r.split_tensor != no_split) co_return co_await check_split_part(p, r, where.pieces.front(), where);
  co_return check_whole_tensors(p, r, where);
}

}  // namespace tz
