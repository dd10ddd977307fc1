/* c_api_test DIR [device]: the C ABI (tensorizer.h) from C11, against the files of
 * tests/api_test_files.hpp in DIR (the tz_api_files fixture). By default: open and list, load all /
 * some / one, caller memory, verify with a corrupted file, keys and passphrases, progress, error codes
 * and messages, and what a device load refuses (an unknown tensor, a device that is not there).
 * `device`: loads onto cuda:0 (whole, filtered, encrypted and verified, a sharded checkpoint) read
 * back through tests/device_access.h and compared value by value, and a rank's share through
 * tz_model_load_parts_to_device; exit 77 (skipped) without a GPU.
 * Compiled as C11 with -Wpedantic -Werror: a C++ type or header in tensorizer.h fails the build. */
#ifdef __cplusplus
#error "c_api_test must be compiled as C"
#endif
#define _POSIX_C_SOURCE 200809L /* mkdtemp in strict C11 */

#include <tensorizer.h>

#include "device_access.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_check.h"

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

/* 1 when every tensor of device load `d` holds its expected values, read back from the device, and
 * its names are exactly those of `names` (count of them; NULL: all three) in file order. */
static int device_load_matches(const tz_device_tensors* d, const char* const* names, size_t count) {
  static const char* const file_order[] = {"a", "b", "layer.0.weight"};
  size_t i, k = 0, want = 0;
  for (i = 0; i < 3; ++i) {
    size_t n;
    int selected = names == NULL;
    for (n = 0; n < count && !selected; ++n) selected = strcmp(names[n], file_order[i]) == 0;
    if (!selected) continue;
    ++want;
    {
      tz_tensor_info info;
      void* p = NULL;
      uint64_t size = 0;
      char* host;
      int ok;
      if (tz_device_tensors_info(d, k, &info) != TZ_OK || strcmp(info.name, file_order[i]) != 0) return 0;
      if (tz_device_tensors_data(d, k, &p, &size) != TZ_OK || p == NULL || size != info.size_bytes) return 0;
      if ((uintptr_t)p % 256 != 0) return 0;
      host = (char*)malloc(size);
      ok = host != NULL && tz_test_device_read(host, p, size) == 0 && values_match(info.name, host, size);
      free(host);
      if (!ok) return 0;
    }
    ++k;
  }
  return tz_device_tensors_count(d) == want;
}

/* Host mode: what a device load refuses before any byte moves, with the reason. */
static void test_device_errors(void) {
  tz_model* m = NULL;
  tz_device_tensors* d = NULL;
  const char* missing[] = {"a", "missing"};
  char cuda_missing[32];
  const int absent = tz_test_device_count(); /* one past the last device: cuda:0 without a GPU */
  snprintf(cuda_missing, sizeof cuda_missing, "cuda:%d", absent);
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load_to_device(m, 0, missing, 2, &d) == TZ_ERR_NOT_FOUND && d == NULL);
  CHECK(strstr(tz_last_error_message(), "no tensor named 'missing'") != NULL);
  CHECK(tz_model_load_to_device(m, absent, NULL, 0, &d) == TZ_ERR_NO_DEVICE && d == NULL);
  CHECK(strstr(tz_last_error_message(), cuda_missing) != NULL);
  tz_model_free(m);
}

/* Device mode: loads onto cuda:0 land, byte for byte, where the handles say. */
/* Tensors as they land (tz_options_set_on_tensor): every tensor handed over once, in file order,
 * with its final values (read back from the device in device mode), for a verified encrypted load. */
struct ready_log {
  int count, bad, out_of_order;
  size_t next_position;
};

static void on_tensor(const tz_ready_tensor* t, void* user) {
  struct ready_log* log = (struct ready_log*)user;
  void* copy = NULL;
  const void* bytes = t->host;
  if (t->position != log->next_position++) log->out_of_order++;
  if (t->device_data) {
    copy = malloc(t->size_bytes ? t->size_bytes : 1);
    if (!copy || tz_test_device_read(copy, t->device_data, t->size_bytes) != 0) log->bad++;
    bytes = copy;
  }
  if (!bytes || !values_match(t->name, bytes, t->size_bytes)) log->bad++;
  free(copy);
  log->count++;
}

