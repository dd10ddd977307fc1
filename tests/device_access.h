/* Device memory as the tests of the public APIs (C++ facade, C ABI, Python's _C) see it: those APIs
 * hand out device addresses only, so these C functions count the devices and copy device bytes back
 * to the host through the CUDA runtime of the library under test. Linked into that library's module
 * where it embeds the CUDA emulation (its memory is private to the module: tests/cuda_emulation.cmake),
 * into the test executable otherwise (libcudart, or nothing without CUDA). C and C++. */
#ifndef TZ_TEST_DEVICE_ACCESS_H
#define TZ_TEST_DEVICE_ACCESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TZ_TEST_EXPORT __attribute__((visibility("default")))

/* The CUDA devices visible; 0 without CUDA or when the runtime cannot count them. */
TZ_TEST_EXPORT int tz_test_device_count(void);

/* Copies size_bytes from device address `device` to `host` (synchronous). 0 on success, -1 when the
 * CUDA runtime refuses (an address that is not device memory, a range past an allocation). */
TZ_TEST_EXPORT int tz_test_device_read(void* host, const void* device, size_t size_bytes);

/* Allocates size_bytes of device memory on the current device (cudaMalloc): a destination the
 * caller owns, as a CUDA tensor's storage is. NULL when the runtime refuses. */
TZ_TEST_EXPORT void* tz_test_device_alloc(size_t size_bytes);
/* Frees what tz_test_device_alloc gave (NULL is fine). */
TZ_TEST_EXPORT void tz_test_device_free(void* device);

/* The same for the tensor a DLPack DLManagedTensor* describes (Python's Loaded.dlpack capsules):
 * 0 on success; -2 when it is not on a CUDA device or is not size_bytes long; -1 as above. */
TZ_TEST_EXPORT int tz_test_dltensor_read(const void* managed_tensor, void* host, size_t size_bytes);

#ifdef __cplusplus
}
#endif

#endif
