# format/ tests (format_test; format_test_reference reads the reference vectors): byte-identical
# write-back, malformed input, data version 5, names and dtypes.
tz_add_doctest(format_test SOURCES format_test.cpp format_malformed_test.cpp format_v5_test.cpp file_reader.cpp
  LIBS tz::format tz::crypto REFERENCE)
