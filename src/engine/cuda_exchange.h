// The CUDA engine's side of a data-parallel run (docs/distributed.md): one GPU a rank, and the
// gradient exchange over NCCL on the step's stream, by the rule the CPU's CpuGradientExchange
// follows too (steps/gradient_exchange_steps.h): the dense part all-reduced; the embedding's
// touched rows packed as ids and rows into buffers of a fixed bound per rank and all-gathered,
// then added in rank order; the step's loss share and correct count all-reduced with them. The NCCL calls are made outside any captured CUDA graph (see
// cuda_engine_step.cu: capture is per rank, NCCL needs every rank to capture alike).
//
// Host-compilable; without NCCL in the build (ENHANCED_HAVE_NCCL) the exchange refuses to start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "enhanced/communicator.h"
#include "kernels/cuda_check.h"
#include "kernels/row_exchange.cuh"

namespace enhanced {

// Whether this build has NCCL (multi-rank --device cuda), and its version ("2.28.9") or why not.
bool built_with_nccl();
std::string nccl_version();
// The error of a data-parallel CUDA run of `ranks` ranks in a build without NCCL.
std::string no_nccl_reason(int ranks);

// Makes this rank's GPU the current device: its local rank (its index among the ranks on its
// host) modulo the devices the host shows. Returns the device; *device_count its count.
int select_rank_device(const Communicator& communicator, int* device_count);

class CudaGradientExchange {
 public:
  // An NCCL communicator over the ranks of `communicator` on the current device (rank 0's
  // ncclUniqueId reaches the others through `communicator`; one rank needs no message).
  // vocab_size, dim: the embedding table's V and D. Throws Error without NCCL in the build.
  CudaGradientExchange(Communicator& communicator, int vocab_size, int dim, cudaStream_t stream);
  ~CudaGradientExchange();  // never throws; aborts the NCCL communicator when unwinding an error
  CudaGradientExchange(const CudaGradientExchange&) = delete;
  CudaGradientExchange& operator=(const CudaGradientExchange&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The most rows one rank's packed block holds: the collectives' size, the same on every rank.
  int64_t bound() const { return bound_; }
  // Room for blocks of `rows` rows (the caller gives every rank the same number and has zeroed
  // the gradient rows of rows() first: they are forgotten, *row_count() becomes 0). Asynchronous.
  void reserve(int64_t rows, cudaStream_t stream);
  // Changes whenever reserve reallocates (a captured graph holding the old buffers is stale).
  uint64_t generation() const { return generation_; }

  // After this rank's backward: its touched rows (rows[0 .. *count), device; count null: none)
  // of dembedding (V, D) packed into the send blocks, and zeroed there.
  void pack(float* dembedding, const int32_t* rows, const int32_t* count, cudaStream_t stream);
  // The collectives, one NCCL group on `stream`: dense (count floats) and sums (count doubles)
  // summed over the ranks in place; every rank's packed block gathered.
  void communicate(float* dense, size_t dense_count, double* sums, size_t sums_count, cudaStream_t stream);
  // After communicate: every rank's rows added into dembedding in rank order, and rows() /
  // row_count() = the sorted union of the ranks' rows (the optimizer's touched rows).
  void merge(float* dembedding, cudaStream_t stream);

  const int32_t* rows() const { return union_.rows(); }
  const int32_t* row_count() const { return union_.row_count(); }
  int64_t max_rows() const { return union_.capacity(); }

 private:
  struct Nccl;
  std::unique_ptr<Nccl> nccl_;  // released first, by the destructor's body (cuda_exchange.cpp)
  int rank_ = 0, size_ = 1;
  int32_t vocab_ = 0;
  int dim_ = 0;
  int64_t bound_ = 0;
  uint64_t generation_ = 0;
  cuda::DeviceBuffer<int32_t> send_ids_, gathered_ids_;      // (bound), (size, bound)
  cuda::DeviceBuffer<float> send_values_, gathered_values_;  // (bound, D), (size, bound, D)
  cuda::PackedRowUnion union_;
};

}  // namespace enhanced
