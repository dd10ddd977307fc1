// The result of a load to device memory: tensor views into one device allocation, DLPack export.
#include "tz/engine/device_load.hpp"

#include <string>

namespace tz {

namespace {

DLDataType dl(DLDataTypeCode code, unsigned bits) {
  return DLDataType{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
}

// Opaque (void) dtypes are recognised by their torch name.
result<DLDataType> opaque_dtype(const format::dtype_info& d) {
  const unsigned bits = static_cast<unsigned>(8 * d.itemsize);
  if (d.torch == "torch.bfloat16") return dl(kDLBfloat, 16);
  if (d.torch == "torch.complex32") return dl(kDLComplex, 32);
  // float8 variants (and raw bits8) have no DLPack type code: their bytes go out as uint8 and the
  // consumer reinterprets them by the dtype name it knows from the index.
  if (d.torch.rfind("torch.float8_", 0) == 0 || d.torch == "torch.bits8") return dl(kDLUInt, bits);
  return make_error(errc::unsupported, "dtype " + format::dtype_display(d) + " has no DLPack equivalent");
}

}  // namespace

result<DLDataType> dlpack_dtype(const format::dtype_info& d) {
  if (d.numpy.size() < 3 || d.itemsize == 0 || d.itemsize > 16) {
    return make_error(errc::unsupported, "dtype '" + d.stored + "' has no DLPack equivalent");
  }
  const unsigned bits = static_cast<unsigned>(8 * d.itemsize);
  switch (d.numpy[1]) {
    case 'b': return dl(kDLBool, bits);
    case 'i': return dl(kDLInt, bits);
    case 'u': return dl(kDLUInt, bits);
    case 'f': return dl(kDLFloat, bits);
    case 'c': return dl(kDLComplex, bits);
    case 'V': return opaque_dtype(d);
    default: return make_error(errc::unsupported, "dtype '" + d.numpy + "' has no DLPack equivalent");
  }
}

void* device_tensors::data(std::size_t i) const noexcept {
  if (!buffer_ || buffer_->data() == nullptr) return nullptr;
  return static_cast<std::byte*>(buffer_->data()) + offsets_[i];
}

std::optional<std::size_t> device_tensors::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].name == name || format::display_name(entries_[i].path) == name) return i;
  }
  return std::nullopt;
}

result<cuda::managed_tensor_ptr> device_tensors::to_dlpack(std::size_t i) const {
  if (i >= entries_.size()) {
    return make_error(errc::invalid_argument, "to_dlpack: tensor " + std::to_string(i) + " of a load of " +
                                                  std::to_string(entries_.size()) + " tensors");
  }
  const auto& e = entries_[i];
  auto dtype = dlpack_dtype(e.dtype);
  if (!dtype) return make_error(dtype.error().code, "to_dlpack: tensor " + e.name + ": " + dtype.error().message);
  std::vector<std::int64_t> shape;
  shape.reserve(e.shape.size());
  for (std::uint64_t d : e.shape) {
    if (d > static_cast<std::uint64_t>(INT64_MAX)) {
      return make_error(errc::invalid_argument, "to_dlpack: tensor " + e.name + ": extent " + std::to_string(d) +
                                                    " does not fit int64");
    }
    shape.push_back(static_cast<std::int64_t>(d));
  }
  // The capsule shares the allocation: it stays valid after this object is destroyed.
  return cuda::to_dlpack_cuda(data(i), device(), *dtype, shape, buffer_);
}

// The blocking form lives apart from the coroutine: GCC 12 otherwise inlines the coroutine ramp
// and reports a false -Wmismatched-new-delete on the frame.
result<device_tensors> load_to_device(scheduler& sched, device_context& ctx, const loader& opened,
                                      std::vector<std::size_t> which, device_load_options options) {
  return run(sched, async_load_to_device(sched, ctx, opened, std::move(which), std::move(options)));
}

}  // namespace tz
