// BiLSTM through cuDNN 9's v8 RNN API (see docs/notes/cudnn-rnn.md and
// docs/cuda-backend.md): one layer, LSTM, bidirectional, double bias, FP32, batch-major unpacked
// data with every sequence length = T, zero initial states (NULL hx/cx). The algorithm for full
// batches is chosen by timing (or named: lstm_algorithm.cu); every other batch size runs
// ALGO_STANDARD, which cuDNN supports for any shape. The state both files share: lstm_impl.cuh.
//
// The checkpoint's named tensors live in the carved parameter buffer; cuDNN wants its own weight space. The
// map between them comes from cudnnGetRNNWeightParams (never hard-coded offsets) and is applied
// by one gather kernel before forward (pack) and one scatter-add kernel after backward (unpack).
//
// --precision bf16 (docs/cuda-backend.md says why cuDNN 9 takes bfloat16 here): the descriptor's
// dataType is CUDNN_DATA_BFLOAT16 with mathPrec CUDNN_DATA_FLOAT (FP32 gates and accumulation inside
// cuDNN), ALGO_STANDARD only. The conversions, all on the stream, none allocating:
// - pack: FP32 master weights -> the bfloat16 weight space (RNE), before every forward, so the
//   space always holds the weights of the latest optimizer step
// - forward: x FP32 -> x16; cuDNN writes y16; y16 -> y FP32 (max-pool reads FP32)
// - backward: dy FP32 -> dy16; cuDNN writes dx16 and the bfloat16 dW; dx16 -> dx FP32 (the
//   embedding backward reads FP32); unpack adds dW, widened, into the FP32 gradients
// x16, y16, dy16 and dx16 are this object's (one allocation for max_batch, like the workspace).
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "enhanced/carve.h"
#include "kernels/bf16.cuh"
#include "kernels/lstm_impl.cuh"

namespace enhanced::cuda {

using namespace lstm_parts;

namespace {

enum Tensor : int { kWeightIh = 0, kWeightHh = 1, kBiasIh = 2, kBiasHh = 3 };

// The weight space's element: float, or __nv_bfloat16 under --precision bf16.
__device__ inline void store(float& target, float value) { target = value; }
__device__ inline void store(__nv_bfloat16& target, float value) { target = __float2bfloat16_rn(value); }
__device__ inline float load(float value) { return value; }
__device__ inline float load(__nv_bfloat16 value) { return __bfloat162float(value); }

// blockIdx.y = piece. Pack: space[piece] = tensor[piece] (rounded to bfloat16 when Space is).
// Unpack: tensor[piece] += space[piece] (widened to float first).
template <class Space>
__global__ void pack_kernel(Space* __restrict__ space, PieceTable table, TensorPointers tensors) {
  const Piece piece = table.piece[blockIdx.y];
  const float* source = tensors.tensor[piece.tensor] + piece.tensor_offset;
  Space* target = space + piece.space_offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < piece.count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(target[i], source[i]);
}

template <class Space>
__global__ void unpack_add_kernel(const Space* __restrict__ space, PieceTable table, TensorPointers tensors) {
  const Piece piece = table.piece[blockIdx.y];
  float* target = tensors.tensor[piece.tensor] + piece.tensor_offset;
  const Space* source = space + piece.space_offset;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < piece.count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    target[i] += load(source[i]);
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

// Elements described by a cuDNN tensor descriptor returned by cudnnGetRNNWeightParams, which
// must be of the weight space's type.
int64_t described_elements(cudnnTensorDescriptor_t desc, cudnnDataType_t expected, const char* what) {
  cudnnDataType_t type{};
  int dims[8] = {0}, strides[8] = {0}, rank = 0;
  ENHANCED_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &type, &rank, dims, strides));
  if (type != expected)
    fail("cuDNN weight space: ", what, " is of cuDNN type ", static_cast<int>(type), ", expected ",
         static_cast<int>(expected), expected == CUDNN_DATA_FLOAT ? " (float32)" : " (bfloat16)");
  int64_t elements = rank > 0 ? 1 : 0;
  for (int k = 0; k < rank; ++k) elements *= dims[k];
  return elements;
}

cudnnRNNAlgo_t cudnn_algorithm(RnnAlgorithm algorithm) {
  switch (algorithm) {
    case RnnAlgorithm::persistent: return CUDNN_RNN_ALGO_PERSIST_STATIC;
    case RnnAlgorithm::persistent_small_h: return CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
    default: return CUDNN_RNN_ALGO_STANDARD;
  }
}

}  // namespace

