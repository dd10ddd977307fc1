# tests/fuzz.cmake: the parsers' libFuzzer harnesses (tests/fuzz/). With TZ_FUZZ=ON (clang++) each
# becomes a fuzzer fuzz_<name>; in every other build each becomes fuzz_replay_<name>, a CTest entry
# that replays the harness's committed seeds and regression inputs through the same invariants.
set(tz_fuzz_dir ${CMAKE_CURRENT_LIST_DIR}/fuzz)
set(tz_net_src ${PROJECT_SOURCE_DIR}/backends/net)
# Imported targets are directory-scoped: the one of backends/net.cmake is not visible here.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)

if(NOT TZ_FUZZ)
  add_library(tz_fuzz_replay_main OBJECT ${tz_fuzz_dir}/replay_main.cpp)
  tz_target_defaults(tz_fuzz_replay_main)
endif()

# tz_fuzz_harness(NAME SOURCES... LIBS... INCLUDES...): tests/fuzz/fuzz_NAME.cpp plus the parser sources it
# needs beyond LIBS (the network parsers are compiled in directly, not through tz_net).
function(tz_fuzz_harness name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;INCLUDES" ${ARGN})
  if(TZ_FUZZ)
    set(target fuzz_${name})
    add_executable(${target} ${tz_fuzz_dir}/fuzz_${name}.cpp ${ARG_SOURCES})
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  else()
    set(target fuzz_replay_${name})
    add_executable(${target} ${tz_fuzz_dir}/fuzz_${name}.cpp ${ARG_SOURCES} $<TARGET_OBJECTS:tz_fuzz_replay_main>)
    add_test(NAME ${target} COMMAND ${target} ${tz_fuzz_dir}/seeds/${name} ${tz_fuzz_dir}/regressions/${name})
  endif()
  target_include_directories(${target} PRIVATE ${tz_fuzz_dir} ${tz_net_src} ${ARG_INCLUDES})
  target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  tz_target_defaults(${target})
endfunction()

tz_fuzz_harness(tensors_file LIBS tz::format tz::crypto)
tz_fuzz_harness(tensors_prefix LIBS tz::format tz::crypto)
tz_fuzz_harness(crypt_info LIBS tz::format tz::crypto)
tz_fuzz_harness(safetensors LIBS tz::format tz::crypto)
tz_fuzz_harness(shard_index LIBS tz::format tz::crypto)
tz_fuzz_harness(s3_xml SOURCES ${tz_net_src}/s3_xml.cpp)
tz_fuzz_harness(redis_reply SOURCES ${tz_net_src}/redis_reply.cpp LIBS tz::crypto PkgConfig::HIREDIS)
tz_fuzz_harness(http_response SOURCES ${tz_net_src}/http_response_parse.cpp
                LIBS tz::crypto Boost::headers Threads::Threads
                INCLUDES ${PROJECT_SOURCE_DIR}/backends/include ${PROJECT_SOURCE_DIR}/engine/include)

# The seed maker (tests/fuzz/make_seeds.cpp): regenerates tests/fuzz/seeds/ and campaign corpora.
add_executable(fuzz_make_seeds ${tz_fuzz_dir}/make_seeds.cpp)
target_link_libraries(fuzz_make_seeds PRIVATE tz::format tz::crypto)
tz_target_defaults(fuzz_make_seeds)
