// The CUDA twins of the CPU layers in src/layers/: the same function names in namespace
// enhanced::cuda and the same argument order (outputs first, then what forward saved, then
// inputs, weights and sizes), plus the stream / library handle last. Every pointer is device
// memory unless it says host. float32 only. Calls are asynchronous on the stream; errors throw
// enhanced::Error (see cuda_check.h).
//
// Host-compilable: tests include it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "enhanced/device.h"
#include "enhanced/model.h"
#include "kernels/cuda_check.h"
#include "steps/optimizer_steps.h"

namespace enhanced::cuda {

// ---- embedding blend (layers/embedding_blend.h) ----------------------------------------------

// x (P, D) with P = B*T positions. Bit-identical to the CPU layer (same summation order,
// no fused multiply-add).
void embedding_blend_forward(float* x, const int32_t* identifier_offsets, const int32_t* identifier_ids,
                             const int32_t* cur_word_ids, const float* embedding, int positions, int dim,
                             BlendMode mode, cudaStream_t stream);

// Scratch of the deterministic embedding backward, sized for the largest batch (grows, with an
// allocation, only when a batch has more identifier ids than any before). After a backward it
// also holds the batch's distinct rows: touched_rows()[0 .. *touched_count()) on the device,
// sorted ascending (what embedding_touched_rows gives on the CPU); before the first backward
// *touched_count() is 0.
class EmbeddingGradWorkspace {
 public:
  EmbeddingGradWorkspace() = default;
  // Ensures room for `positions` positions and `identifier_ids` ids (entries = their sum).
  // Asynchronous on `stream`; synchronise first when growing may free memory still in use.
  // Growing forgets the touched rows (*touched_count() becomes 0): zero their gradients first.
  void reserve(int positions, int64_t identifier_ids, int64_t vocab_size, int dim, cudaStream_t stream);

  const int32_t* touched_rows() const { return unique_rows_.data(); }
  const int32_t* touched_count() const { return run_count_.data(); }  // one int on the device
  int64_t entry_capacity() const { return static_cast<int64_t>(keys_in_.size()); }
  // Changes whenever reserve reallocates (a captured CUDA graph holding the old pointers is stale).
  uint64_t generation() const { return generation_; }

 private:
  friend void embedding_blend_backward(float*, EmbeddingGradWorkspace&, const float*, const int32_t*,
                                       const int32_t*, const int32_t*, int, int64_t, int, BlendMode,
                                       cudaStream_t);
  int end_bit_ = 32;                    // radix bits that cover keys 0 .. V
  int32_t sentinel_ = 0;                // V: the key of padding entries
  uint64_t generation_ = 0;
  DeviceBuffer<int32_t> keys_in_, keys_out_;      // (N) embedding row of each entry, then sorted
  DeviceBuffer<int32_t> values_in_, values_out_;  // (N) entry index, sorted along with its row
  DeviceBuffer<int32_t> entry_position_;  // (N) position p of each entry
  DeviceBuffer<float> id_coefficient_;  // (P) 0.5/n (mean) or the scalar-mean share of p
  DeviceBuffer<float> cur_coefficient_; // (P) 1 (n == 0) or 0.5
  DeviceBuffer<int32_t> run_heads_, run_index_;  // (N) 1 at each row's first sorted entry; its run number
  DeviceBuffer<int32_t> unique_rows_, run_offsets_;  // per distinct row: the row; its first entry (N + 1)
  DeviceBuffer<int32_t> run_count_;     // (1)
  DeviceBuffer<int32_t> chunk_counts_, chunk_offsets_;  // (N) per run: its chunks (0: short), the first's number
  DeviceBuffer<int32_t> chunk_begin_, chunk_end_;       // (N / 32 + 1) per chunk: its sorted entries
  DeviceBuffer<int32_t> chunk_count_;   // (1)
  DeviceBuffer<float> chunk_sums_;      // (N / 32 + 1, D)
  DeviceBuffer<unsigned char> temp_;    // CUB temporary storage
};

// dembedding (V, D) += d loss / d E; only rows named in the batch change. Deterministic, and
// bit-identical to the float CPU layer for every row with at most kChunkEntries (64) terms: the
// (row, entry) pairs, laid out in the CPU's order of accumulation, are radix-sorted (stable) and
// each row's segment is summed in that order, in fixed chunks for longer rows (see
// embedding_blend_steps.h); no atomics. max_identifier_ids: identifier_offsets[P] (host) or any bound
// on it up to the workspace's room; the count itself is read on the device and the rest of the
// sort padded, so a captured CUDA graph serves every batch within that bound.
void embedding_blend_backward(float* dembedding, EmbeddingGradWorkspace& workspace, const float* dx,
                              const int32_t* identifier_offsets, const int32_t* identifier_ids,
                              const int32_t* cur_word_ids, int positions, int64_t max_identifier_ids, int dim,
                              BlendMode mode, cudaStream_t stream);

// ---- BiLSTM through cuDNN (layers/lstm.h) -------------------------------------------------------

// What the cuDNN BiLSTM keeps: descriptors, the weight space W and its gradient dW, the map
// between them and the SPEC's tensors (from cudnnGetRNNWeightParams), the workspace and the
// reserve space that forward fills and both backward calls consume.
class CudnnBiLstm {
 public:
  // tf32 = false: CUDNN_FMA_MATH (plain FP32, matches the CPU engine); true: CUDNN_DEFAULT_MATH,
  // which lets cuDNN use TF32 tensor cores on Ampere and later. algorithm: automatic times each
  // algorithm cuDNN accepts at max_batch (checking its results against standard's) and keeps the
  // fastest; a named one is checked the same way and used (an Error when cuDNN refuses it or it
  // disagrees). Either way it runs batches of max_batch; other sizes run the standard one.
  CudnnBiLstm(cudnnHandle_t handle, int max_batch, int seq_len, int input, int hidden, bool tf32,
              RnnAlgorithm algorithm = RnnAlgorithm::standard);
  ~CudnnBiLstm();
  CudnnBiLstm(const CudnnBiLstm&) = delete;
  CudnnBiLstm& operator=(const CudnnBiLstm&) = delete;