void CudnnBiLstm::Impl::map_weight_space(Variant& variant) {
  const int64_t H = hidden, D = input;
  UniqueTensorDesc m_desc = make_tensor_desc(), b_desc = make_tensor_desc();
  const char* base = reinterpret_cast<const char*>(weights.data());
  PieceTable& pieces = variant.pieces;
  pieces.count = 0;
  for (int direction = 0; direction < 2; ++direction) {
    for (int id = 0; id < 8; ++id) {
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      ENHANCED_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, variant.rnn, direction, weight_bytes, weights.data(), id,
                                                   m_desc, &m_addr, b_desc, &b_addr));
      if (!m_addr || !b_addr) fail("cuDNN weight space: no matrix or bias for pseudo-layer ", direction, " id ", id);
      const bool recurrent = id >= 4;
      const int gate = id % 4;  // i, f, g, o: the checkpoint's row blocks, in cuDNN's id order
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
        const auto element = static_cast<std::ptrdiff_t>(element_bytes());
        if (bytes < 0 || bytes % element != 0 || static_cast<size_t>(bytes) + piece->count * element > weight_bytes)
          fail("cuDNN weight space: piece (pseudo-layer ", direction, ", id ", id, ") at byte ", bytes,
               " does not fit the ", weight_bytes, "-byte space");
        const int64_t described = described_elements(where.second, data_type(), "piece");
        if (described != piece->count)
          fail("cuDNN weight space: pseudo-layer ", direction, " id ", id, " has ", described,
               " elements, the checkpoint tensor block has ", piece->count);
        piece->space_offset = bytes / element;
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
  if (static_cast<size_t>(total) * element_bytes() != weight_bytes)
    fail("cuDNN weight space: the checkpoint tensors hold ", total * element_bytes(), " bytes, cuDNN's space has ",
         weight_bytes);
}

// Sets the variant's descriptor for `algorithm` and maps the weight space it implies. Both
// variants share one weight space (and its gradient): every forward packs it anew.
void CudnnBiLstm::Impl::configure(Variant& variant, RnnAlgorithm algorithm) {
  described_batch = -1;  // temp space sizes depend on the algorithm
  forward_batch = -1;
  active = nullptr;
  if (!variant.rnn) {
    cudnnRNNDescriptor_t rnn = nullptr;
    ENHANCED_CUDNN_CHECK(cudnnCreateRNNDescriptor(&rnn));
    variant.rnn = UniqueRnnDesc(rnn);
  }
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(variant.rnn, cudnn_algorithm(algorithm), CUDNN_LSTM,
                                                CUDNN_RNN_DOUBLE_BIAS, CUDNN_BIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                                data_type(), CUDNN_DATA_FLOAT /* mathPrec: FP32 math */, math,
                                                input, hidden,
                                                hidden /* projSize = hidden: no projection */, 1, dropout,
                                                CUDNN_RNN_PADDED_IO_ENABLED));
  size_t bytes = 0;
  ENHANCED_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, variant.rnn, &bytes));
  const size_t expected = 2 * (4 * static_cast<size_t>(hidden) * input + 4 * static_cast<size_t>(hidden) * hidden +
                               8 * static_cast<size_t>(hidden)) * element_bytes();
  if (bytes != expected) fail("cuDNN weight space is ", bytes, " bytes, a double-bias BiLSTM needs ", expected);
  if (bytes != weight_bytes) {
    ++generation;
    weight_bytes = bytes;
    weights.resize(weight_bytes);
    dweights.resize(weight_bytes);
  }
  map_weight_space(variant);
  variant.algorithm = algorithm;
}

void CudnnBiLstm::Impl::describe(int batch, cudaStream_t stream) {
  if (batch == described_batch) return;
  described_batch = -1;  // until every descriptor below is set: an exception leaves none half-set
  active = batch == max_batch ? &chosen : &standard;
  // paddingFill points to a value of the data's type: 0 as float, or the bfloat16 bits of +0.
  float padding_float = 0.0f;
  uint16_t padding_bf16 = 0;
  void* padding = bf16 ? static_cast<void*>(&padding_bf16) : static_cast<void*>(&padding_float);
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDataDescriptor(x_desc, data_type(), CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 seq_len, batch, input, host_lengths.data(), padding));
  ENHANCED_CUDNN_CHECK(cudnnSetRNNDataDescriptor(y_desc, data_type(), CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
                                                 seq_len, batch, 2 * hidden, host_lengths.data(), padding));
  const int dims[3] = {2, batch, hidden};  // numLayers * 2 directions
  const int strides[3] = {batch * hidden, hidden, 1};
  // hx/cx/hy/cy are NULL (zero initial state, final state not wanted): the descriptors only
  // describe them, in the data's type.
  ENHANCED_CUDNN_CHECK(cudnnSetTensorNdDescriptor(h_desc, data_type(), 3, dims, strides));
  ENHANCED_CUDNN_CHECK(cudnnSetTensorNdDescriptor(c_desc, data_type(), 3, dims, strides));
  size_t work = 0, reserved = 0;
  ENHANCED_CUDNN_CHECK(
      cudnnGetRNNTempSpaceSizes(handle, active->rnn, CUDNN_FWD_MODE_TRAINING, x_desc, &work, &reserved));
  // The sizes are not monotonic in the batch: grow when a new batch size needs more. This
  // allocates only the first time a batch size is seen (the constructor sizes for max_batch).
  if (work > workspace.size() || reserved > reserve.size()) {
    ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream));
    ++generation;  // first: a captured graph must never keep a freed buffer
    forward_batch = -1;
    workspace.reserve(work);
    reserve.reserve(reserved);
  }
  workspace_bytes = work;
  reserve_bytes = reserved;
  described_batch = batch;
}

