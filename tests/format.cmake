# format/ tests (format_test; format_test_reference reads the reference vectors of tensorizer 2.11.1,
# format_test_reference_2121 those of 2.12.1): byte-identical write-back, malformed input, data version 5,
# names and dtypes, the writer into a caller's stream.
tz_add_doctest(format_test SOURCES format_test.cpp format_malformed_test.cpp format_v5_test.cpp format_2121_test.cpp
  format_stream_writer_test.cpp
  file_reader.cpp LIBS tz::format tz::crypto REFERENCE REFERENCE_2121)
