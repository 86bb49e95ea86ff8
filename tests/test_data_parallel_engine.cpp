// The CPU engine's data-parallel path taken by one rank alone (EngineOptions::exchange_alone):
// the twin of CudaNccl's one-rank tests, on any machine.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace enhanced {
namespace {

// The CPU keeps one list of the gradient's rows, replaced by every backward and by the exchange;
// the CUDA twin (CudaNccl.GradientsBetweenStepsLeaveNoRowsBehind) keeps two.
TEST(DataParallelEngine, CpuGradientsBetweenStepsLeaveNoRowsBehind) {
  testing::expect_gradients_between_data_parallel_steps_leave_no_rows(Device::cpu, EngineOptions(4, 1));
}

}  // namespace
}  // namespace enhanced
