# tests/crc32_device.cmake: the GPU CRC-32 (tz/cuda/crc32.hpp). crc32_kernel_test runs its arithmetic
# and span decomposition (cuda/crc32_math.hpp, a private header of cuda/) on the host against zlib
# and the library CRC, everywhere; crc32_emulation_test runs the real launcher on the CUDA
# emulation; crc32_gpu_test runs the kernel on a GPU and exits 77 (skipped) without one.
tz_add_doctest(crc32_kernel_test SOURCES crc32_kernel_test.cpp LIBS tz::crypto ZLIB::ZLIB)
target_include_directories(crc32_kernel_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)

# tz_cuda_emulated is defined in tests/cuda_emulation.cmake.
tz_add_doctest(crc32_emulation_test SOURCES crc32_emulation_test.cpp LIBS tz_cuda_emulated tz::crypto)

tz_add_gpu_test(crc32_gpu_test SOURCES crc32_gpu_test.cpp LIBS tz::crypto)
