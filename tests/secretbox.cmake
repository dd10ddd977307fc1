# tests/secretbox.cmake: the GPU secretbox-open. secretbox_test runs its arithmetic
# (cuda/secretbox_math.hpp, a private header of cuda/) on the host against libsodium, everywhere;
# secretbox_gpu_test runs the kernels on a GPU against libsodium and exits 77 (skipped) without one.
tz_add_doctest(secretbox_test SOURCES secretbox_test.cpp LIBS PkgConfig::SODIUM)
target_include_directories(secretbox_test PRIVATE ${PROJECT_SOURCE_DIR}/cuda)

if(TZ_HAVE_CUDA)
  # Its own main: the skip is decided before any case runs.
  add_executable(secretbox_gpu_test secretbox_gpu_test.cpp)
  target_link_libraries(secretbox_gpu_test PRIVATE doctest::doctest tz::cuda CUDA::cudart PkgConfig::SODIUM)
  tz_target_defaults(secretbox_gpu_test)
  add_test(NAME secretbox_gpu_test COMMAND secretbox_gpu_test)
  set_tests_properties(secretbox_gpu_test PROPERTIES SKIP_RETURN_CODE 77)
endif()
