// BiLSTM through cuDNN 9's v8 RNN API (see /work/shared/notes/cudnn-rnn.md and
// docs/cuda-backend.md): one layer, LSTM, bidirectional, double bias, FP32, ALGO_STANDARD,
// batch-major unpacked data with every sequence length = T, zero initial states (NULL hx/cx).
//
// The SPEC's tensors live in the carved parameter buffer; cuDNN wants its own weight space. The
// map between them comes from cudnnGetRNNWeightParams (never hard-coded offsets) and is applied
// by one gather kernel before forward (pack) and one scatter-add kernel after backward (unpack).
#include <algorithm>
#include <vector>

#include "kernels/layers.h"

namespace enhanced::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPieces = 32;  // 2 directions x 8 linear layers x (matrix, bias)

enum Tensor : int { kWeightIh = 0, kWeightHh = 1, kBiasIh = 2, kBiasHh = 3 };

struct Piece {
  int tensor = 0;             // which SPEC tensor (stacked over the two directions)
  int64_t tensor_offset = 0;  // in floats, inside that tensor
  int64_t space_offset = 0;   // in floats, inside cuDNN's weight space
  int64_t count = 0;
};

struct PieceTable {
  Piece piece[kMaxPieces];
  int count = 0;
};

struct TensorPointers {
  float* tensor[4];
};

// blockIdx.y = piece. Pack: space[piece] = tensor[piece]. Unpack: tensor[piece] += space[piece].
__global__ void pack_kernel(float* __restrict__ space, PieceTable table, TensorPointers tensors) {
  const Piece piece = table.piece[blockIdx.y];
  const float* source = tensors.tensor[piece.tensor] + piece.tensor_offset;
  float* target = space + piece.space_offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < piece.count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    target[i] = source[i];
}

__global__ void unpack_add_kernel(const float* __restrict__ space, PieceTable table, TensorPointers tensors) {
  const Piece piece = table.piece[blockIdx.y];
  float* target = tensors.tensor[piece.tensor] + piece.tensor_offset;
  const float* source = space + piece.space_offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < piece.count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    target[i] += source[i];
}

UniqueTensorDesc make_tensor_desc() {
  cudnnTensorDescriptor_t desc = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc));
  return UniqueTensorDesc(desc);
}

UniqueRnnDataDesc make_rnn_data_desc() {
  cudnnRNNDataDescriptor_t desc = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&desc));
  return UniqueRnnDataDesc(desc);
}

// Elements described by a cuDNN tensor descriptor returned by cudnnGetRNNWeightParams.
int64_t described_elements(cudnnTensorDescriptor_t desc, const char* what) {
  cudnnDataType_t type{};
  int dims[8] = {0}, strides[8] = {0}, rank = 0;
  ENHANCED_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &type, &rank, dims, strides));
  if (type != CUDNN_DATA_FLOAT) fail("cuDNN weight space: ", what, " is not float32");
  int64_t elements = rank > 0 ? 1 : 0;
  for (int k = 0; k < rank; ++k) elements *= dims[k];
  return elements;
}

}  // namespace

struct CudnnBiLstm::Impl {
  cudnnHandle_t handle = nullptr;
  int max_batch = 0, seq_len = 0, input = 0, hidden = 0;
  UniqueDropoutDesc dropout;
  UniqueRnnDesc rnn;
  UniqueRnnDataDesc x_desc, y_desc;
  UniqueTensorDesc h_desc, c_desc;
  size_t weight_bytes = 0;
  DeviceBuffer<float> weights, dweights;
  DeviceBuffer<unsigned char> workspace, reserve;
  size_t workspace_bytes = 0, reserve_bytes = 0;  // for the described batch
  DeviceBuffer<int32_t> device_lengths;           // (max_batch) all T
  std::vector<int> host_lengths;                  // (max_batch) all T
  PieceTable pieces;
  int described_batch = -1;
  int forward_batch = -1;  // batch of the forward whose reserve space is live; -1 when consumed