// blockIdx.y = piece; x covers the largest piece, an H x max(D, H) matrix.
dim3 CudnnBiLstm::Impl::piece_grid(const PieceTable& pieces) const {
  const int64_t largest = static_cast<int64_t>(hidden) * std::max(input, hidden);
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, (largest + kThreads - 1) / kThreads)),
              static_cast<unsigned>(pieces.count));
}

void CudnnBiLstm::Impl::pack(const TensorPointers& tensors, cudaStream_t stream) {
  const PieceTable& pieces = active->pieces;
  const dim3 grid = piece_grid(pieces);
  if (bf16)
    pack_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(weights.data()), pieces, tensors);
  else
    pack_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<float*>(weights.data()), pieces, tensors);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void CudnnBiLstm::Impl::unpack_add(const TensorPointers& tensors, cudaStream_t stream) {
  const PieceTable& pieces = active->pieces;
  const dim3 grid = piece_grid(pieces);
  if (bf16)
    unpack_add_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(dweights.data()), pieces,
                                                     tensors);
  else
    unpack_add_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const float*>(dweights.data()), pieces, tensors);
  ENHANCED_CUDA_CHECK_LAUNCH();
}

void CudnnBiLstm::Impl::allocate_staging() {
  if (!bf16) return;
  const size_t xs = x_count(max_batch), ys = y_count(max_batch);
  const CarvedPieces<4> pieces = carve_pieces<4>({xs, ys, ys, xs}, sizeof(uint16_t));
  staging.resize(pieces.total);
  x16 = staging.data() + pieces.offsets[0];
  y16 = staging.data() + pieces.offsets[1];
  dy16 = staging.data() + pieces.offsets[2];
  dx16 = staging.data() + pieces.offsets[3];
}

// bf16: x is rounded into x16 and cuDNN's y16 widened into y; both copies stay for backward.
void CudnnBiLstm::Impl::run_forward(const float* x, float* y) {
  cudaStream_t stream = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  const void* x_in = x;
  void* y_out = y;
  if (bf16) {
    convert_to_bf16(x16, x, x_count(described_batch), stream);
    x_in = x16;
    y_out = y16;
  }
  ENHANCED_CUDNN_CHECK(cudnnRNNForward(handle, active->rnn, CUDNN_FWD_MODE_TRAINING, device_lengths.data(), x_desc,
                                       x_in, y_desc, y_out, h_desc, nullptr, nullptr, c_desc, nullptr, nullptr,
                                       weight_bytes, weights.data(), workspace_bytes, workspace.data(), reserve_bytes,
                                       reserve.data()));
  if (bf16) convert_from_bf16(y, y16, y_count(described_batch), stream);
}

// Data first (it reads and mutates the reserve), then weights. NULL hx/cx = zero initial state;
// NULL dhy/dcy = no gradient from the final states; NULL dhx/dcx = not wanted.
// bf16: cuDNN reads the forward's x16 and y16 (y and x are those values, widened) and dy
// rounded into dy16; its dx16 is widened into dx.
void CudnnBiLstm::Impl::run_backward(float* dx, const float* y, const float* dy, const float* x) {
  cudaStream_t stream = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  const void *x_in = x, *y_in = y, *dy_in = dy;
  void* dx_out = dx;
  if (bf16) {
    convert_to_bf16(dy16, dy, y_count(described_batch), stream);
    x_in = x16;
    y_in = y16;
    dy_in = dy16;
    dx_out = dx16;
  }
  ENHANCED_CUDNN_CHECK(cudnnRNNBackwardData_v8(handle, active->rnn, device_lengths.data(), y_desc, y_in, dy_in, x_desc,
                                               dx_out, h_desc, nullptr, nullptr, nullptr, c_desc, nullptr, nullptr,
                                               nullptr, weight_bytes, weights.data(), workspace_bytes,
                                               workspace.data(), reserve_bytes, reserve.data()));
  if (bf16) convert_from_bf16(dx, dx16, x_count(described_batch), stream);
  // BackwardWeights only accumulates (CUDNN_WGRAD_MODE_ADD): start from zero every time.
  ENHANCED_CUDA_CHECK(cudaMemsetAsync(dweights.data(), 0, weight_bytes, stream));
  ENHANCED_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(handle, active->rnn, CUDNN_WGRAD_MODE_ADD, device_lengths.data(),
                                                  x_desc, x_in, h_desc, nullptr, y_desc, y_in, weight_bytes,
                                                  dweights.data(), workspace_bytes, workspace.data(), reserve_bytes,
                                                  reserve.data()));
}

