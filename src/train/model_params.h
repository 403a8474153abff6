// Model parameters and gradients: every weight of the model in ONE flat counted fp32 buffer, with
// a fixed table of named slices (for gradient all-reduce in one call, AdamW, digests).
#pragma once

#include <cstdint>
#include <functional>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "cpattn/memory.h"
#include "cpattn/tensor.h"
#include "train/model_config.h"

namespace cpattn::train {

/// std::bad_alloc naming what was being allocated and how much (the CLI prints what()).
class AllocationError : public std::bad_alloc {
 public:
  explicit AllocationError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// A zero-filled counted Tensor of `numel` floats; a failed allocation throws AllocationError
/// "allocating <what>: <numel> floats (<MiB> MiB)".
Tensor allocate_floats(int64_t numel, MemoryCounter* counter, const std::string& what);

/// One named parameter: a slice [offset, offset + numel) of the flat buffer.
struct ParamInfo {
  std::string name;            ///< e.g. "layers.1.attn.wqkv"
  std::vector<int64_t> shape;  ///< [out, in] for Linear weights, [vocab, d_model], [d_model]
  int64_t offset = 0;          ///< floats from the start of the flat buffer
  int64_t numel = 0;
  bool decay = false;     ///< AdamW weight decay applies (every matrix, incl. embedding/LM head)
  double init_std = 0.0;  ///< N(0, init_std^2) init; 0 means a gain initialised to 1
};

/// The slices of one transformer layer. T is float or const float.
template <typename T>
struct LayerTensors {
  std::span<T> attn_norm;  ///< [d_model] RMSNorm gain before attention
  std::span<T> wqkv;       ///< [qkv_dim, d_model] fused Q|K|V projection (Linear, y = x W^T)
  std::span<T> wo;         ///< [d_model, q_dim] attention output projection
  std::span<T> mlp_norm;   ///< [d_model] RMSNorm gain before the MLP
  std::span<T> w1;         ///< [hidden, d_model] MLP up projection
  std::span<T> w2;         ///< [d_model, hidden] MLP down projection
};

/// Table of parameters in their fixed order: "embed" [vocab, d_model]; per layer l
/// "layers.l.attn_norm", "layers.l.attn.wqkv", "layers.l.attn.wo", "layers.l.mlp_norm",
/// "layers.l.mlp.w1", "layers.l.mlp.w2"; then "final_norm" [d_model], "lm_head" [vocab, d_model].
/// Init std is 0.02 for every matrix except the two residual-output projections (wo, w2), which
/// use 0.02 / sqrt(2 * layers) (GPT-2, Radford et al. 2019) so the residual stream does not
/// grow with depth. Throws what validate_config throws.
std::vector<ParamInfo> param_table(const ModelConfig& config);

/// A flat buffer shaped by param_table(config). Base of ModelParams and ModelGrads, which are
/// distinct types so that an optimizer cannot be handed its arguments swapped. Move-only.
class ParamSet {
 public:
  const ModelConfig& config() const { return config_; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  int64_t numel() const { return flat_.numel(); }

  /// The whole buffer (all parameters back to back, in infos() order).
  std::span<float> flat() { return flat_.span(); }
  std::span<const float> flat() const { return flat_.span(); }
  std::span<float> get(const ParamInfo& info) { return flat().subspan(info.offset, info.numel); }
  std::span<const float> get(const ParamInfo& info) const {
    return flat().subspan(info.offset, info.numel);
  }

  std::span<float> embed() { return get(infos_.front()); }
  std::span<const float> embed() const { return get(infos_.front()); }
  std::span<float> final_norm() { return get(infos_[infos_.size() - 2]); }
  std::span<const float> final_norm() const { return get(infos_[infos_.size() - 2]); }
  std::span<float> lm_head() { return get(infos_.back()); }
  std::span<const float> lm_head() const { return get(infos_.back()); }
  /// Layer l in [0, layers); throws Error(kInvalidArgument) otherwise.
  LayerTensors<float> layer(int64_t l);
  LayerTensors<const float> layer(int64_t l) const;

  /// Calls fn(info, slice) for every parameter in infos() order.
  void for_each(const std::function<void(const ParamInfo&, std::span<float>)>& fn);
  void for_each(const std::function<void(const ParamInfo&, std::span<const float>)>& fn) const;

  /// cpattn::Digest of the whole flat buffer's raw bytes (render with cpattn::digest_hex): equal
  /// on two ranks <=> bitwise equal values (up to a ~2^-64 collision chance). Per-tensor digests:
  /// Digest().values(get(info)).finish().
  uint64_t digest() const;
  /// Sets every value to 0.
  void zero();
  /// The first tensor (infos() order) holding a NaN or an infinity; null when all are finite.
  const ParamInfo* first_nonfinite() const;

 protected:
  /// A zero-filled set counted in `counter` (process_memory() when null). Validates the config.
  ParamSet(const ModelConfig& config, MemoryCounter* counter);

 private:
  ModelConfig config_;
  std::vector<ParamInfo> infos_;
  Tensor flat_;
};

/// The model's weights, initialised deterministically from config.seed: each tensor draws from
/// its own SplitMix64 stream seeded by (seed, cpattn::Digest of its name), so the init of one
/// tensor does not depend on the others (or on their order). Gains start at 1.
class ModelParams : public ParamSet {
 public:
  explicit ModelParams(const ModelConfig& config, MemoryCounter* counter = nullptr);
};

/// Gradients with exactly ModelParams' structure, zero-initialised. Backward functions
/// accumulate (+=) into it; call zero() between steps.
class ModelGrads : public ParamSet {
 public:
  explicit ModelGrads(const ModelConfig& config, MemoryCounter* counter = nullptr);
};

}  // namespace cpattn::train