  void map_weight_space();
  void describe(int batch, cudaStream_t stream);
  void check_shape(int batch, int seq, int in, int h) const {
    if (seq != seq_len || in != input || h != hidden)
      fail("internal: cuDNN BiLSTM built for T=", seq_len, " D=", input, " H=", hidden, ", called with T=", seq,
           " D=", in, " H=", h);
    if (batch < 1 || batch > max_batch)
      fail("internal: cuDNN BiLSTM holds batches of 1..", max_batch, ", called with ", batch);
  }
};

void CudnnBiLstm::Impl::map_weight_space() {
  const int64_t H = hidden, D = input;
  UniqueTensorDesc m_desc = make_tensor_desc(), b_desc = make_tensor_desc();
  const char* base = reinterpret_cast<const char*>(weights.data());
  pieces.count = 0;
  for (int direction = 0; direction < 2; ++direction) {
    for (int id = 0; id < 8; ++id) {
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      ENHANCED_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, rnn, direction, weight_bytes, weights.data(), id, m_desc,
                                                   &m_addr, b_desc, &b_addr));
      if (!m_addr || !b_addr) fail("cuDNN weight space: no matrix or bias for pseudo-layer ", direction, " id ", id);
      const bool recurrent = id >= 4;
      const int gate = id % 4;  // i, f, g, o: the SPEC's row blocks, in cuDNN's id order
      const int64_t columns = recurrent ? H : D;
      Piece matrix;
      matrix.tensor = recurrent ? kWeightHh : kWeightIh;
      matrix.tensor_offset = direction * 4 * H * columns + gate * H * columns;
      matrix.count = H * columns;
      Piece bias;
      bias.tensor = recurrent ? kBiasHh : kBiasIh;
      bias.tensor_offset = direction * 4 * H + gate * H;
      bias.count = H;
      const std::pair<Piece*, std::pair<void*, cudnnTensorDescriptor_t>> found[] = {{&matrix, {m_addr, m_desc}},
                                                                                   {&bias, {b_addr, b_desc}}};
      for (const auto& [piece, where] : found) {
        const std::ptrdiff_t bytes = static_cast<const char*>(where.first) - base;
        if (bytes < 0 || bytes % sizeof(float) != 0 ||
            static_cast<size_t>(bytes) + piece->count * sizeof(float) > weight_bytes)
          fail("cuDNN weight space: piece (pseudo-layer ", direction, ", id ", id, ") at byte ", bytes,
               " does not fit the ", weight_bytes, "-byte space");
        const int64_t described = described_elements(where.second, "piece");
        if (described != piece->count)
          fail("cuDNN weight space: pseudo-layer ", direction, " id ", id, " has ", described,
               " elements, the SPEC tensor block has ", piece->count);
        piece->space_offset = bytes / static_cast<std::ptrdiff_t>(sizeof(float));
        pieces.piece[pieces.count++] = *piece;
      }
    }
  }
  // The pieces must tile the weight space exactly: sorted by offset, adjacent, covering it.
  std::vector<Piece> sorted(pieces.piece, pieces.piece + pieces.count);
  std::sort(sorted.begin(), sorted.end(), [](const Piece& a, const Piece& b) { return a.space_offset < b.space_offset; });
  int64_t end = 0;
  for (const Piece& piece : sorted) {
    if (piece.space_offset < end) fail("cuDNN weight space: pieces overlap at float ", piece.space_offset);
    end = piece.space_offset + piece.count;
  }
  int64_t total = 0;
  for (const Piece& piece : sorted) total += piece.count;
  if (static_cast<size_t>(total) * sizeof(float) != weight_bytes)
    fail("cuDNN weight space: the SPEC tensors hold ", total * 4, " bytes, cuDNN's space has ", weight_bytes);
}