static void test_on_tensor(int device) {
  tz_model* m = NULL;
  tz_options* o = tz_options_new();
  uint8_t key[32];
  struct ready_log log = {0, 0, 0, 0};
  size_t i;
  for (i = 0; i < sizeof key; ++i) key[i] = (uint8_t)(i + 1);
  CHECK(tz_options_set_decryption_key(o, key, sizeof key) == TZ_OK && tz_options_set_verify(o, 1) == TZ_OK);
  CHECK(tz_options_set_on_tensor(NULL, on_tensor, 1, &log) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_on_tensor(o, on_tensor, 1, &log) == TZ_OK);
  CHECK(tz_model_open(path("key.tensors"), o, &m) == TZ_OK);
  if (device < 0) {
    tz_host_tensors* h = NULL;
    CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK && host_load_matches(h));
    tz_host_tensors_free(h);
  } else {
    tz_device_tensors* d = NULL;
    CHECK(tz_model_load_to_device(m, device, NULL, 0, &d) == TZ_OK);
    tz_device_tensors_free(d);
  }
  if (log.count != 3 || log.bad || log.out_of_order) fprintf(stderr, "on_tensor: %d handed over, %d bad, %d out of order\n", log.count, log.bad, log.out_of_order);
  CHECK(log.count == 3 && log.bad == 0 && log.out_of_order == 0);
  tz_model_free(m);
  tz_options_free(o);
}

/* Opens `model` with `o` and loads every tensor: the load's status, its tensors checked when it
 * succeeded, its error naming `named` (when given) when it failed. */
static tz_status load_signed(const tz_options* o, const char* model, const char* named) {
  tz_model* m = NULL;
  tz_host_tensors* h = NULL;
  tz_status status;
  CHECK(tz_model_open(path(model), o, &m) == TZ_OK);
  status = tz_model_load(m, NULL, 0, &h);
  if (status == TZ_OK) CHECK(host_load_matches(h));
  else CHECK(h == NULL && (named == NULL || strstr(tz_last_error_message(), named) != NULL));
  tz_host_tensors_free(h);
  tz_model_free(m);
  return status;
}

/* A signed model loads with its signature checked; a changed config.json beside the weights fails the
 * load naming it; the wrong key fails it naming the key file; a missing signature names its path. */
static void test_signature(void) {
  tz_options* o = tz_options_new();
  char sig[4200], pub[4200], wrong[4200];
  snprintf(sig, sizeof sig, "%s", path("signed.sig"));
  snprintf(pub, sizeof pub, "%s", path("signed.pub"));
  snprintf(wrong, sizeof wrong, "%s", path("key.tensors")); /* not a PEM key */
  CHECK(tz_options_set_signature(NULL, sig, pub, NULL, NULL) == TZ_ERR_INVALID_ARGUMENT);
  CHECK(tz_options_set_signature(o, sig, pub, NULL, NULL) == TZ_OK);
  CHECK(load_signed(o, "signed/model.tensors", NULL) == TZ_OK);
  CHECK(load_signed(o, "signed_changed/model.tensors", "config.json") == TZ_ERR_HASH_MISMATCH);
  CHECK(tz_options_set_signature(o, sig, wrong, NULL, NULL) == TZ_OK);
  CHECK(load_signed(o, "signed/model.tensors", "key.tensors") != TZ_OK);
  CHECK(tz_options_set_signature(o, path("missing.sig"), pub, NULL, NULL) == TZ_OK);
  CHECK(load_signed(o, "signed/model.tensors", "missing.sig") == TZ_ERR_NOT_FOUND);
  tz_options_free(o);
}

static void test_device_loads(void) {
  tz_model* m = NULL;
  tz_device_tensors* d = NULL;
  tz_options* o = tz_options_new();
  uint8_t key[32];
  const char* some[] = {"layer.0.weight", "a"};
  size_t i;
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load_to_device(m, 0, NULL, 0, &d) == TZ_OK);
  CHECK(tz_device_tensors_device(d) == 0 && device_load_matches(d, NULL, 0));
  tz_device_tensors_free(d);
  d = NULL;
  CHECK(tz_model_load_to_device(m, 0, some, 2, &d) == TZ_OK);
  CHECK(device_load_matches(d, some, 2));
  tz_device_tensors_free(d);
  d = NULL;
  tz_model_free(m);
  for (i = 0; i < sizeof key; ++i) key[i] = (uint8_t)(i + 1);
  CHECK(tz_options_set_decryption_key(o, key, sizeof key) == TZ_OK && tz_options_set_verify(o, 1) == TZ_OK);
  CHECK(tz_model_open(path("key.tensors"), o, &m) == TZ_OK);
  CHECK(tz_model_load_to_device(m, 0, NULL, 0, &d) == TZ_OK && device_load_matches(d, NULL, 0));
  tz_device_tensors_free(d);
  d = NULL;
  tz_model_free(m);
  CHECK(tz_model_open(path("sharded"), NULL, &m) == TZ_OK);
  CHECK(tz_model_load_to_device(m, 0, NULL, 0, &d) == TZ_OK && device_load_matches(d, NULL, 0));
  tz_device_tensors_free(d);
  tz_model_free(m);
  tz_options_free(o);
}

/* Device mode: rank 1's share of a partition in 2, loaded with tz_model_load_parts_to_device into
 * device memory this program owns, holds the same bytes as tz_model_load_parts gives on the host. */
