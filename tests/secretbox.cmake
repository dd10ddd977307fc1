# tests/secretbox.cmake: the GPU secretbox-open. secretbox_test runs its arithmetic
# (cuda/secretbox_math.hpp, a private header of cuda/) on the host against libsodium, everywhere;
# (secretbox_gpu_test, the kernels on a GPU, comes with them.)
tz_add_doctest(secretbox_test SOURCES secretbox_test.cpp LIBS PkgConfig::SODIUM)
target_include_directories(secretbox_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)
