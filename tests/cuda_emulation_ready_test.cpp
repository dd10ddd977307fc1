// Tensors as they land from device loads (load_common_options::on_tensor_ready), on the host emulation of
// the CUDA runtime: each tensor is handed over once, in file order, as soon as its copy completed and
// with its final bytes on the device (plain, verified, encrypted), while the second half of the model
// is still to be read; a copy failing mid-load ends the handovers, and what was handed over stays intact.
#include "emulation_case.hpp"
#include "gated_source.hpp"
#include "tz/format/encryption.hpp"

#include <doctest/doctest.h>

#include <mutex>
#include <vector>

using namespace emu_test;  // the emulated suites' shared helpers (emulation_case.hpp)

namespace {

// Per handover: its position, the tensor's device bytes downloaded in the callback, the owner.
struct device_seen {
  std::size_t position;
  std::vector<std::byte> bytes;
  std::shared_ptr<const void> owner;
  void* address;
  std::size_t reads_started;
};

struct device_recorder {
  std::mutex mutex;
  std::vector<device_seen> seen;
  bool download_failed = false;
  tz_test::gated_source* source = nullptr;  // opened at the first handover
  // Download in the callback. Not where a copy is made to fail: CUDA's error is sticky for the
  // whole context, so a download racing it fails too (the tensor handed over is still sound).
  bool download = true;

  // Downloads the tensor through its owner (the load's device buffer) at the moment it is handed over.
  void attach(tz::load_common_options& o) {
    o.on_tensor_ready = [this](const tz::tensor_ready& r) {
      std::lock_guard lock(mutex);
      auto buffer = std::static_pointer_cast<const tz::cuda::device_buffer>(r.owner);
      std::vector<std::byte> got(download ? r.entry->deserialized_bytes : 0);
      const auto offset = static_cast<std::uint64_t>(static_cast<const std::byte*>(r.device_address) -
                                                     static_cast<const std::byte*>(buffer->data()));
      if (download && !tz::cuda::download(*buffer, offset, got)) download_failed = true;
      seen.push_back({r.position, std::move(got), r.owner, r.device_address, source ? source->started.load() : 0});
      if (source) source->open();
    };
  }
};

}  // namespace

TEST_CASE("a device load hands each tensor over in file order once its copy completed, plain, verified and encrypted") {
  emulation_case scope;
  const std::size_t base = 900 * kib;
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  const auto plain = write_floats(16, base);
  const auto sealed = write_floats(16, base, &enc);
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    for (int mode = 0; mode < 3; ++mode) {  // plain, verified, encrypted
      CAPTURE(mode);
      const auto& file = mode == 2 ? sealed : plain;
      // Data reads in the second half wait for the first handover (10 s at most): a load that handed
      // its tensors over only at its end would hold them that long.
      auto src = std::make_shared<tz_test::gated_source>(file, file.size() / 2);
      device_recorder rec;
      rec.source = src.get();
      tz::device_load_options o;
      o.slot_count = 4;  // 4 MiB of ring for a 14 MiB model
      o.slot_bytes = 1 * mib;
      o.verify = mode == 1;
      if (mode == 2) o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
      rec.attach(o);
      auto t = load(sched, *ctx, src, o);
      REQUIRE(ok(t));
      CHECK_FALSE(rec.download_failed);
      REQUIRE(rec.seen.size() == 16);
      for (std::size_t i = 0; i < 16; ++i) {
        CAPTURE(i);
        CHECK(rec.seen[i].position == i);
        CHECK(rec.seen[i].address == t->data(i));
        CHECK(tz_test::floats_match(rec.seen[i].bytes, i, base));
      }
      // The first tensor was handed over while the second half of the model was still to be read.
      CHECK_FALSE(src->held_too_long.load());
      CHECK(rec.seen.front().reads_started < src->started.load());
      CHECK(all_floats_match(*t, base));
    }
  }
  check_nothing_alive();
}

TEST_CASE("a device copy failing mid-load ends the handovers; the tensors handed over stay as they were") {
  emulation_case scope;
  const std::size_t base = 700 * kib;
  const auto plain = write_floats(12, base);
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    auto src = std::make_shared<tz::memory_source>(plain, "mem");
    device_recorder rec;
    tz::device_load_options o;
    o.slot_count = 4;
    o.slot_bytes = 1 * mib;
    o.readers = 1;  // one range at a time: the copies complete in file order
    rec.download = false;
    rec.attach(o);
    emu::fail_copy(6);
    auto t = load(sched, *ctx, src, o);
    REQUIRE_FALSE(t.has_value());
    CHECK(t.error().code == tz::errc::cuda);
    emu::fail_copy(0);
    emu::clear_sticky_error();
    // Usually the tensors before the failed copy; possibly none: CUDA's error is sticky, so copies
    // enqueued before it but not yet seen complete can report it too.
    CHECK(rec.seen.size() < 12);
    for (std::size_t i = 0; i < rec.seen.size(); ++i) {
      CAPTURE(i);
      CHECK(rec.seen[i].position == i);
      // The failed load is gone; the owner kept its device memory, holding the tensor's final bytes.
      auto buffer = std::static_pointer_cast<const tz::cuda::device_buffer>(rec.seen[i].owner);
      std::vector<std::byte> got(4 * (base / 4 + i * 3));
      const auto offset = static_cast<std::uint64_t>(static_cast<std::byte*>(rec.seen[i].address) -
                                                     static_cast<const std::byte*>(buffer->data()));
      REQUIRE(ok(tz::cuda::download(*buffer, offset, got)));
      CHECK(tz_test::floats_match(got, i, base));
    }
    rec.seen.clear();  // the owners go: the device memory with them
  }
  check_nothing_alive();
}

TEST_CASE("a verified device load hands over nothing from a corrupt tensor on") {
  emulation_case scope;
  const std::size_t base = 300 * kib;
  auto file = write_floats(10, base);
  {
    tz::scheduler sched(2);
    auto clean = tz::loader::open(sched, std::make_shared<tz::memory_source>(file)).value();
    file[clean.index().tensors[5].data_offset + 64] ^= std::byte{4};
    auto ctx = tz::device_context::create(0, 3).value();
    device_recorder rec;
    tz::device_load_options o;
    o.verify = true;  // checked on the host before the copy: the device kernels would report at the end
    o.slot_count = 4;
    o.slot_bytes = 1 * mib;
    rec.attach(o);
    auto t = load(sched, *ctx, std::make_shared<tz::memory_source>(file, "mem-bad"), o);
    REQUIRE_FALSE(t.has_value());
    CHECK(t.error().code == tz::errc::hash_mismatch);
    CHECK(t.error().message.find("t5") != std::string::npos);
    CHECK(rec.seen.size() <= 5);
    for (std::size_t i = 0; i < rec.seen.size(); ++i) CHECK(tz_test::floats_match(rec.seen[i].bytes, i, base));
    rec.seen.clear();
  }
  check_nothing_alive();
}
