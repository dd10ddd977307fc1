// tensorizer synth: writes a deterministic transformer-shaped sample model of a given size.
#include "cli.hpp"
#include "remote_args.hpp"
#include "tz/base/clock.hpp"
#include "tz/format/writer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

using namespace tz;

namespace {

constexpr const char* synth_help =
    "usage: tensorizer synth OUT [--size-mib N] [--seed S] [remote options]\n"
    "  Writes a deterministic transformer-shaped sample model of about N MiB (default 1024):\n"
    "  a float16 embedding first, bfloat16 projection matrices, float32 norms, a bfloat16 lm_head\n"
    "  last (as untied LLaMA checkpoints); same N and S, same bytes.\n"
    "  OUT may be s3://bucket/key or redis://host:port/prefix (written locally, then uploaded).\n";

// splitmix64: a fast deterministic byte generator; float exponents are kept below inf/NaN.
void fill(std::span<std::byte> out, std::uint64_t seed, std::size_t itemsize) {
  std::uint64_t s = seed;
  const std::uint64_t mask = itemsize == 2 ? 0xBFFFBFFFBFFFBFFFull : itemsize == 4 ? 0xBFFFFFFFBFFFFFFFull : ~0ull;
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = (z ^ (z >> 31)) & mask;
    std::memcpy(out.data() + i, &z, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 131 + seed);
}

struct synth_tensor {
  std::string name;
  const char* torch;
  std::vector<std::uint64_t> shape;
};

std::vector<synth_tensor> synth_plan(std::uint64_t size_bytes) {
  const std::uint64_t hidden = size_bytes >= (256ull << 20) ? 2048 : 256;
  const std::uint64_t mlp = hidden * 11 / 4, vocab = hidden * 8;
  std::vector<synth_tensor> plan{{"model.embed_tokens.weight", "torch.float16", {vocab, hidden}}};
  // As many layers as bring the model nearest N (at least one).
  const std::uint64_t fixed = 2 * vocab * hidden * 2 + hidden * 4;  // embedding, lm_head, final norm
  const std::uint64_t layer_bytes = 4 * hidden * hidden * 2 + 3 * mlp * hidden * 2 + 2 * hidden * 4;
  const std::uint64_t room = size_bytes > fixed ? size_bytes - fixed : 0;
  const std::uint64_t layers = std::max<std::uint64_t>(1, (room + layer_bytes / 2) / layer_bytes);
  for (std::uint64_t layer = 0; layer < layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj"})
      plan.push_back({p + "self_attn." + m + ".weight", "torch.bfloat16", {hidden, hidden}});
    plan.push_back({p + "mlp.gate_proj.weight", "torch.bfloat16", {mlp, hidden}});
    plan.push_back({p + "mlp.up_proj.weight", "torch.bfloat16", {mlp, hidden}});
    plan.push_back({p + "mlp.down_proj.weight", "torch.bfloat16", {hidden, mlp}});
    plan.push_back({p + "input_layernorm.weight", "torch.float32", {hidden}});
    plan.push_back({p + "post_attention_layernorm.weight", "torch.float32", {hidden}});
  }
  plan.push_back({"model.norm.weight", "torch.float32", {hidden}});
  // Last, as in the untied LLaMA checkpoints: one of the largest tensors at the end of the file,
  // which a verified load must not leave to hash alone after the rest (interleave_split_tensors).
  plan.push_back({"lm_head.weight", "torch.bfloat16", {vocab, hidden}});
  return plan;
}

}  // namespace

int cmd_synth(int argc, char** argv) {
  const std::string help = std::string(synth_help) + cli::remote_help;
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued({"--size-mib", "--seed"}), cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("synth", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.size() != 1) return cli::usage_error("synth", "expected OUT", help.c_str());
  auto remote = cli::remote_options_from(*a);
  if (!remote) return cli::fail("synth", remote.error());
  auto target = tz::output_target::create(a->positional[0], *remote);
  if (!target) return cli::fail("synth", target.error());
  auto size_mib = cli::to_uint("--size-mib", a->get("--size-mib").value_or("1024"));
  auto seed = cli::to_uint("--seed", a->get("--seed").value_or("1"));
  if (!size_mib) return cli::fail("synth", size_mib.error());
  if (!seed) return cli::fail("synth", seed.error());
  auto writer = format::tensor_writer::create(target->path());
  if (!writer) return cli::fail("synth", writer.error());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::byte> data;
  std::uint64_t total = 0, n = 0;
  for (const auto& t : synth_plan(*size_mib << 20)) {
    auto dtype = format::dtype_from_torch(t.torch);
    std::uint64_t count = 1;
    for (auto d : t.shape) count *= d;
    data.resize(count * dtype->itemsize);
    fill(data, *seed * 1000003 + n++, dtype->itemsize);
    auto w = writer->write({format::plain_path(t.name), format::tensor_type::param, 0, *dtype, t.shape, data, false});
    if (!w) return cli::fail("synth", w.error());
    total += data.size();
  }
  if (auto c = writer->close(); !c) return cli::fail("synth", c.error());
  if (target->path() != a->positional[0]) {
    tz::scheduler sched;
    if (auto p = target->publish(sched); !p) return cli::fail("synth", p.error());
  }
  const double s = seconds_since(start);
  std::printf("wrote %s: %llu tensors, %.1f MiB of data in %.2f s\n", a->positional[0].c_str(),
              static_cast<unsigned long long>(n), total / 1048576.0, s);
  return 0;
}
