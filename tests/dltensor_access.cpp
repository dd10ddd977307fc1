// tz_test_dltensor_read (tests/device_access.h): the bytes of a DLPack tensor on a CUDA device, for the
// Python test of _C on the CUDA emulation, which gets device tensors only as DLPack capsules.
#include "device_access.h"

#include "tz/cuda/dlpack.hpp"

extern "C" int tz_test_dltensor_read(const void* managed_tensor, void* host, size_t size_bytes) {
  const DLTensor& t = static_cast<const DLManagedTensor*>(managed_tensor)->dl_tensor;
  if (t.device.device_type != kDLCUDA) return -2;
  size_t n = (static_cast<size_t>(t.dtype.bits) * t.dtype.lanes + 7) / 8;
  for (int d = 0; d < t.ndim; ++d) n *= static_cast<size_t>(t.shape[d]);
  if (n != size_bytes) return -2;
  return tz_test_device_read(host, static_cast<const char*>(t.data) + t.byte_offset, size_bytes);
}