CudnnBiLstm::CudnnBiLstm(int max_batch, int seq_len, int input, int hidden, bool tf32, RnnAlgorithm algorithm,
                         bool bf16, cudnnHandle_t handle)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (max_batch < 1 || seq_len < 1 || input < 1 || hidden < 1)
    fail("internal: cuDNN BiLSTM needs positive sizes (B=", max_batch, " T=", seq_len, " D=", input, " H=", hidden, ")");
  s.handle = handle;
  s.max_batch = max_batch;
  s.seq_len = seq_len;
  s.input = input;
  s.hidden = hidden;
  s.tf32 = tf32;
  s.bf16 = bf16;
  s.allocate_staging();
  cudaStream_t stream = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  s.bound_stream = stream;

  cudnnDropoutDescriptor_t dropout = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&dropout));
  s.dropout = UniqueDropoutDesc(dropout);
  ENHANCED_CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout, handle, 0.0f, nullptr, 0, 0));
  s.x_desc = make_rnn_data_desc();
  s.y_desc = make_rnn_data_desc();
  s.h_desc = make_tensor_desc();
  s.c_desc = make_tensor_desc();
  s.host_lengths.assign(static_cast<size_t>(max_batch), seq_len);
  s.device_lengths.resize(static_cast<size_t>(max_batch));
  copy_to_device(s.device_lengths.data(), s.host_lengths.data(), s.host_lengths.size(), stream);
  s.math = bf16 ? CUDNN_TENSOR_OP_MATH : tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  try {
    s.configure(s.standard, RnnAlgorithm::standard);
    s.select(algorithm, stream);
  } catch (const Error& e) {
    // cuDNN may refuse tensor-op math with bfloat16 data (at the descriptor or the first step):
    // the run goes on with default math, which still computes in FP32, rather than failing.
    if (s.math != CUDNN_TENSOR_OP_MATH) throw;
    static_cast<void>(cudaGetLastError());
    const std::string reason = e.what();
    s.math = CUDNN_DEFAULT_MATH;
    s.configure(s.standard, RnnAlgorithm::standard);
    s.select(algorithm, stream);
    s.selection += cat("; bf16 tensor-op math refused (", reason.substr(0, reason.find('\n')).substr(0, 160),
                       "): default math");
  }
  s.describe(max_batch, stream);
}

CudnnBiLstm::~CudnnBiLstm() = default;

size_t CudnnBiLstm::weight_space_bytes() const { return impl_->weight_bytes; }
int CudnnBiLstm::max_batch() const { return impl_->max_batch; }
RnnAlgorithm CudnnBiLstm::algorithm() const { return impl_->chosen.algorithm; }
const std::string& CudnnBiLstm::selection() const { return impl_->selection; }
uint64_t CudnnBiLstm::generation() const { return impl_->generation; }
bool CudnnBiLstm::bf16() const { return impl_->bf16; }

void bilstm_forward(float* y, CudnnBiLstm& saved, const float* x, const float* weight_ih, const float* weight_hh,
                    const float* bias_ih, const float* bias_hh, int batch, int seq_len, int input, int hidden,
                    cudaStream_t stream) {
  CudnnBiLstm::Impl& s = saved.impl();
  s.check_shape(batch, seq_len, input, hidden);
  s.bind(stream);
  s.describe(batch, stream);
  s.pack(TensorPointers{{const_cast<float*>(weight_ih), const_cast<float*>(weight_hh), const_cast<float*>(bias_ih),
                         const_cast<float*>(bias_hh)}},
         stream);
  s.run_forward(x, y);
  s.forward_batch = batch;
}

void bilstm_backward(float* dx, float* dweight_ih, float* dweight_hh, float* dbias_ih, float* dbias_hh,
                     CudnnBiLstm& saved, const float* y, const float* dy, const float* x, int batch, int seq_len,
                     int input, int hidden, cudaStream_t stream) {
  CudnnBiLstm::Impl& s = saved.impl();
  s.check_shape(batch, seq_len, input, hidden);
  if (s.forward_batch != batch || s.described_batch != batch)
    fail("internal: bilstm_backward needs the matching bilstm_forward (batch ", batch, ") just before");
  s.bind(stream);
  s.run_backward(dx, y, dy, x);
  s.forward_batch = -1;  // the reserve is consumed
  s.unpack_add(TensorPointers{{dweight_ih, dweight_hh, dbias_ih, dbias_hh}}, stream);
}

}  // namespace enhanced::cuda
