/* c_api_test DIR: the C ABI (tensorizer.h) from C11, against the files of tests/api_test_files.hpp
 * in DIR (the tz_api_files fixture): open and list, load all / some / one, caller memory, verify
 * with a corrupted file, keys and passphrases, progress, the device path, error codes and messages.
 * Compiled as C11 with -Wpedantic -Werror: a C++ type or header in tensorizer.h fails the build. */
#ifdef __cplusplus
#error "c_api_test must be compiled as C"
#endif

#include <tensorizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #cond, \
              tz_last_error_message());                                                 \
      ++failures;                                                                       \
    }                                                                                   \
  } while (0)

static char dir[4096];

static const char* path(const char* name) {
  static char buf[4200];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

/* Value k of test tensor `name` (tests/api_test_files.hpp). */
static float expected(const char* name, size_t k) {
  if (strcmp(name, "a") == 0) return (float)k;
  if (strcmp(name, "b") == 0) return (float)(10 + k);
  return (float)k / 2;
}

static int values_match(const char* name, const void* data, uint64_t size_bytes) {
  const float* f = (const float*)data;
  for (size_t k = 0; k < size_bytes / sizeof(float); ++k)
    if (f[k] != expected(name, k)) return 0;
  return 1;
}

static int host_load_matches(const tz_host_tensors* h) {
  for (size_t i = 0; i < tz_host_tensors_count(h); ++i) {
    tz_tensor_info info;
    void* data = NULL;
    uint64_t size = 0;
    if (tz_host_tensors_info(h, i, &info) != TZ_OK || tz_host_tensors_data(h, i, &data, &size) != TZ_OK) return 0;
    if (size != info.size_bytes || !values_match(info.name, data, size)) return 0;
  }
  return 1;
}

static void test_listing(void) {
  tz_model* m = NULL;
  tz_tensor_info info;
  size_t i = 0;
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_tensor_count(m) == 3);
  CHECK(!tz_model_encrypted(m));
  CHECK(tz_model_find(m, "a", &i) == TZ_OK);
  CHECK(tz_model_tensor_info(m, i, &info) == TZ_OK);
  CHECK(strcmp(info.name, "a") == 0 && strcmp(info.dtype, "float32") == 0);
  CHECK(info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 3 && info.size_bytes == 24);
  CHECK(tz_model_tensor_info(m, 3, &info) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_model_find(m, "nope", &i) == TZ_ERR_NOT_FOUND);
  CHECK(strstr(tz_last_error_message(), "nope") != NULL);
  tz_model_free(m);
}

static void test_loads(void) {
  tz_model* m = NULL;
  tz_host_tensors* h = NULL;
  const char* some[] = {"layer.0.weight", "a"};
  const char* missing[] = {"a", "missing"};
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK);
  CHECK(tz_host_tensors_count(h) == 3 && host_load_matches(h));
  tz_host_tensors_free(h);
  CHECK(tz_model_load(m, some, 2, &h) == TZ_OK);
  CHECK(tz_host_tensors_count(h) == 2 && host_load_matches(h));
  tz_host_tensors_free(h);
  CHECK(tz_model_load_one(m, "b", &h) == TZ_OK);
  CHECK(tz_host_tensors_count(h) == 1 && host_load_matches(h));
  tz_host_tensors_free(h);
  h = NULL;
  CHECK(tz_model_load(m, missing, 2, &h) == TZ_ERR_NOT_FOUND && h == NULL);
  CHECK(strstr(tz_last_error_message(), "missing") != NULL);
  CHECK(tz_model_open(path("absent.tensors"), NULL, NULL) == TZ_ERR_INVALID_ARGUMENT);
  tz_model_free(m);
  m = NULL;
  CHECK(tz_model_open(path("absent.tensors"), NULL, &m) == TZ_ERR_NOT_FOUND && m == NULL);
}

static void test_load_into(void) {
  tz_model* m = NULL;
  float a[6], w[1000];
  const char* names[] = {"a", "layer.0.weight"};
  void* buffers[] = {a, w};
  uint64_t sizes[] = {sizeof a, sizeof w};
  uint64_t wrong[] = {sizeof a - 4, sizeof w};
  tz_timings t;
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load_into(m, names, buffers, sizes, 2, &t) == TZ_OK);
  CHECK(values_match("a", a, sizeof a) && values_match("layer.0.weight", w, sizeof w));
  CHECK(tz_model_load_into(m, names, buffers, wrong, 2, NULL) == TZ_ERR_INVALID_ARGUMENT);
  tz_model_free(m);
}

