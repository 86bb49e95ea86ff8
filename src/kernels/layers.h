// The CUDA twins of the CPU layers in src/layers/, one <layer>.cuh per layer, all included here
// for the model: the same function names in namespace enhanced::cuda and the same argument
// order (outputs first, then what forward saved, then inputs, weights and sizes), plus the
// stream / library handle last; but the optimizer, whose step is two calls (optimizer.cuh).
// Every pointer is device memory unless it says host. float32 only. Calls are asynchronous on
// the stream; errors throw enhanced::Error (see cuda_check.h).
//
// Host-compilable: tests include it.
#pragma once

#include "kernels/embedding_blend.cuh"
#include "kernels/lstm.cuh"
#include "kernels/maxpool.cuh"
#include "kernels/dense.cuh"
#include "kernels/softmax_xent.cuh"
#include "kernels/optimizer.cuh"
