# tests/secretbox.cmake: the GPU secretbox-open. secretbox_test runs its arithmetic
# (cuda/secretbox_math.hpp, a private header of cuda/) on the host against libsodium, everywhere;
# secretbox_gpu_test runs the kernels on a GPU against libsodium and exits 77 (skipped) without one.
tz_add_doctest(secretbox_test SOURCES secretbox_test.cpp LIBS PkgConfig::SODIUM)
target_include_directories(secretbox_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)

tz_add_gpu_test(secretbox_gpu_test SOURCES secretbox_gpu_test.cpp LIBS PkgConfig::SODIUM)