static void test_verify(void) {
  tz_model* m = NULL;
  tz_options* o = tz_options_new();
  tz_host_tensors* h = NULL;
  const char* sound[] = {"a", "layer.0.weight"};
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_verify(m, NULL, 0, NULL) == TZ_OK);
  tz_model_free(m);
  CHECK(tz_model_open(path("corrupt.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_verify(m, NULL, 0, NULL) == TZ_ERR_HASH_MISMATCH);
  CHECK(strstr(tz_last_error_message(), "tensor 'b'") != NULL);
  CHECK(tz_model_verify(m, sound, 2, NULL) == TZ_OK);
  tz_model_free(m);
  CHECK(tz_options_set_verify(o, 1) == TZ_OK);
  CHECK(tz_model_open(path("corrupt.tensors"), o, &m) == TZ_OK);
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_ERR_HASH_MISMATCH);
  tz_model_free(m);
  tz_options_free(o);
}

static void test_decryption(void) {
  uint8_t key[32];
  const char* pass = "correct horse battery staple";
  tz_options* o = tz_options_new();
  tz_model* m = NULL;
  tz_host_tensors* h = NULL;
  size_t i;
  for (i = 0; i < sizeof key; ++i) key[i] = (uint8_t)(i + 1);
  CHECK(tz_options_set_decryption_key(o, key, 31) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_decryption_key(o, key, sizeof key) == TZ_OK);
  memset(key, 0, sizeof key); /* the options hold their own copy */
  CHECK(tz_model_open(path("key.tensors"), o, &m) == TZ_OK);
  CHECK(tz_model_encrypted(m));
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK && host_load_matches(h));
  tz_host_tensors_free(h);
  tz_model_free(m);
  CHECK(tz_options_set_decryption_key(o, key, sizeof key) == TZ_OK); /* all zeros: the wrong key */
  CHECK(tz_model_open(path("key.tensors"), o, &m) == TZ_OK);
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_ERR_CRYPTO);
  tz_model_free(m);
  CHECK(tz_model_open(path("key.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_ERR_CRYPTO);
  tz_model_free(m);
  CHECK(tz_options_set_decryption_passphrase(o, pass, strlen(pass)) == TZ_OK);
  CHECK(tz_model_open(path("passphrase.tensors"), o, &m) == TZ_OK);
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK && host_load_matches(h));
  tz_host_tensors_free(h);
  tz_model_free(m);
  tz_options_free(o);
}

struct progress_seen {
  uint64_t calls, done, total;
};

static void on_progress(uint64_t done, uint64_t total, void* user) {
  struct progress_seen* s = (struct progress_seen*)user;
  ++s->calls;
  s->done = done;
  s->total = total;
}

static void test_progress_and_options(void) {
  struct progress_seen seen = {0, 0, 0};
  tz_options* o = tz_options_new();
  tz_model* m = NULL;
  tz_host_tensors* h = NULL;
  tz_timings t;
  CHECK(tz_options_set_progress(o, on_progress, &seen) == TZ_OK);
  CHECK(tz_options_set_threads(o, 2) == TZ_OK && tz_options_set_readers(o, 2) == TZ_OK);
  CHECK(tz_options_set_time_limit(o, "connect_timeout", 2.5) == TZ_OK);
  CHECK(tz_options_set_time_limit(o, "no_such_limit", 1) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_time_limit(o, "stall_timeout", 0) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_tls(o, NULL, 1) == TZ_OK && tz_options_set_connections(o, 8) == TZ_OK);
  CHECK(tz_options_set_connections(o, 1000) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_s3(o, "https://object.example.com", "us-east-1", NULL, NULL, NULL) == TZ_OK);
  CHECK(tz_options_set_cache(o, NULL, 0) == TZ_OK);
  CHECK(tz_model_open(path("plain.tensors"), o, &m) == TZ_OK);
  tz_options_free(o); /* the model keeps what it needs */
  CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK);
  CHECK(seen.calls > 0 && seen.done == seen.total && seen.total > 0);
  CHECK(tz_host_tensors_timings(h, &t) == TZ_OK && t.total_s > 0);
  tz_host_tensors_free(h);
  tz_model_free(m);
}

static void test_device(void) {
  tz_model* m = NULL;
  tz_device_tensors* d = NULL;
  tz_status s;
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  s = tz_model_load_to_device(m, 0, NULL, 0, &d);
  if (s == TZ_OK) {
    void* p = NULL;
    uint64_t size = 0;
    CHECK(tz_device_tensors_count(d) == 3 && tz_device_tensors_device(d) == 0);
    CHECK(tz_device_tensors_data(d, 0, &p, &size) == TZ_OK && p != NULL && size == 24);
    tz_device_tensors_free(d);
  } else {
    CHECK(s == TZ_ERR_NO_DEVICE);
    printf("device load: %s (%s)\n", tz_status_name(s), tz_last_error_message());
  }
  tz_model_free(m);
}

int main(int argc, char** argv) {
  if (argc != 2) return fprintf(stderr, "usage: c_api_test DIR\n"), 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  CHECK(strcmp(tz_version(), TENSORIZER_VERSION_STRING) == 0);
  CHECK(strcmp(tz_status_name(TZ_ERR_HASH_MISMATCH), "hash_mismatch") == 0);
  CHECK(tz_model_tensor_count(NULL) == 0);
  tz_model_free(NULL);
  tz_options_free(NULL);
  test_listing();
  test_loads();
  test_load_into();
  test_verify();
  test_decryption();
  test_progress_and_options();
  test_device();
  if (failures) return fprintf(stderr, "%d check(s) failed\n", failures), 1;
  printf("c_api_test: all checks passed\n");
  return 0;
}
