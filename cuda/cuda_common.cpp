// Parts of the CUDA stage shared by the runtime and null builds: parsing and move-only plumbing.
#include "tz/cuda/cuda.hpp"

#include <charconv>
#include <limits>
#include <utility>

namespace tz::cuda {

bool available() {
  auto count = device_count();
  return count && *count > 0;
}

result<int> parse_device(std::string_view spec) {
  constexpr std::string_view prefix = "cuda";
  if (spec == prefix) return 0;
  auto bad = [&] {
    return make_error(errc::invalid_argument,
                      "device '" + std::string(spec) + "' is not of the form 'cuda' or 'cuda:N' (N >= 0)");
  };
  if (!spec.starts_with("cuda:")) return bad();
  std::string_view digits = spec.substr(prefix.size() + 1);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  // from_chars accepts a leading '-', which a device index never has.
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || index < 0) return bad();
  return index;
}

pinned_buffer::pinned_buffer(pinned_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      registered_(std::exchange(other.registered_, false)) {}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    registered_ = std::exchange(other.registered_, false);
  }
  return *this;
}

pinned_buffer::~pinned_buffer() { release(); }

device_buffer::device_buffer(device_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      device_(std::exchange(other.device_, -1)),
      owned_(std::exchange(other.owned_, true)) {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    device_ = std::exchange(other.device_, -1);
    owned_ = std::exchange(other.owned_, true);
  }
  return *this;
}

device_buffer::~device_buffer() { release(); }

upload_ticket::upload_ticket(upload_ticket&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      stream_(std::exchange(other.stream_, -1)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      offset_bytes_(std::exchange(other.offset_bytes_, 0)) {}

upload_ticket& upload_ticket::operator=(upload_ticket&& other) noexcept {
  if (this != &other) {
    release();
    event_ = std::exchange(other.event_, nullptr);
    device_ = std::exchange(other.device_, -1);
    stream_ = std::exchange(other.stream_, -1);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    offset_bytes_ = std::exchange(other.offset_bytes_, 0);
  }
  return *this;
}

upload_ticket::~upload_ticket() { release(); }

}  // namespace tz::cuda
