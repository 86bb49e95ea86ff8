// The BiLSTM through cuDNN on the GPU: the CUDA twin of layers/lstm.h,
// with the same argument order plus the stream / library handle last (kernels/layers.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "enhanced/device.h"
#include "enhanced/model.h"
#include "kernels/cuda_check.h"

namespace enhanced::cuda {

// What the cuDNN BiLSTM keeps: descriptors, the weight space W and its gradient dW, the map
// between them and the checkpoint's named tensors (from cudnnGetRNNWeightParams), the workspace and the
// reserve space that forward fills and both backward calls consume.
class CudnnBiLstm {
 public:
  // handle: this LSTM's own (it binds it to each call's stream). tf32 = false: CUDNN_FMA_MATH
  // (plain FP32, matches the CPU engine); true: CUDNN_DEFAULT_MATH, which lets cuDNN use TF32
  // tensor cores on Ampere and later. algorithm: automatic times standard and persistent-small-h
  // at max_batch where cuDNN accepts it (checking its results against standard's) and keeps the
  // fastest; a named one is checked the same way and used (an Error when cuDNN refuses it or it
  // disagrees). Either way it runs batches of max_batch; other sizes run the standard one.
  // bf16 (--precision bf16): cuDNN computes in bfloat16 data with FP32 math (mathPrec FLOAT,
  // tensor-op math; default math where cuDNN refuses that, as selection() says), standard algorithm only (automatic picks it; another named one is an
  // Error); tf32 then has no effect here. The calls below still take and give FP32 tensors: the
  // conversions to and from bfloat16 happen inside (lstm.cu says which).
  CudnnBiLstm(int max_batch, int seq_len, int input, int hidden, bool tf32, RnnAlgorithm algorithm, bool bf16,
              cudnnHandle_t handle);
  ~CudnnBiLstm();
  CudnnBiLstm(const CudnnBiLstm&) = delete;
  CudnnBiLstm& operator=(const CudnnBiLstm&) = delete;

  size_t weight_space_bytes() const;
  int max_batch() const;
  RnnAlgorithm algorithm() const;
  const std::string& selection() const;  // what the automatic selection measured, one line
  uint64_t generation() const;           // changes when the workspace or reserve is reallocated
  bool bf16() const;                     // bfloat16 data and weight space (FP32 math)

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y (B, T, 2H) = [h_fwd(t), h_rev(t)]. The weights (checkpoint layout, stacked as in the CPU layer:
// weight_ih (2, 4H, D), weight_hh (2, 4H, H), bias_ih (2, 4H), bias_hh (2, 4H)) are packed into
// cuDNN's weight space first (one kernel). Saved for backward: the reserve space in `saved`.
void bilstm_forward(float* y, CudnnBiLstm& saved, const float* x, const float* weight_ih, const float* weight_hh,
                    const float* bias_ih, const float* bias_hh, int batch, int seq_len, int input, int hidden,
                    cudaStream_t stream);

// dx (B, T, D) =; dweight_ih, dweight_hh, dbias_ih, dbias_hh += (checkpoint layout). Consumes the
// reserve space: run bilstm_forward again before another backward. BackwardData runs first,
// then dW is zeroed and BackwardWeights adds into it, then dW is added into the checkpoint tensors.
// bf16: y and x must be the forward's (cuDNN reads the bfloat16 copies that forward kept of them);
// dW is cuDNN's bfloat16 weight gradient, widened to FP32 as it is added.
void bilstm_backward(float* dx, float* dweight_ih, float* dweight_hh, float* dbias_ih, float* dbias_hh,
                     CudnnBiLstm& saved, const float* y, const float* dy, const float* x, int batch, int seq_len,
                     int input, int hidden, cudaStream_t stream);

}  // namespace enhanced::cuda