static void test_device_parts(void) {
  tz_model* m = NULL;
  tz_tensor_part parts[16];
  uint64_t at[16];
  void* host_bufs[16];
  void* device_bufs[16];
  size_t n = 0, i;
  uint64_t begin = 0, end = 0, total = 0, read = 0, pinned = 0;
  unsigned char *flat = NULL, *back = NULL, *dev = NULL;
  CHECK(tz_model_open(path("plain.tensors"), NULL, &m) == TZ_OK);
  CHECK(tz_model_plan_partition(m, 2, 1, 0, parts, at, 16, &n, &begin, &end, &total) == TZ_OK && n > 0);
  flat = calloc(total, 1);
  back = calloc(total, 1);
  dev = tz_test_device_alloc(total);
  CHECK(flat != NULL && back != NULL && dev != NULL);
  if (flat && back && dev) {
    for (i = 0; i < n; ++i) host_bufs[i] = flat + at[i], device_bufs[i] = dev + at[i];
    CHECK(tz_model_load_parts(m, parts, host_bufs, n, NULL, NULL) == TZ_OK);
    CHECK(tz_model_load_parts_to_device(m, 0, parts, device_bufs, n, &read, &pinned, NULL) == TZ_OK);
    CHECK(read >= end - begin && pinned > 0);
    CHECK(tz_test_device_read(back + begin, dev + begin, end - begin) == 0);
    CHECK(memcmp(back + begin, flat + begin, end - begin) == 0);
  }
  tz_test_device_free(dev);
  free(flat);
  free(back);
  tz_model_free(m);
}

/* 1 when file `p` holds `needle`. */
static int file_contains(const char* p, const char* needle) {
  static char text[1 << 20];
  size_t n;
  FILE* f = fopen(p, "rb");
  if (f == NULL) return 0;
  n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  return strstr(text, needle) != NULL;
}

/* tz_options_set_trace: a load's timeline as Chrome trace JSON (device mode: with the copies and
 * the device allocation); host mode: a path that cannot be written fails the load, named. */
static void test_trace(int device) {
  tz_model* m = NULL;
  tz_options* o = tz_options_new();
  char own[4200], trace[4300];
  /* A directory of its own: DIR is the fixture's, shared by tests that run at the same time. */
  const char* tmp = getenv("TMPDIR");
  snprintf(own, sizeof own, "%s/tz-c-api-trace-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(own) == NULL) {
    CHECK(!"mkdtemp");
    tz_options_free(o);
    return;
  }
  snprintf(trace, sizeof trace, "%s/trace.json", own);
  CHECK(tz_options_set_trace(o, trace) == TZ_OK);
  CHECK(tz_model_open(path("plain.tensors"), o, &m) == TZ_OK);
  if (device) {
    tz_device_tensors* d = NULL;
    CHECK(tz_model_load_to_device(m, 0, NULL, 0, &d) == TZ_OK && device_load_matches(d, NULL, 0));
    tz_device_tensors_free(d);
    CHECK(file_contains(trace, "\"traceEvents\"") && file_contains(trace, "\"copy to the device\"") &&
          file_contains(trace, "\"allocate device memory\""));
  } else {
    tz_host_tensors* h = NULL;
    CHECK(tz_model_load(m, NULL, 0, &h) == TZ_OK && host_load_matches(h));
    tz_host_tensors_free(h);
    CHECK(file_contains(trace, "\"traceEvents\"") && file_contains(trace, "\"read\""));
    tz_model_free(m);
    m = NULL;
    snprintf(trace, sizeof trace, "%s/no-such-dir/trace.json", own);
    CHECK(tz_options_set_trace(o, trace) == TZ_OK && tz_model_open(path("plain.tensors"), o, &m) == TZ_OK);
    h = NULL;
    CHECK(tz_model_load(m, NULL, 0, &h) == TZ_ERR_NOT_FOUND && h == NULL && strstr(tz_last_error_message(), "no-such-dir") != NULL);
  }
  tz_model_free(m);
  tz_options_free(o);
  snprintf(trace, sizeof trace, "%s/trace.json", own);
  remove(trace);
  rmdir(own);
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "device") != 0))
    return fprintf(stderr, "usage: c_api_test DIR [device]\n"), 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  if (argc == 3) {
    /* Decided before any check: without a device this mode has nothing to run. */
    if (tz_test_device_count() == 0) return printf("c_api_test device: no CUDA device: skipped (exit 77)\n"), 77;
    test_device_loads();
    test_device_parts();
    test_on_tensor(0);
    test_trace(1);
    if (failures) return fprintf(stderr, "%d check(s) failed\n", failures), 1;
    printf("c_api_test device: all checks passed\n");
    return 0;
  }
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
  test_device_errors();
  test_on_tensor(-1);
  test_trace(0);
  test_signature();
  if (failures) return fprintf(stderr, "%d check(s) failed\n", failures), 1;
  printf("c_api_test: all checks passed\n");
  return 0;
}
