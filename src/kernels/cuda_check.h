// Error checking and RAII for the CUDA backend. Every CUDA, cuBLAS, cuDNN and NCCL call goes
// through one of the ENHANCED_*_CHECK macros, which throw enhanced::Error naming the call text,
// the file and line, and the library's own message (for cuDNN also cudnnGetLastErrorString, for
// NCCL ncclGetLastError). Owners of device memory, handles and descriptors free them in
// destructors that never throw. The NCCL member exists in builds with NCCL (ENHANCED_HAVE_NCCL).
//
// Host-compilable (no CUDA syntax): tests and host code may include it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#ifdef ENHANCED_HAVE_NCCL
#include <nccl.h>
#endif

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "enhanced/common.h"

namespace enhanced::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  fail(file, ":", line, ": CUDA error ", static_cast<int>(status), " (", cudaGetErrorName(status), ": ",
       cudaGetErrorString(status), ") in ", call);
}

inline const char* cublas_status_text(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  fail(file, ":", line, ": cuBLAS error ", static_cast<int>(status), " (", cublas_status_text(status), ") in ", call);
}

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  fail(file, ":", line, ": cuDNN error ", static_cast<int>(status), " (", cudnnGetErrorString(status), ") in ", call,
       detail[0] ? ": " : "", detail);
}

#ifdef ENHANCED_HAVE_NCCL
// NCCL's own message for the status, then its last error's detail (a peer's failure, a timeout).
[[noreturn]] inline void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const char* detail = ncclGetLastError(nullptr);
  fail(file, ":", line, ": NCCL error ", static_cast<int>(status), " (", ncclGetErrorString(status), ") in ", call,
       detail && detail[0] ? ": " : "", detail ? detail : "");
}
#endif

}  // namespace enhanced::cuda