  size_t weight_space_bytes() const;
  int max_batch() const;
  RnnAlgorithm algorithm() const;
  const std::string& selection() const;  // what the automatic selection measured, one line
  uint64_t generation() const;           // changes when the workspace or reserve is reallocated

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y (B, T, 2H) = [h_fwd(t), h_rev(t)]. The weights (SPEC layout, stacked as in the CPU layer:
// weight_ih (2, 4H, D), weight_hh (2, 4H, H), bias_ih (2, 4H), bias_hh (2, 4H)) are packed into
// cuDNN's weight space first (one kernel). Saved for backward: the reserve space in `saved`.
void bilstm_forward(float* y, CudnnBiLstm& saved, const float* x, const float* weight_ih, const float* weight_hh,
                    const float* bias_ih, const float* bias_hh, int batch, int seq_len, int input, int hidden,
                    cudaStream_t stream);

// dx (B, T, D) =; dweight_ih, dweight_hh, dbias_ih, dbias_hh += (SPEC layout). Consumes the
// reserve space: run bilstm_forward again before another backward. BackwardData runs first,
// then dW is zeroed and BackwardWeights adds into it, then dW is added into the SPEC tensors.
void bilstm_backward(float* dx, float* dweight_ih, float* dweight_hh, float* dbias_ih, float* dbias_hh,
                     CudnnBiLstm& saved, const float* y, const float* dy, const float* x, int batch, int seq_len,
                     int input, int hidden, cudaStream_t stream);

// ---- max-pool (layers/maxpool.h) ----------------------------------------------------------------

// pooled (B, F), argmax (B, F); y (B, T, C). Ties go to the first maximum (strict >).
void maxpool_forward(float* pooled, int32_t* argmax, const float* y, int batch, int seq_len, int channels,
                     PoolMode mode, cudaStream_t stream);

// dy (B, T, C) = scatter of dpooled to the argmax elements, zero elsewhere.
void maxpool_backward(float* dy, const int32_t* argmax, const float* dpooled, int batch, int seq_len, int channels,
                      PoolMode mode, cudaStream_t stream);

// ---- dense (layers/dense.h), cuBLAS on the handle's stream -------------------------------------

// out (B, L) = in (B, F) W^T + b, W (L, F).
void dense_forward(float* out, const float* in, const float* weight, const float* bias, int batch, int in_features,
                   int out_features, cublasHandle_t handle, cudaStream_t stream);

// din (B, F) =; dweight (L, F) +=; dbias (L) += (column sums in batch order: deterministic).
void dense_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in, const float* weight,
                    int batch, int in_features, int out_features, cublasHandle_t handle, cudaStream_t stream);

// ---- softmax cross-entropy (layers/softmax_xent.h) ----------------------------------------------

// mean_loss (1, double) = mean over the batch, summed in sample order; dlogits (B, L) =
// (softmax - onehot) / B when not null; sample_losses (B) when not null (needed for mean_loss:
// pass a buffer of B floats).
void softmax_cross_entropy(float* dlogits, float* sample_losses, double* mean_loss, const float* logits,
                           const int32_t* labels, int batch, int num_labels, cudaStream_t stream);

// ---- optimizer (optimizer.h), one launch over the carved parameter buffer -----------------------

// StepRange (the index space a step visits) and StepScalars (the step's scalars, read on the
// device) are in optimizer_steps.h, shared with the host-side test.

// norm (1, double) = sqrt(sum of squares of grads over the touched rows and the rest), in a
// fixed order (fixed grid, then one block): deterministic. scale (1, float) = the clipping
// factor (1 when clip_norm <= 0 or norm <= clip_norm). partials: 256 doubles of scratch.
// halted (nullable, device): when non-zero, *norm = NaN, so the update below is skipped.
void gradient_norm(double* norm, float* scale, double* partials, const float* grads, const int32_t* halted,
                   const StepRange& range, float clip_norm, cudaStream_t stream);

// PyTorch SGD (momentum buffer starts at g when scalars->first_step). Skips the update when
// *norm is not finite.
void sgd_step(float* params, float* velocity, const float* grads, const float* scale, const double* norm,
              const StepScalars* scalars, const StepRange& range, float learning_rate, float momentum,
              cudaStream_t stream);

// PyTorch Adam: w -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps), the two from scalars.
void adam_step(float* params, float* first_moment, float* second_moment, const float* grads, const float* scale,
               const double* norm, const StepScalars* scalars, const StepRange& range, float beta1, float beta2,
               float epsilon, cudaStream_t stream);

// grads = 0 over the range (rows_only: touched rows and everything after the table).
void zero_gradients(float* grads, const StepRange& range, cudaStream_t stream);

}  // namespace enhanced::cuda
