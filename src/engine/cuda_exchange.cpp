// One GPU a rank and the NCCL gradient exchange (engine/cuda_exchange.h).
#include "engine/cuda_exchange.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "enhanced/common.h"

namespace enhanced {

std::string no_nccl_reason(int ranks) {
  return cat("--device cuda with ", ranks, " rank(s) needs NCCL, and this build has none (configured with "
             "ENHANCED_NCCL=OFF, or nccl.h / libnccl.so.2 not found: set ENHANCED_NCCL_ROOT); --device cpu trains on "
             "several ranks without it");
}

#ifdef ENHANCED_HAVE_NCCL
bool built_with_nccl() { return true; }

std::string nccl_version() {
  int version = 0;
  ENHANCED_NCCL_CHECK(ncclGetVersion(&version));
  return cat(version / 10000, ".", version / 100 % 100, ".", version % 100);  // the >= 2.9 encoding
}

struct CudaGradientExchange::Nccl {
  ncclComm_t comm = nullptr;
  ~Nccl() {
    if (!comm) return;
    // Unwinding an error: a peer may never reach the collective this rank waits in, so abort
    // (which also ends this rank's outstanding NCCL kernels) rather than destroy (which waits).
    if (std::uncaught_exceptions() > 0) static_cast<void>(ncclCommAbort(comm));
    else static_cast<void>(ncclCommDestroy(comm));
  }
};
#else
bool built_with_nccl() { return false; }
std::string nccl_version() { return "none (this build has no NCCL: ENHANCED_NCCL=OFF or nccl.h / libnccl not found)"; }
struct CudaGradientExchange::Nccl {};
#endif

int select_rank_device(const Communicator& communicator, int* device_count) {
  int count = 0;
  ENHANCED_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 1) fail("no CUDA device for rank ", communicator.rank());
  const int device = communicator.local_rank() % count;
  ENHANCED_CUDA_CHECK(cudaSetDevice(device));
  if (device_count) *device_count = count;
  return device;
}

CudaGradientExchange::CudaGradientExchange(Communicator& communicator, int vocab_size, int dim, cudaStream_t stream)
    : nccl_(std::make_unique<Nccl>()), rank_(communicator.rank()), size_(communicator.size()),
      vocab_(vocab_size), dim_(dim) {
#ifdef ENHANCED_HAVE_NCCL
  // ncclUniqueId (128 bytes) travels as uint64 words: every rank gives its own, all take rank 0's.
  constexpr int kWords = (sizeof(ncclUniqueId) + sizeof(uint64_t) - 1) / sizeof(uint64_t);
  uint64_t mine[kWords] = {};
  ncclUniqueId id{};
  if (rank_ == 0) {
    ENHANCED_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(mine, &id, sizeof id);
  }
  std::vector<uint64_t> all(static_cast<size_t>(size_) * kWords);
  communicator.gather(all.data(), mine, kWords);
  std::memcpy(&id, all.data(), sizeof id);
  ENHANCED_NCCL_CHECK(ncclCommInitRank(&nccl_->comm, size_, id, rank_));
  reserve(1, stream);
#else
  static_cast<void>(stream);
  fail(no_nccl_reason(size_));
#endif
}

// The communicator goes first: freeing the device buffers below waits for the collectives that
// use them, so with a peer gone a rank would hang in cudaFree before the abort that ends them.
CudaGradientExchange::~CudaGradientExchange() { nccl_.reset(); }

void CudaGradientExchange::reserve(int64_t rows, cudaStream_t stream) {
  bound_ = std::clamp<int64_t>(rows, 1, vocab_);
  const size_t blocks = static_cast<size_t>(size_);
  const size_t ids = static_cast<size_t>(bound_), values = ids * static_cast<size_t>(dim_);
  send_ids_.resize(ids);
  gathered_ids_.resize(blocks * ids);
  send_values_.resize(values);
  gathered_values_.resize(blocks * values);
  union_.reserve(static_cast<int64_t>(blocks * ids), vocab_, stream);
  ++generation_;
}

void CudaGradientExchange::pack(float* dembedding, const int32_t* rows, const int32_t* count, cudaStream_t stream) {
  cuda::pack_touched_rows(send_ids_.data(), send_values_.data(), dembedding, rows, count, bound_, dim_, vocab_,
                          stream);
}

void CudaGradientExchange::communicate(float* dense, size_t dense_count, double* sums, size_t sums_count,
                                       cudaStream_t stream) {
#ifdef ENHANCED_HAVE_NCCL
  const size_t ids = static_cast<size_t>(bound_), values = ids * static_cast<size_t>(dim_);
  ncclComm_t comm = nccl_->comm;
  ENHANCED_NCCL_CHECK(ncclGroupStart());
  try {
    ENHANCED_NCCL_CHECK(ncclAllReduce(dense, dense, dense_count, ncclFloat, ncclSum, comm, stream));
    ENHANCED_NCCL_CHECK(ncclAllReduce(sums, sums, sums_count, ncclDouble, ncclSum, comm, stream));
    ENHANCED_NCCL_CHECK(ncclAllGather(send_ids_.data(), gathered_ids_.data(), ids, ncclInt32, comm, stream));
    ENHANCED_NCCL_CHECK(ncclAllGather(send_values_.data(), gathered_values_.data(), values, ncclFloat, comm, stream));
  } catch (...) {
    static_cast<void>(ncclGroupEnd());
    throw;
  }
  ENHANCED_NCCL_CHECK(ncclGroupEnd());
#else
  static_cast<void>(dense), static_cast<void>(dense_count), static_cast<void>(sums), static_cast<void>(sums_count);
  static_cast<void>(stream);
  fail("internal: the NCCL exchange in a build without NCCL");
#endif
}

void CudaGradientExchange::merge(float* dembedding, cudaStream_t stream) {
  const size_t ids = static_cast<size_t>(bound_), values = ids * static_cast<size_t>(dim_);
  for (int r = 0; r < size_; ++r)
    cuda::add_packed_rows(dembedding, gathered_ids_.data() + r * ids, gathered_values_.data() + r * values, bound_,
                          dim_, vocab_, stream);
  union_.run(gathered_ids_.data(), stream);
}

}  // namespace enhanced
