# base/ tests: unique_fd, the pread/pwrite loops, os_error, mapped_file, the coroutine TRY forms.
tz_add_doctest(base_test SOURCES base_test.cpp LIBS tz::base)
