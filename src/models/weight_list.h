// WeightLoader: how layers load their matrices (and small f32 vectors) from a checkpoint, keeping the
// one list of loaded matrices that the model's byte figures come from — weight bytes one decode token
// reads (each matrix times the share of tokens that read it: 1, k/E for a routed expert, 0 for an
// embedding table) and resident bytes (each distinct matrix once; a tied head is the embedding).
// Nothing per family: a new format or layer is counted by loading through it.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"
#include "weights/safetensors.h"

#include <string>
#include <vector>

namespace kapitsa::models {

class WeightLoader {
 public:
  explicit WeightLoader(const weights::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  // A matrix (or stacked experts) for matmul / embedding, checked against `shape`, counted with the
  // current share.
  Expected<Tensor> matrix(const std::string& name, const Shape& shape);
  // Counts a matrix loaded elsewhere (a view of one already counted is counted once: the larger share).
  void count(const Tensor& matrix);
  // A small parameter vector converted to f32 (norms, biases, A_log): not counted.
  Expected<Buffer> get_f32(const std::string& name, const Shape& shape) const {
    return checkpoint_.get_f32(name, shape);
  }
  bool contains(const std::string& name) const { return checkpoint_.contains(name); }

  // Matrices loaded while a Share lives are read by `per_token` of the tokens (routed experts: k/E;
  // an embedding table: 0, it is gathered from).
  class Share {
   public:
    Share(WeightLoader& loader, double per_token) : loader_(loader), outer_(loader.share_) { loader.share_ = per_token; }
    ~Share() { loader_.share_ = outer_; }
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;

   private:
    WeightLoader& loader_;
    double outer_;
  };

  // Σ bytes × share over distinct matrices: the denominator of the decode roofline.
  size_t bytes_per_token() const;
  // Σ bytes over distinct matrices.
  size_t resident_bytes() const;

 private:
  struct Entry {
    const void* data;
    size_t bytes;
    double share;
  };
  const weights::Checkpoint& checkpoint_;
  std::vector<Entry> entries_;
  double share_ = 1.0;
};

}  // namespace kapitsa::models
