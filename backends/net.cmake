# backends/net.cmake: tz_net (tz::net), the network byte sources (HTTP/HTTPS, S3, Redis), kept apart
# from tz_backends so the Beast/OpenSSL/hiredis dependencies and compile cost stay in one target.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
file(GLOB tz_net_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/net/*.cpp)
add_library(tz_net ${tz_net_sources})
add_library(tz::net ALIAS tz_net)
# byte_source and task come from tz::base, the Redis key layout from tz::format; tz::crypto for SigV4's SHA-256.
target_include_directories(tz_net PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include PRIVATE ${CMAKE_CURRENT_LIST_DIR}/net)
target_link_libraries(tz_net PUBLIC tz::base tz::format Boost::headers Threads::Threads
                      PRIVATE tz::crypto OpenSSL::SSL OpenSSL::Crypto PkgConfig::HIREDIS)
# Separate compilation of Asio/Beast would need BOOST_ASIO_SEPARATE_COMPILATION project-wide; instead
# the Beast+SSL code lives in one TU (net/http_client.cpp).
tz_target_defaults(tz_net)
