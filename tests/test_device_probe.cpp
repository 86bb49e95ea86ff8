// The device line's wording when there is no GPU to use: "no NVIDIA GPU" where the machine has
// no NVIDIA device at all (judged from /dev and /proc, never from the CUDA runtime, whose text
// there is "driver version is insufficient"), the runtime's reason where a device exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "enhanced/device.h"
#include "enhanced/engine.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;

class NvidiaDevicePresent : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(ENHANCED_TEST_TMP) / ("device-probe." + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "dev");
    fs::create_directories(root_ / "proc/driver");
    std::ofstream(root_ / "dev/null").put('\n');
  }
  void TearDown() override { fs::remove_all(root_); }
  void touch(const std::string& file) { std::ofstream(root_ / file).put('\n'); }
  fs::path root_;
};

TEST_F(NvidiaDevicePresent, NoneWithoutTheDriversFiles) {
  EXPECT_FALSE(nvidia_device_present(root_));
  EXPECT_FALSE(nvidia_device_present(root_ / "missing"));  // no /dev at all
}

TEST_F(NvidiaDevicePresent, ADeviceNodeTheDriverOrWslsGpuCount) {
  for (const char* file : {"dev/nvidia0", "dev/nvidiactl", "dev/dxg"}) {
    touch(file);
    EXPECT_TRUE(nvidia_device_present(root_)) << file;
    fs::remove(root_ / file);
  }
  fs::create_directories(root_ / "proc/driver/nvidia");
  EXPECT_TRUE(nvidia_device_present(root_));
}

TEST(NoGpuText, SaysNoNvidiaGpuOrTheRuntimesReason) {
  EXPECT_EQ(no_gpu_text(kNoNvidiaGpu), "no NVIDIA GPU");
  EXPECT_EQ(no_gpu_text("cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version"),
            "no usable GPU: cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version");
}

// This machine's reason: "no NVIDIA GPU" exactly when it has no NVIDIA device.
TEST(NoGpuText, ThisMachinesReasonFollowsItsDevices) {
  const std::string reason = cuda_unavailable_reason();
  EXPECT_EQ(reason == kNoNvidiaGpu, !nvidia_device_present()) << reason;
}

}  // namespace
}  // namespace enhanced
