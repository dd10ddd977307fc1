// tensorizer::host_tensors and tensorizer::device_tensors: read-only views of one load, owning its
// memory (the engine's loaded_tensors / device_tensors).
#include "api_detail.hpp"

namespace tensorizer {

namespace {

template <class Impl>
std::optional<std::size_t> find_in(const Impl& p, std::string_view name) noexcept {
  for (std::size_t i = 0; i < p.indices.size(); ++i)
    if ((*p.infos)[p.indices[i]].name == name) return i;
  return std::nullopt;
}

}  // namespace

host_tensors::host_tensors(std::unique_ptr<impl> p) noexcept : p_(std::move(p)) {}
host_tensors::host_tensors(host_tensors&&) noexcept = default;
host_tensors& host_tensors::operator=(host_tensors&&) noexcept = default;
host_tensors::~host_tensors() = default;

std::size_t host_tensors::size() const noexcept { return p_->indices.size(); }
const tensor_info& host_tensors::info(std::size_t i) const { return (*p_->infos)[p_->indices.at(i)]; }
std::span<std::byte> host_tensors::data(std::size_t i) const {
  // The allocation is this object's alone (see the header): handing it out writable is sound.
  auto d = p_->loaded.data(i);
  return {const_cast<std::byte*>(d.data()), d.size()};
}
std::optional<std::size_t> host_tensors::find(std::string_view name) const noexcept { return find_in(*p_, name); }
const load_timings& host_tensors::timings() const noexcept { return p_->timings; }
std::uint64_t host_tensors::bytes() const noexcept { return p_->loaded.bytes(); }

device_tensors::device_tensors(std::unique_ptr<impl> p) noexcept : p_(std::move(p)) {}
device_tensors::device_tensors(device_tensors&&) noexcept = default;
device_tensors& device_tensors::operator=(device_tensors&&) noexcept = default;
device_tensors::~device_tensors() = default;

std::size_t device_tensors::size() const noexcept { return p_->indices.size(); }
const tensor_info& device_tensors::info(std::size_t i) const { return (*p_->infos)[p_->indices.at(i)]; }
void* device_tensors::data(std::size_t i) const { return p_->loaded.data(i); }
std::optional<std::size_t> device_tensors::find(std::string_view name) const noexcept { return find_in(*p_, name); }
int device_tensors::device() const noexcept { return p_->loaded.device(); }
const load_timings& device_tensors::timings() const noexcept { return p_->timings; }

}  // namespace tensorizer
