// The loader: reading the index (.tensors or safetensors), selecting, planning, laying out memory.
#include "tz/engine/loader.hpp"

#include "tz/base/clock.hpp"
#include "tz/format/safetensors.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tz {

namespace {

task<result<std::vector<std::byte>>> read_bytes(byte_source& src, std::uint64_t offset, std::uint64_t n) {
  std::vector<std::byte> buf(n);
  std::span<std::byte> one[1] = {buf};
  TZ_CO_CHECK(co_await src.read(offset, one));
  co_return buf;
}

task<result<format::file_index>> read_tensorizer_index(byte_source& src, std::uint64_t size) {
  TZ_CO_TRY(prefix, co_await read_bytes(src, 0, format::file_prefix_bytes));
  TZ_CO_TRY(header, format::parse_file_header(prefix, size, src.name()));
  // parse_file_header checked that metadata_bytes is capped and inside the file.
  TZ_CO_TRY(metadata, co_await read_bytes(src, format::file_prefix_bytes, header.metadata_bytes));
  co_return format::parse_index(header, metadata, size, src.name());
}

// A safetensors tensor as a data-only entry: no per-tensor header, so header_offset == data_offset.
format::tensor_entry entry_from_st(const format::st_tensor& t) {
  format::tensor_entry e;
  e.name = t.name;
  e.path = format::plain_path(t.name);
  e.type = format::tensor_type::state_dict;
  if (auto d = format::st_dtype_to_tensorizer(t.dtype)) e.dtype = *d;
  else e.dtype.stored = t.dtype;  // packed sub-byte codes: bytes still load, the dtype stays opaque
  e.shape = t.shape;
  e.element_count = 1;
  for (auto d : t.shape) e.element_count *= d;
  e.header_offset = e.data_offset = t.data_begin;
  e.data_length = e.deserialized_bytes = t.size_bytes();
  return e;
}

task<result<format::file_index>> read_safetensors_index(byte_source& src, std::uint64_t size) {
  TZ_CO_TRY(first, co_await read_bytes(src, 0, 8));
  TZ_CO_TRY(n, format::st_header_length(std::span<const std::byte, 8>(first.data(), 8), size, src.name()));
  TZ_CO_TRY(json, co_await read_bytes(src, 8, n));
  TZ_CO_TRY(st, format::parse_safetensors_header(json, size, src.name()));
  format::file_index index;
  index.source = src.name();
  index.file_bytes = size;
  index.header.tensor_count = st.tensors.size();
  index.st_metadata = std::move(st.metadata);
  for (const auto& t : st.tensors) {
    index.tensors.push_back(entry_from_st(t));
    index.header.tensor_size += t.size_bytes();
  }
  co_return index;
}

}  // namespace

task<result<loader>> loader::async_open(std::shared_ptr<byte_source> source) {
  auto t0 = std::chrono::steady_clock::now();
  TZ_CO_TRY(size, co_await source->size());
  if (size < 8) co_return make_error(errc::format, source->name() + ": " + std::to_string(size) +
                                                       " bytes is too small for a .tensors or safetensors file");
  TZ_CO_TRY(magic, co_await read_bytes(*source, 0, format::magic_bytes));
  loader l;
  l.kind_ = std::memcmp(magic.data(), "|TZR|", 5) == 0 ? file_kind::tensorizer : file_kind::safetensors;
  // Two statements, not one ?: with a co_await in each arm: GCC 12 mishandles those temporaries.
  result<format::file_index> index = make_error(errc::format, "");
  if (l.kind_ == file_kind::tensorizer) {
    index = co_await read_tensorizer_index(*source, size);
  } else {
    index = co_await read_safetensors_index(*source, size);
  }
  if (!index) co_return index.error();
  l.index_ = std::make_shared<const format::file_index>(std::move(*index));
  l.source_ = std::move(source);
  l.open_s_ = seconds_since(t0);
  co_return l;
}

result<loader> loader::open(scheduler& sched, std::shared_ptr<byte_source> source) {
  return run(sched, async_open(std::move(source)));
}

loader loader::open_or_throw(scheduler& sched, std::shared_ptr<byte_source> source) {
  return unwrap(open(sched, std::move(source)));
}

std::optional<std::size_t> loader::find(std::string_view name) const {
  const auto& ts = index_->tensors;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].name == name || format::display_name(ts[i].path) == name) return i;
  }
  return std::nullopt;
}

std::vector<std::size_t> loader::select(const std::function<bool(const format::tensor_entry&)>& keep) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < index_->tensors.size(); ++i) {
    if (keep(index_->tensors[i])) out.push_back(i);
  }
  return out;
}

std::optional<std::size_t> loaded_tensors::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i]->name == name || format::display_name(entries_[i]->path) == name) return i;
  }
  return std::nullopt;
}

}  // namespace tz
