# tests/hash.cmake: tz/crypto/hash.hpp (CRC-32 and its combine against zlib, SHA-256 pieces and vectors).
tz_add_doctest(hash_test SOURCES hash_test.cpp LIBS tz::crypto ZLIB::ZLIB Threads::Threads)