void CudnnBiLstm::Impl::describe(int batch, cudaStream_t stream) {
  if (batch == described_batch) return;
  const float padding = 0.0f;
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDataDescriptor(x_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 seq_len, batch, input, host_lengths.data(),
                                                 const_cast<float*>(&padding)));
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDataDescriptor(y_desc, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 seq_len, batch, 2 * hidden, host_lengths.data(),
                                                 const_cast<float*>(&padding)));
  const int dims[3] = {2, batch, hidden};  // numLayers * 2 directions
  const int strides[3] = {batch * hidden, hidden, 1};
  ENHANCED_CUDNN_CHECK(cudnnSetTensorNdDescriptor(h_desc, CUDNN_DATA_FLOAT, 3, dims, strides));
  ENHANCED_CUDNN_CHECK(cudnnSetTensorNdDescriptor(c_desc, CUDNN_DATA_FLOAT, 3, dims, strides));
  size_t work = 0, reserved = 0;
  ENHANCED_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_TRAINING, x_desc, &work, &reserved));
  // The sizes are not monotonic in the batch: grow when a new batch size needs more. This
  // allocates only the first time a batch size is seen (the constructor sizes for max_batch).
  if (work > workspace.size() || reserved > reserve.size()) {
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream));
    workspace.reserve(work);
    if (reserved > reserve.size()) {
      reserve.resize(reserved);
      forward_batch = -1;  // the old reserve is gone
    }
  }
  workspace_bytes = work;
  reserve_bytes = reserved;
  described_batch = batch;
}

CudnnBiLstm::CudnnBiLstm(cudnnHandle_t handle, int max_batch, int seq_len, int input, int hidden, bool tf32)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (max_batch < 1 || seq_len < 1 || input < 1 || hidden < 1)
    fail("internal: cuDNN BiLSTM needs positive sizes (B=", max_batch, " T=", seq_len, " D=", input, " H=", hidden, ")");
  s.handle = handle;
  s.max_batch = max_batch;
  s.seq_len = seq_len;
  s.input = input;
  s.hidden = hidden;
  cudaStream_t stream = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnGetStream(handle, &stream));

  cudnnDropoutDescriptor_t dropout = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&dropout));
  s.dropout = UniqueDropoutDesc(dropout);
  ENHANCED_CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout, handle, 0.0f, nullptr, 0, 0));
  cudnnRNNDescriptor_t rnn = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreateRNNDescriptor(&rnn));
  s.rnn = UniqueRnnDesc(rnn);
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                                CUDNN_BIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                CUDNN_DATA_FLOAT, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH, input,
                                                hidden, hidden /* projSize = hidden: no projection */, 1, dropout,
                                                CUDNN_RNN_PADDED_IO_ENABLED));
  ENHANCED_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, rnn, &s.weight_bytes));
  const size_t expected = 2 * (4 * static_cast<size_t>(hidden) * input + 4 * static_cast<size_t>(hidden) * hidden +
                               8 * static_cast<size_t>(hidden)) * sizeof(float);
  if (s.weight_bytes != expected)
    fail("cuDNN weight space is ", s.weight_bytes, " bytes, a double-bias BiLSTM needs ", expected);
  s.weights.resize(s.weight_bytes / sizeof(float));
  s.dweights.resize(s.weight_bytes / sizeof(float));
  s.map_weight_space();

  s.x_desc = make_rnn_data_desc();
  s.y_desc = make_rnn_data_desc();
  s.h_desc = make_tensor_desc();
  s.c_desc = make_tensor_desc();
  s.host_lengths.assign(static_cast<size_t>(max_batch), seq_len);
  s.device_lengths.resize(static_cast<size_t>(max_batch));
  copy_to_device(s.device_lengths.data(), s.host_lengths.data(), s.host_lengths.size(), stream);
  s.describe(max_batch, stream);
}

CudnnBiLstm::~CudnnBiLstm() = default;

size_t CudnnBiLstm::weight_space_bytes() const { return impl_->weight_bytes; }
int CudnnBiLstm::max_batch() const { return impl_->max_batch; }

