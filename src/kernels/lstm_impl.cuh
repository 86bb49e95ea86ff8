// The state behind CudnnBiLstm (lstm.cuh), shared by its two units: lstm.cu (descriptors, the
// weight-space map, forward and backward) and lstm_algorithm.cu (the algorithm probe and
// selection). Internal to kernels/.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "kernels/lstm.cuh"

namespace enhanced::cuda {
namespace lstm_parts {

inline constexpr int kThreads = 256;
inline constexpr int kMaxPieces = 32;  // 2 directions x 8 linear layers x (matrix, bias)

struct Piece {
  int tensor = 0;             // which checkpoint tensor (stacked over the two directions)
  int64_t tensor_offset = 0;  // in floats, inside that tensor
  int64_t space_offset = 0;   // in elements (float or bfloat16), inside cuDNN's weight space
  int64_t count = 0;
};

struct PieceTable {
  Piece piece[kMaxPieces];
  int count = 0;
};

struct TensorPointers {
  float* tensor[4];
};

// One cuDNN RNN descriptor (one algorithm) and the map between its weight space and the contract's
// tensors.
struct Variant {
  UniqueRnnDesc rnn;
  PieceTable pieces;
  RnnAlgorithm algorithm = RnnAlgorithm::standard;
};

}  // namespace lstm_parts

struct CudnnBiLstm::Impl {
  cudnnHandle_t handle = nullptr;
  int max_batch = 0, seq_len = 0, input = 0, hidden = 0;
  bool tf32 = false;
  bool bf16 = false;  // --precision bf16: bfloat16 data and weight space, FP32 math
  // FMA (plain FP32), DEFAULT (TF32 allowed) or, for bf16, TENSOR_OP: unless cuDNN refuses that,
  // when the constructor retries once with DEFAULT and says so in the selection line.
  cudnnMathType_t math = CUDNN_FMA_MATH;
  UniqueDropoutDesc dropout;
  lstm_parts::Variant chosen;    // runs batches of max_batch
  lstm_parts::Variant standard;  // runs every other batch size
  lstm_parts::Variant* active = nullptr;  // the described batch's
  UniqueRnnDataDesc x_desc, y_desc;
  UniqueTensorDesc h_desc, c_desc;
  size_t weight_bytes = 0;
  DeviceBuffer<unsigned char> weights, dweights;  // float or bfloat16 elements (bf16)
  // bf16 only: cuDNN's operands, one allocation for max_batch carved into x16 (B, T, D),
  // y16 (B, T, 2H), dy16 (B, T, 2H), dx16 (B, T, D).
  DeviceBuffer<uint16_t> staging;
  uint16_t *x16 = nullptr, *y16 = nullptr, *dy16 = nullptr, *dx16 = nullptr;
  DeviceBuffer<unsigned char> workspace, reserve;
  size_t workspace_bytes = 0, reserve_bytes = 0;  // for the described batch
  DeviceBuffer<int32_t> device_lengths;           // (max_batch) all T
  std::vector<int> host_lengths;                  // (max_batch) all T
  int described_batch = -1;
  int forward_batch = -1;  // batch of the forward whose reserve space is live; -1 when consumed
  std::string selection;   // what automatic selection measured
  uint64_t generation = 0; // bumped when the workspace or reserve is reallocated
  // The stream the handle (this LSTM's alone) is bound to: set again only when a call brings
  // another, not inside every captured step.
  cudaStream_t bound_stream = nullptr;
  void bind(cudaStream_t stream) {
    if (stream == bound_stream) return;
    ENHANCED_CUDNN_CHECK(cudnnSetStream(handle, stream));
    bound_stream = stream;
  }

  cudnnDataType_t data_type() const { return bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }
  size_t element_bytes() const { return bf16 ? sizeof(uint16_t) : sizeof(float); }
  size_t x_count(int batch) const { return static_cast<size_t>(batch) * seq_len * input; }
  size_t y_count(int batch) const { return static_cast<size_t>(batch) * seq_len * 2 * hidden; }
  void allocate_staging();
  void configure(lstm_parts::Variant& variant, RnnAlgorithm algorithm);
  void map_weight_space(lstm_parts::Variant& variant);
  void describe(int batch, cudaStream_t stream);
  dim3 piece_grid(const lstm_parts::PieceTable& pieces) const;
  void pack(const lstm_parts::TensorPointers& tensors, cudaStream_t stream);
  void unpack_add(const lstm_parts::TensorPointers& tensors, cudaStream_t stream);
  void run_forward(const float* x, float* y);
  void run_backward(float* dx, const float* y, const float* dy, const float* x);
  void select(RnnAlgorithm asked, cudaStream_t stream);
  struct Probe;
  void probe_step(Probe& probe, cudaStream_t stream);
  std::array<std::vector<float>, 3> probe_outputs(Probe& probe, cudaStream_t stream);
  double probe_milliseconds(Probe& probe, cudaStream_t stream);
  void check_shape(int batch, int seq, int in, int h) const {
    if (seq != seq_len || in != input || h != hidden)
      fail("internal: cuDNN BiLSTM built for T=", seq_len, " D=", input, " H=", hidden, ", called with T=", seq,
           " D=", in, " H=", h);
    if (batch < 1 || batch > max_batch)
      fail("internal: cuDNN BiLSTM holds batches of 1..", max_batch, ", called with ", batch);
  }
};

}  // namespace enhanced::cuda