#define ENHANCED_CUDA_CHECK(call)                                                                     \
  do {                                                                                                \
    const cudaError_t enhanced_status_ = (call);                                                      \
    if (enhanced_status_ != cudaSuccess)                                                              \
      ::enhanced::cuda::throw_cuda_error(enhanced_status_, #call, __FILE__, __LINE__);                \
  } while (0)

#define ENHANCED_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                                \
    const cublasStatus_t enhanced_status_ = (call);                                                   \
    if (enhanced_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::enhanced::cuda::throw_cublas_error(enhanced_status_, #call, __FILE__, __LINE__);              \
  } while (0)

#define ENHANCED_CUDNN_CHECK(call)                                                                    \
  do {                                                                                                \
    const cudnnStatus_t enhanced_status_ = (call);                                                    \
    if (enhanced_status_ != CUDNN_STATUS_SUCCESS)                                                     \
      ::enhanced::cuda::throw_cudnn_error(enhanced_status_, #call, __FILE__, __LINE__);               \
  } while (0)

#ifdef ENHANCED_HAVE_NCCL
#define ENHANCED_NCCL_CHECK(call)                                                                     \
  do {                                                                                                \
    const ncclResult_t enhanced_status_ = (call);                                                     \
    if (enhanced_status_ != ncclSuccess)                                                              \
      ::enhanced::cuda::throw_nccl_error(enhanced_status_, #call, __FILE__, __LINE__);                \
  } while (0)
#endif

// After a kernel launch: launch-configuration errors surface here, execution errors at the next
// synchronising call.
#define ENHANCED_CUDA_CHECK_LAUNCH() ENHANCED_CUDA_CHECK(cudaGetLastError())

namespace enhanced::cuda {

// Where a CudaBuffer's memory comes from: device memory, or page-locked host memory (the source
// and target of asynchronous copies).
struct DeviceMemory {
  static void allocate(void** memory, size_t bytes) { ENHANCED_CUDA_CHECK(cudaMalloc(memory, bytes)); }
  static void release(void* memory) noexcept { cudaFree(memory); }  // error ignored: never throws
};
struct PinnedMemory {
  static void allocate(void** memory, size_t bytes) { ENHANCED_CUDA_CHECK(cudaMallocHost(memory, bytes)); }
  static void release(void* memory) noexcept { cudaFreeHost(memory); }
};

// `count` elements of T in Memory; moves, never copies; frees without throwing.
template <class T, class Memory>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t count) { resize(count); }
  ~CudaBuffer() { release(); }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  CudaBuffer(CudaBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  // Discards the contents. Callers synchronise first when the old memory may still be in use.
  void resize(size_t count) {
    release();
    if (count == 0) return;
    void* memory = nullptr;
    Memory::allocate(&memory, count * sizeof(T));
    data_ = static_cast<T*>(memory);
    count_ = count;
  }
  // Grows (contents discarded) when fewer than `count` elements are held.
  void reserve(size_t count) {
    if (count > count_) resize(count);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  void release() noexcept {
    if (data_) Memory::release(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <class T>
using DeviceBuffer = CudaBuffer<T, DeviceMemory>;
template <class T>
using PinnedBuffer = CudaBuffer<T, PinnedMemory>;

// Owns a handle-like resource through a destroy function that returns a status (ignored).
template <class Handle, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(Handle handle) : handle_(handle) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  void reset() noexcept {
    if (handle_) static_cast<void>(Destroy(handle_));
    handle_ = Handle{};
  }
  Handle get() const { return handle_; }
  operator Handle() const { return handle_; }  // NOLINT: drop-in for the raw handle

 private:
  Handle handle_{};
};

using UniqueStream = UniqueHandle<cudaStream_t, cudaStreamDestroy>;
using UniqueCublas = UniqueHandle<cublasHandle_t, cublasDestroy>;
using UniqueCudnn = UniqueHandle<cudnnHandle_t, cudnnDestroy>;
using UniqueTensorDesc = UniqueHandle<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using UniqueRnnDesc = UniqueHandle<cudnnRNNDescriptor_t, cudnnDestroyRNNDescriptor>;
using UniqueRnnDataDesc = UniqueHandle<cudnnRNNDataDescriptor_t, cudnnDestroyRNNDataDescriptor>;
using UniqueDropoutDesc = UniqueHandle<cudnnDropoutDescriptor_t, cudnnDestroyDropoutDescriptor>;
using UniqueEvent = UniqueHandle<cudaEvent_t, cudaEventDestroy>;
using UniqueGraph = UniqueHandle<cudaGraph_t, cudaGraphDestroy>;
using UniqueGraphExec = UniqueHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

// An event for ordering only (no timing): the cheapest kind to record and wait on.
inline UniqueEvent make_event(bool timing = false) {
  cudaEvent_t event = nullptr;
  ENHANCED_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return UniqueEvent(event);
}

inline UniqueStream make_stream() {
  cudaStream_t stream = nullptr;
  ENHANCED_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return UniqueStream(stream);
}

// A cuBLAS handle bound to `stream`. FP32 GEMMs stay FP32 (CUBLAS_DEFAULT_MATH) unless tf32.
inline UniqueCublas make_cublas(cudaStream_t stream, bool tf32) {
  cublasHandle_t handle = nullptr;
  ENHANCED_CUBLAS_CHECK(cublasCreate(&handle));
  UniqueCublas owner(handle);
  ENHANCED_CUBLAS_CHECK(cublasSetStream(handle, stream));
  ENHANCED_CUBLAS_CHECK(cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  ENHANCED_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  return owner;
}

inline UniqueCudnn make_cudnn(cudaStream_t stream) {
  cudnnHandle_t handle = nullptr;
  ENHANCED_CUDNN_CHECK(cudnnCreate(&handle));
  UniqueCudnn owner(handle);
  ENHANCED_CUDNN_CHECK(cudnnSetStream(handle, stream));
  return owner;
}

// Host <-> device copies for tests and set-up (synchronous on `stream`).
template <class T>
void copy_to_device(T* device, const T* host, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream));
}
template <class T>
void copy_to_host(T* host, const T* device, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  ENHANCED_CUDA_CHECK(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  ENHANCED_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace enhanced::cuda
