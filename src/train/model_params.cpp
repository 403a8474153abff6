// Parameter table, flat storage, deterministic init and digests of the model's weights.
#include "train/model_params.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "cpattn/digest.h"
#include "cpattn/error.h"
#include "train/random.h"

namespace cpattn::train {

namespace {
constexpr int64_t kPerLayer = 6;  // attn_norm, wqkv, wo, mlp_norm, w1, w2
constexpr double kInitStd = 0.02;
}  // namespace

Tensor allocate_floats(int64_t numel, MemoryCounter* counter, const std::string& what) {
  try {
    return Tensor({numel}, counter);
  } catch (const std::bad_alloc&) {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.1f",
                  static_cast<double>(numel) * sizeof(float) / (1024.0 * 1024.0));
    throw AllocationError(
        detail::str_cat("allocating ", what, ": ", numel, " floats (", mib, " MiB)"));
  }
}

std::vector<ParamInfo> param_table(const ModelConfig& c) {
  validate_config(c);
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers));
  std::vector<ParamInfo> t;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, double init_std) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool matrix = shape.size() == 2;
    t.push_back({std::move(name), std::move(shape), offset, n, matrix, init_std});
    offset += n;
  };
  add("embed", {c.vocab, c.d_model}, kInitStd);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", {c.d_model}, 0.0);
    add(p + "attn.wqkv", {c.qkv_dim(), c.d_model}, kInitStd);
    add(p + "attn.wo", {c.d_model, c.q_dim()}, out_std);
    add(p + "mlp_norm", {c.d_model}, 0.0);
    add(p + "mlp.w1", {c.hidden(), c.d_model}, kInitStd);
    add(p + "mlp.w2", {c.d_model, c.hidden()}, out_std);
  }
  add("final_norm", {c.d_model}, 0.0);
  add("lm_head", {c.vocab, c.d_model}, kInitStd);
  return t;
}

ParamSet::ParamSet(const ModelConfig& config, MemoryCounter* counter)
    : config_(config), infos_(param_table(config)) {
  const ParamInfo& last = infos_.back();
  flat_ = allocate_floats(last.offset + last.numel, counter, "the model's parameters");
}

namespace {
template <typename T, typename Self>
LayerTensors<T> layer_of(Self& self, int64_t l) {
  CPATTN_CHECK(l >= 0 && l < self.config().layers, ErrorCode::kInvalidArgument, "layer index ", l,
               " out of range [0, ", self.config().layers, ")");
  const auto& in = self.infos();
  const size_t base = 1 + static_cast<size_t>(l * kPerLayer);
  return {self.get(in[base]),     self.get(in[base + 1]), self.get(in[base + 2]),
          self.get(in[base + 3]), self.get(in[base + 4]), self.get(in[base + 5])};
}
}  // namespace

LayerTensors<float> ParamSet::layer(int64_t l) { return layer_of<float>(*this, l); }
LayerTensors<const float> ParamSet::layer(int64_t l) const {
  return layer_of<const float>(*this, l);
}

void ParamSet::for_each(const std::function<void(const ParamInfo&, std::span<float>)>& fn) {
  for (const ParamInfo& info : infos_) fn(info, get(info));
}
void ParamSet::for_each(
    const std::function<void(const ParamInfo&, std::span<const float>)>& fn) const {
  for (const ParamInfo& info : infos_) fn(info, get(info));
}

uint64_t ParamSet::digest() const { return Digest().values(flat()).finish(); }

void ParamSet::zero() {
  std::span<float> f = flat();
  if (!f.empty()) std::memset(f.data(), 0, f.size_bytes());
}

const ParamInfo* ParamSet::first_nonfinite() const {
  for (const ParamInfo& info : infos_) {
    for (float x : get(info)) {
      if (!std::isfinite(x)) return &info;
    }
  }
  return nullptr;
}

ModelParams::ModelParams(const ModelConfig& config, MemoryCounter* counter)
    : ParamSet(config, counter) {
  for_each([&](const ParamInfo& info, std::span<float> w) {
    if (info.init_std == 0.0) {
      for (float& x : w) x = 1.0f;
      return;
    }
    SplitMix64 rng(splitmix64_mix(config.seed ^ Digest().string(info.name).finish()));
    for (float& x : w) x = static_cast<float>(info.init_std * rng.next_normal());
  });
}

ModelGrads::ModelGrads(const ModelConfig& config, MemoryCounter* counter)
    : ParamSet(config, counter) {}

}  // namespace cpattn::train