void bilstm_forward(float* y, CudnnBiLstm& saved, const float* x, const float* weight_ih, const float* weight_hh,
                    const float* bias_ih, const float* bias_hh, int batch, int seq_len, int input, int hidden,
                    cudaStream_t stream) {
  CudnnBiLstm::Impl& s = saved.impl();
  s.check_shape(batch, seq_len, input, hidden);
  ENHANCED_CUDNN_CHECK(cudnnSetStream(s.handle, stream));
  s.describe(batch, stream);
  const TensorPointers tensors{{const_cast<float*>(weight_ih), const_cast<float*>(weight_hh),
                                const_cast<float*>(bias_ih), const_cast<float*>(bias_hh)}};
  const dim3 grid(static_cast<unsigned>(std::max(1, (4 * hidden * std::max(input, hidden) + kThreads - 1) / kThreads)),
                  static_cast<unsigned>(s.pieces.count));
  pack_kernel<<<grid, kThreads, 0, stream>>>(s.weights.data(), s.pieces, tensors);
  ENHANCED_CUDA_CHECK_LAUNCH();
  ENHANCED_CUDNN_CHECK(cudnnRNNForward(s.handle, s.rnn, CUDNN_FWD_MODE_TRAINING, s.device_lengths.data(), s.x_desc, x,
                                       s.y_desc, y, s.h_desc, nullptr, nullptr, s.c_desc, nullptr, nullptr,
                                       s.weight_bytes, s.weights.data(), s.workspace_bytes, s.workspace.data(),
                                       s.reserve_bytes, s.reserve.data()));
  s.forward_batch = batch;
}

void bilstm_backward(float* dx, float* dweight_ih, float* dweight_hh, float* dbias_ih, float* dbias_hh,
                     CudnnBiLstm& saved, const float* y, const float* dy, const float* x, int batch, int seq_len,
                     int input, int hidden, cudaStream_t stream) {
  CudnnBiLstm::Impl& s = saved.impl();
  s.check_shape(batch, seq_len, input, hidden);
  if (s.forward_batch != batch || s.described_batch != batch)
    fail("internal: bilstm_backward needs the matching bilstm_forward (batch ", batch, ") just before");
  ENHANCED_CUDNN_CHECK(cudnnSetStream(s.handle, stream));
  // Data first (it reads and mutates the reserve), then weights. NULL hx/cx = zero initial
  // state; NULL dhy/dcy = no gradient from the final states; NULL dhx/dcx = not wanted.
  ENHANCED_CUDNN_CHECK(cudnnRNNBackwardData_v8(s.handle, s.rnn, s.device_lengths.data(), s.y_desc, y, dy, s.x_desc,
                                               dx, s.h_desc, nullptr, nullptr, nullptr, s.c_desc, nullptr, nullptr,
                                               nullptr, s.weight_bytes, s.weights.data(), s.workspace_bytes,
                                               s.workspace.data(), s.reserve_bytes, s.reserve.data()));
  // BackwardWeights only accumulates (CUDNN_WGRAD_MODE_ADD): start from zero every time.
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(s.dweights.data(), 0, s.weight_bytes, stream));
  ENHANCED_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(s.handle, s.rnn, CUDNN_WGRAD_MODE_ADD, s.device_lengths.data(),
                                                  s.x_desc, x, s.h_desc, nullptr, s.y_desc, y, s.weight_bytes,
                                                  s.dweights.data(), s.workspace_bytes, s.workspace.data(),
                                                  s.reserve_bytes, s.reserve.data()));
  s.forward_batch = -1;  // the reserve is consumed
  const TensorPointers tensors{{dweight_ih, dweight_hh, dbias_ih, dbias_hh}};
  const dim3 grid(static_cast<unsigned>(std::max(1, (4 * hidden * std::max(input, hidden) + kThreads - 1) / kThreads)),
                  static_cast<unsigned>(s.pieces.count));
  unpack_add_kernel<<<grid, kThreads, 0, stream>>>(s.dweights.data(), s.pieces, tensors);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

}  // namespace enhanced::cuda
