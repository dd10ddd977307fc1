# backends/sources.cmake: tz_sources (tz::sources), sources as a library for the CLI and the Python
# module: open any FILE-or-URI (file, http(s), s3, redis) as a byte source or sequential reader, local
# copies of remote inputs, and atomic output targets (local, S3, Redis). Above tz_backends and tz_net:
# it runs their tasks on the engine's scheduler, so it is compiled once as objects (as in
# engine/CMakeLists.txt) and linked with the real CUDA stage here, with the emulation in tests/.
add_library(tz_sources_objects OBJECT ${CMAKE_CURRENT_LIST_DIR}/sources/sources.cpp
            ${CMAKE_CURRENT_LIST_DIR}/sources/checkpoint.cpp)
target_link_libraries(tz_sources_objects PUBLIC tz::backends tz::net tz::format tz_engine_objects)
tz_target_defaults(tz_sources_objects)
add_library(tz_sources STATIC)
add_library(tz::sources ALIAS tz_sources)
target_link_libraries(tz_sources PUBLIC tz_sources_objects tz::engine)
