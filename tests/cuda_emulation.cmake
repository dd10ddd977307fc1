# The CUDA path without a GPU: cuda/'s runtime sources compiled against a host emulation of the
# CUDA runtime API (cuda_emulation/), linked with the same engine and sources objects as the real
# build. The GPU suites of cuda_test and device_load_test, the emulation's own fault-injection tests
# and a smoke run of gpu_load_bench then run on every machine. They test our logic (ring, streams,
# completions, errors, leaks, buffer reuse) under CUDA's rules; only a GPU tests CUDA itself.
set(tz_emulation_dir ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emulation)
add_library(tz_cuda_emulated STATIC
  ${PROJECT_SOURCE_DIR}/cuda/cuda_common.cpp ${PROJECT_SOURCE_DIR}/cuda/dlpack.cpp
  ${PROJECT_SOURCE_DIR}/cuda/cuda_runtime.cpp ${PROJECT_SOURCE_DIR}/cuda/cuda_uploader.cpp
  # The secretbox kernels as stream operations that open each chunk with libsodium: the device
  # sink's decryption runs here as on a GPU (the kernels' arithmetic has tests of its own).
  ${tz_emulation_dir}/secretbox.cpp
  # The CRC-32 launcher itself, with the kernel as a stream operation running its decomposition on
  # the host (crc32_math.hpp's reference_job_crc); crc32_null.cpp is the null build's alone.
  ${PROJECT_SOURCE_DIR}/cuda/crc32_launch.cpp ${tz_emulation_dir}/crc32.cpp
  ${tz_emulation_dir}/control.cpp ${tz_emulation_dir}/memory.cpp ${tz_emulation_dir}/streams.cpp)
# cuda_runtime.h comes from the emulation, never from the toolkit.
target_include_directories(tz_cuda_emulated BEFORE PRIVATE ${tz_emulation_dir})
target_include_directories(tz_cuda_emulated PRIVATE ${PROJECT_SOURCE_DIR}/cuda)  # crc32_batch.hpp
target_include_directories(tz_cuda_emulated PUBLIC ${tz_emulation_dir}/include)
target_link_libraries(tz_cuda_emulated PUBLIC tz::cuda_headers Threads::Threads PRIVATE PkgConfig::SODIUM)
target_compile_definitions(tz_cuda_emulated PUBLIC TZ_HAVE_CUDA=1 TZ_CUDA_EMULATED=1)
tz_target_defaults(tz_cuda_emulated)

add_library(tz_engine_emulated STATIC)
target_link_libraries(tz_engine_emulated PUBLIC tz_engine_objects tz_cuda_emulated)
# What the emulated suites link (a test bundle, not a layer): the engine on the emulation beside the
# CUDA-free backends; tz_sources_emulated adds tz::sources' objects for the CLI.
add_library(tz_emulated_stack INTERFACE)
target_link_libraries(tz_emulated_stack INTERFACE tz::backends tz_engine_emulated)
add_library(tz_sources_emulated STATIC)
target_link_libraries(tz_sources_emulated PUBLIC tz_sources_objects tz_emulated_stack)

tz_add_doctest(cuda_emulated_test SOURCES cuda_test.cpp LIBS tz_cuda_emulated)
tz_add_doctest(device_load_emulated_test SOURCES $<TARGET_OBJECTS:tz_device_load_test_objects> LIBS tz_emulated_stack REFERENCE)
tz_add_doctest(cuda_emulation_test SOURCES cuda_emulation_test.cpp LIBS tz_emulated_stack)
tz_add_doctest(cuda_emulation_crypt_test SOURCES cuda_emulation_crypt_test.cpp LIBS tz_emulated_stack)
# Extents (a partition's share, slices) onto the device through the ring.
tz_add_doctest(cuda_emulation_extents_test SOURCES cuda_emulation_extents_test.cpp LIBS tz_emulated_stack)
# Tensors as they land from device loads (on_tensor_ready).
tz_add_doctest(cuda_emulation_ready_test SOURCES cuda_emulation_ready_test.cpp LIBS tz_emulated_stack)

if(TZ_BUILD_BENCH)
  add_executable(gpu_load_bench_emulated ${PROJECT_SOURCE_DIR}/bench/gpu_load_bench.cpp)
  target_link_libraries(gpu_load_bench_emulated PRIVATE tz_emulated_stack)
  tz_target_defaults(gpu_load_bench_emulated)
  add_test(NAME gpu_load_bench_emulated_smoke COMMAND gpu_load_bench_emulated --smoke --configs 8x2,2x4:1)
  # The GPU table's script on the emulation (CLI plain, verified, encrypted, safetensors, the C ABI
  # where the shared library is built; the engine reference), so that it cannot rot between GPU runs.
  add_test(NAME gpu_table_emulated_smoke COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/bench/gpu_table.py
           --bin ${CMAKE_BINARY_DIR}/bin --smoke --emulated)
endif()

# The CLI on the emulation: `load --device` runs in CI without a GPU.
add_executable(tensorizer_emulated)
target_link_libraries(tensorizer_emulated PRIVATE tz_tooling_objects tz_sources_emulated)
tz_target_defaults(tensorizer_emulated)
# Its `load --device`: local files, and over
# HTTP from nginx (registered in tests/net_cli.cmake, beside the other tests needing its fixture).
add_test(NAME cli_device_emulated COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli_device_emulated.sh local
         $<TARGET_FILE:tensorizer_emulated>)

