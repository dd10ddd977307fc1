// Printing a load's report: the same fields for host and device loads, as text or JSON.
#include "load_report.hpp"

#include "tz/format/tensor_path.hpp"

#include <cstdio>
#include <string>

namespace tz::cli {

namespace {

double rate_gbps(const load_report& r) {
  return r.timings.total_s > 0 ? static_cast<double>(r.data_bytes) / r.timings.total_s / 1e9 : 0;
}

// ',"runs_gb_per_s":[...]' for load --repeat, else nothing.
std::string runs_json(const load_report& r) {
  if (r.runs_gbps.empty()) return {};
  std::string out = ",\"runs_gb_per_s\":[";
  char buf[32];
  for (std::size_t i = 0; i < r.runs_gbps.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", r.runs_gbps[i]);
    out += buf;
  }
  return out + "]";
}

// ',"device_sha256":[{"name":...,"sha256":...},...]' (the shape of `hash --json`'s "tensors"), or nothing.
std::string device_sha256_json(const load_report& r) {
  if (r.device_sha256.empty()) return {};
  std::string out = ",\"device_sha256\":[";
  for (std::size_t i = 0; i < r.device_sha256.size(); ++i) {
    const auto& t = r.device_sha256[i];
    out += std::string(i ? "," : "") + "{\"name\":" + t.json_name + ",\"sha256\":\"" + t.hex + "\"}";
  }
  return out + "]";
}

void print_json(const load_report& r) {
  const auto& t = r.timings;
  std::printf("{\"file\":%s,\"format\":\"%s\",\"device\":\"%s\",\"tensors\":%zu,\"bytes\":%llu,\"seconds\":%.6f,"
              "\"gb_per_s\":%.3f,\"rate\":\"bytes (stored tensor data) / seconds (load call to every tensor ready)\","
              "\"verify\":%s,\"direct\":%s,\"threads\":%u,\"readers\":%u,\"ring_bytes\":%llu,\"pinned_max_bytes\":%llu,"
              "\"cache\":%s,\"setup_s\":%.6f,\"context_s\":%.6f,\"stages\":{\"open_s\":%.6f,\"prepare_s\":%.6f,\"transfer_s\":%.6f,\"total_s\":%.6f,\"read_s\":%.6f,"
              "\"verify_s\":%.6f,\"decrypt_s\":%.6f,\"upload_s\":%.6f,\"wait_s\":%.6f,\"ring_s\":%.6f,\"alloc_s\":%.6f}%s%s}\n",
              format::json_name(format::plain_path(r.file)).c_str(), r.safetensors ? "safetensors" : "tensorizer",
              r.destination.c_str(), r.tensors, static_cast<unsigned long long>(r.data_bytes), t.total_s, rate_gbps(r),
              r.verify ? "true" : "false", r.direct ? "true" : "false", r.threads, r.readers,
              static_cast<unsigned long long>(r.ring_bytes), static_cast<unsigned long long>(r.pinned_max_bytes),
              r.cache.empty() ? "null" : format::json_name(format::plain_path(r.cache)).c_str(), r.setup_s, r.context_s, t.open_s, t.prepare_s, t.transfer_s, t.total_s, t.read_s, t.verify_s, t.decrypt_s, t.upload_s, t.wait_s, t.ring_s, t.alloc_s,
              runs_json(r).c_str(), device_sha256_json(r).c_str());
}

}  // namespace

void print_load_report(const load_report& r, bool json) {
  if (json) return print_json(r);
  const auto& t = r.timings;
  std::printf("%s (%s) -> %s: %zu tensors, %llu data bytes in %.3f s = %.2f GB/s\n", r.file.c_str(),
              r.safetensors ? "safetensors" : "tensorizer", r.destination.c_str(), r.tensors,
              static_cast<unsigned long long>(r.data_bytes), t.total_s, rate_gbps(r));
  std::printf("  open %.3f s (not in the rate); prepare %.3f s + transfer %.3f s = %.3f s\n", t.open_s, t.prepare_s,
              t.transfer_s, t.total_s);
  std::printf("  worker-seconds: read %.3f, verify %.3f, decrypt %.3f", t.read_s, t.verify_s, t.decrypt_s);
  if (r.ring_bytes > 0) std::printf(", upload %.3f, wait %.3f", t.upload_s, t.wait_s);
  if (r.ring_bytes > 0) std::printf("\n  device setup: pinned ring %.3f s (in prepare), device memory %.3f s (beside the first reads)", t.ring_s, t.alloc_s);
  std::printf("\n  before the first load: %.3f s (the workers, the open", r.setup_s);
  if (r.ring_bytes > 0) std::printf(", the GPU's context: %.3f s, made beside the open", r.context_s);
  std::printf(")");
  std::printf("\n  %u worker threads, %u readers, %s reads\n", r.threads, r.readers, r.direct ? "O_DIRECT" : "buffered");
  if (!r.cache.empty()) std::printf("  cache: %s\n", r.cache.c_str());
  if (!r.runs_gbps.empty()) {
    std::printf("  %zu runs in this process (the median one reported), GB/s:", r.runs_gbps.size());
    for (double g : r.runs_gbps) std::printf(" %.2f", g);
    std::printf("\n");
  }
  if (r.ring_bytes > 0) {
    std::printf("  pinned staging: at most %.1f MiB held of a %.1f MiB ring\n",
                static_cast<double>(r.pinned_max_bytes) / (1 << 20), static_cast<double>(r.ring_bytes) / (1 << 20));
  }
  for (const auto& t : r.device_sha256) std::printf("  on the device: %s  %s\n", t.hex.c_str(), t.display_name.c_str());
}

}  // namespace tz::cli
