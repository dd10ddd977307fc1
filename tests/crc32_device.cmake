# tests/crc32_device.cmake: the GPU CRC-32 (tz/cuda/crc32.hpp). crc32_kernel_test runs its arithmetic
# and span decomposition (cuda/crc32_math.hpp, a private header of cuda/) on the host against zlib
# and the library CRC, everywhere.
tz_add_doctest(crc32_kernel_test SOURCES crc32_kernel_test.cpp LIBS tz::crypto ZLIB::ZLIB)
target_include_directories(crc32_kernel_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