# The public APIs on the emulation. libtensorizer's objects as a shared library of their own
# (tensorizer_api_emulated: the same objects, version script and hidden engine as libtensorizer.so)
# over the emulated engine, with tests/device_access.h inside it: the emulated device memory belongs
# to the module that holds the emulation, so the tests read it back through the library's own copy.
# api_emulated_test runs api_test's host and "gpu" suites on it; c_api_emulated_test runs the C
# program, both modes. Device bytes are compared value by value with what was written.
if(TARGET tensorizer_shared)
  add_library(tensorizer_api_emulated SHARED $<TARGET_OBJECTS:tensorizer_api_objects>
              ${CMAKE_CURRENT_LIST_DIR}/device_access.cpp)
  target_include_directories(tensorizer_api_emulated PUBLIC
    $<TARGET_PROPERTY:tensorizer_shared,INTERFACE_INCLUDE_DIRECTORIES> ${CMAKE_CURRENT_LIST_DIR})
  target_include_directories(tensorizer_api_emulated BEFORE PRIVATE ${tz_emulation_dir})
  target_compile_features(tensorizer_api_emulated PUBLIC cxx_std_20)
  target_link_libraries(tensorizer_api_emulated PRIVATE tz_sources_emulated)
  target_link_options(tensorizer_api_emulated PRIVATE
    -Wl,--version-script=${PROJECT_SOURCE_DIR}/api/exports.map -Wl,--exclude-libs,ALL)
  tz_target_defaults(tensorizer_api_emulated)

  tz_add_doctest(api_emulated_test SOURCES $<TARGET_OBJECTS:tz_api_test_objects>
                 LIBS tensorizer_api_emulated tz::format tz::crypto tz::signing EXCLUDE http)

  add_executable(c_api_emulated_test ${CMAKE_CURRENT_LIST_DIR}/c_api_test.c)
  set_target_properties(c_api_emulated_test PROPERTIES LINKER_LANGUAGE C)
  target_link_libraries(c_api_emulated_test PRIVATE tensorizer_api_emulated)
  target_compile_options(c_api_emulated_test PRIVATE -Wall -Wextra -Wpedantic -Werror)
  add_test(NAME c_api_emulated_test COMMAND c_api_emulated_test ${tz_api_files_dir})
  add_test(NAME c_api_emulated_test_device COMMAND c_api_emulated_test ${tz_api_files_dir} device)
  set_tests_properties(c_api_emulated_test c_api_emulated_test_device PROPERTIES FIXTURES_REQUIRED tz_api_files)
  if(TZ_BUILD_BENCH)  # the GPU table's C ABI row on the emulation (gpu_table_emulated_smoke)
    add_executable(c_load_bench_emulated ${PROJECT_SOURCE_DIR}/bench/c_load_bench.c)
    target_link_libraries(c_load_bench_emulated PRIVATE tensorizer_api_emulated)
    target_compile_options(c_load_bench_emulated PRIVATE -Wall -Wextra -Werror)
  endif()
endif()

# Python's _C on the emulation, where pybind11 and the Python headers are found: python/src built
# as tensorizer/_C in python-emulated/ of the build tree, with tests/device_access.h exported for
# ctypes (dltensor_access.cpp reads a DLPack capsule's device bytes). tests/python/device_emulated.py
# loads through _C.Reader(device=0) and TensorDeserializer(device="cuda:0") and compares every
# tensor's bytes read back from the device with `tensorizer hash`.
set(Python_EXECUTABLE ${Python3_EXECUTABLE})
find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
if(Python_FOUND)
  execute_process(COMMAND ${Python_EXECUTABLE} -m pybind11 --cmakedir OUTPUT_VARIABLE tz_pybind11_dir
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_package(pybind11 CONFIG QUIET HINTS ${tz_pybind11_dir})
endif()
if(pybind11_FOUND)
  file(GLOB tz_python_emulated_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/src/*.cpp)
  pybind11_add_module(tz_python_emulated MODULE ${tz_python_emulated_sources}
                      ${CMAKE_CURRENT_LIST_DIR}/device_access.cpp ${CMAKE_CURRENT_LIST_DIR}/dltensor_access.cpp)
  set_target_properties(tz_python_emulated PROPERTIES OUTPUT_NAME _C
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python-emulated/tensorizer)
  target_include_directories(tz_python_emulated BEFORE PRIVATE ${tz_emulation_dir})
  target_link_libraries(tz_python_emulated PRIVATE tz_sources_emulated)
  tz_target_defaults(tz_python_emulated)
  target_compile_options(tz_python_emulated PRIVATE -Wno-pedantic)  # as python/CMakeLists.txt
  target_compile_definitions(tz_python_emulated PRIVATE TZ_VERSION="${PROJECT_VERSION}")
  # python_device_emulated: _C itself; python_device_emulated_torch: TensorDeserializer (needs torch).
  foreach(mode c deserializer)
    set(name python_device_emulated)
    if(mode STREQUAL deserializer)
      set(name python_device_emulated_torch)
    endif()
    add_test(NAME ${name} COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/python/device_emulated.py ${mode}
             $<TARGET_FILE_DIR:tz_python_emulated> ${PROJECT_SOURCE_DIR}/python $<TARGET_FILE:tensorizer>)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
  endforeach()
else()
  message(STATUS "tensorizer: no pybind11 or Python headers: Python's _C is not tested on the CUDA emulation")
endif()
