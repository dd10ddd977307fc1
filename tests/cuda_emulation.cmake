# The CUDA path without a GPU: cuda/'s runtime sources compiled against a host emulation of the
# CUDA runtime API (cuda_emulation/), linked with the same engine and sources objects as the real
# build. The GPU suites of cuda_test and device_load_test, the emulation's own fault-injection tests
# and a smoke run of gpu_load_bench then run on every machine. They test our logic (ring, streams,
# completions, errors, leaks, buffer reuse) under CUDA's rules; only a GPU tests CUDA itself.
set(tz_emulation_dir ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emulation)
add_library(tz_cuda_emulated STATIC
  ${PROJECT_SOURCE_DIR}/cuda/cuda_common.cpp ${PROJECT_SOURCE_DIR}/cuda/dlpack.cpp
  ${PROJECT_SOURCE_DIR}/cuda/cuda_runtime.cpp ${PROJECT_SOURCE_DIR}/cuda/cuda_uploader.cpp
  # Kernels cannot run on the emulation: the secretbox launcher is the stub of the null build.
  ${PROJECT_SOURCE_DIR}/cuda/secretbox_null.cpp
  ${tz_emulation_dir}/control.cpp ${tz_emulation_dir}/memory.cpp ${tz_emulation_dir}/streams.cpp)
# cuda_runtime.h comes from the emulation, never from the toolkit.
target_include_directories(tz_cuda_emulated BEFORE PRIVATE ${tz_emulation_dir})
target_include_directories(tz_cuda_emulated PUBLIC ${tz_emulation_dir}/include)
target_link_libraries(tz_cuda_emulated PUBLIC tz::cuda_headers Threads::Threads)
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
tz_add_doctest(device_load_emulated_test SOURCES device_load_test.cpp LIBS tz_emulated_stack REFERENCE)
tz_add_doctest(cuda_emulation_test SOURCES cuda_emulation_test.cpp LIBS tz_emulated_stack)

if(TZ_BUILD_BENCH)
  add_executable(gpu_load_bench_emulated ${PROJECT_SOURCE_DIR}/bench/gpu_load_bench.cpp)
  target_link_libraries(gpu_load_bench_emulated PRIVATE tz_emulated_stack)
  tz_target_defaults(gpu_load_bench_emulated)
  add_test(NAME gpu_load_bench_emulated_smoke COMMAND gpu_load_bench_emulated --smoke --configs 8x2,2x4:1)
endif()

# The CLI on the emulation: `load --device` runs in CI without a GPU.
add_executable(tensorizer_emulated ${tz_tool_sources})
target_link_libraries(tensorizer_emulated PRIVATE tz_tooling_objects tz_sources_emulated)
tz_target_defaults(tensorizer_emulated)
# Its `load --device`: local files, and over
# HTTP from nginx (registered in tests/net_cli.cmake, beside the other tests needing its fixture).
add_test(NAME cli_device_emulated COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli_device_emulated.sh local
         $<TARGET_FILE:tensorizer_emulated> ${CMAKE_BINARY_DIR})
