/* Question: what does a C program get from the C ABI loading a model onto a GPU, first load in a
 * fresh process and the loads after it (the process's device context reused)? Usage:
 * c_load_bench MODEL DEVICE [LOADS]; prints one JSON object: every load's GB/s (tensor bytes over
 * the wall time of tz_model_load_to_device), bytes, and the set-up before the first load, outside
 * the rates: the seconds tz_model_open took (open_s: the engine's workers and the index) and then
 * tz_prepare_device (prepare_s: the CUDA context, streams and pinned ring). Exits 77 without a
 * GPU, 1 on failure. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime in strict C11 */
#include <tensorizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char* what, tz_status s) {
  fprintf(stderr, "c_load_bench: %s: %s: %s\n", what, tz_status_name(s), tz_last_error_message());
  return s == TZ_ERR_NO_DEVICE ? 77 : 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: c_load_bench MODEL DEVICE [LOADS]\n");
    return 2;
  }
  const int device = atoi(argv[2]);
  const int loads = argc > 3 ? atoi(argv[3]) : 1;
  tz_model* model = NULL;
  const double t_open = now_s();
  tz_status s = tz_model_open(argv[1], NULL, &model);
  const double open_s = now_s() - t_open;
  if (s != TZ_OK) return fail("open", s);
  const double t_prepare = now_s();
  s = tz_prepare_device(device, 0);
  const double prepare_s = now_s() - t_prepare;
  if (s != TZ_OK) {
    tz_model_free(model);
    return fail("prepare", s);
  }
  printf("{\"open_s\":%.6f,\"prepare_s\":%.6f,\"runs_gbps\":[", open_s, prepare_s);
  uint64_t bytes = 0;
  for (int k = 0; k < loads; ++k) {
    tz_device_tensors* loaded = NULL;
    const double t0 = now_s();
    s = tz_model_load_to_device(model, device, NULL, 0, &loaded);
    const double seconds = now_s() - t0;
    if (s != TZ_OK) {
      tz_model_free(model);
      return fail("load", s);
    }
    bytes = 0;
    for (size_t i = 0; i < tz_device_tensors_count(loaded); ++i) {
      tz_tensor_info info;
      if (tz_device_tensors_info(loaded, i, &info) == TZ_OK) bytes += info.size_bytes;
    }
    printf("%s%.3f", k ? "," : "", (double)bytes / seconds / 1e9);
    tz_device_tensors_free(loaded);
  }
  printf("],\"bytes\":%llu}\n", (unsigned long long)bytes);
  tz_model_free(model);
  return 0;
}
