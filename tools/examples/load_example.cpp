// docs/embedding.md's example of the engine's own API, compiled with the build so it cannot rot: open a .tensors (or
// safetensors) file, list its tensors, load a filtered subset into host memory, read one tensor.
#include "tz/backends/file_source.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: load_example FILE\n");
    return 2;
  }
  tz::scheduler sched;  // one worker thread per core, each with its own io_uring
  auto source = tz::file_source::open(argv[1]);
  if (!source) return std::fprintf(stderr, "%s\n", source.error().message.c_str()), 1;
  auto file = tz::loader::open(sched, *source);  // reads and validates the index
  if (!file) return std::fprintf(stderr, "%s\n", file.error().message.c_str()), 1;

  // Every tensor whose name ends in "weight", verified against its stored hashes.
  auto which = file->select([](const tz::format::tensor_entry& e) {
    const auto name = tz::format::display_name(e.path);
    return name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  });
  tz::load_options options;
  options.verify = true;
  auto loaded = file->load(sched, which, options);
  if (!loaded) return std::fprintf(stderr, "%s\n", loaded.error().message.c_str()), 1;

  for (std::size_t i = 0; i < loaded->size(); ++i)
    std::printf("%-48s %-9s %zu bytes\n", tz::format::display_name(loaded->entry(i).path).c_str(),
                tz::format::dtype_display(loaded->entry(i).dtype).c_str(), loaded->data(i).size());
  std::printf("%llu bytes in %.3f s\n", static_cast<unsigned long long>(loaded->bytes()), loaded->timings().total_s);
  return 0;
}
