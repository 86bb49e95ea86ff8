// The MPI communicator: MPI_COMM_WORLD, and a communicator of the ranks on this host (for the
// local rank and the default thread count). Each collective is timed and its payload counted.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "enhanced/common.h"
#include "enhanced/communicator.h"

namespace enhanced {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // The loader's prefetch thread never calls MPI: the main thread alone does.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      fail("MPI_Init failed on ", host());
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_);
    MPI_Comm_rank(local_, &local_rank_);
    MPI_Comm_size(local_, &local_size_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override {
    MPI_Comm_free(&local_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }

  void sum(float* data, size_t count) override { all_reduce(data, count, MPI_FLOAT, sizeof(float)); }
  void sum(double* data, size_t count) override { all_reduce(data, count, MPI_DOUBLE, sizeof(double)); }

  void gather(uint64_t* out, const uint64_t* mine, int count) override {
    const Timer timer(totals_, sizeof(uint64_t) * static_cast<size_t>(count));
    MPI_Allgather(mine, count, MPI_UINT64_T, out, count, MPI_UINT64_T, MPI_COMM_WORLD);
  }

  void gather(std::vector<int32_t>& out, std::vector<int>& counts, const int32_t* mine, int count) override {
    counts.resize(static_cast<size_t>(size_));
    {
      const Timer timer(totals_, sizeof(int));
      MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    }
    const std::vector<int> offsets = offsets_of(counts);
    out.resize(static_cast<size_t>(offsets.back() + counts.back()));
    const Timer timer(totals_, sizeof(int32_t) * static_cast<size_t>(count));
    MPI_Allgatherv(mine, count, MPI_INT32_T, out.data(), counts.data(), offsets.data(), MPI_INT32_T, MPI_COMM_WORLD);
  }

  void gather(std::vector<float>& out, const std::vector<int>& counts, const float* mine) override {
    const std::vector<int> offsets = offsets_of(counts);
    out.resize(static_cast<size_t>(offsets.back() + counts.back()));
    const int count = counts[static_cast<size_t>(rank_)];
    const Timer timer(totals_, sizeof(float) * static_cast<size_t>(count));
    MPI_Allgatherv(mine, count, MPI_FLOAT, out.data(), counts.data(), offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
  }

  void abort(int exit_code) override {
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  // Adds a collective's payload and wall time to the totals.
  struct Timer {
    Timer(CommunicationTotals& totals, size_t bytes) : totals_(totals), start_(std::chrono::steady_clock::now()) {
      totals_.bytes += bytes;
      totals_.calls += 1;
    }
    ~Timer() { totals_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
    CommunicationTotals& totals_;
    std::chrono::steady_clock::time_point start_;
  };

  static std::vector<int> offsets_of(const std::vector<int>& counts) {
    std::vector<int> offsets(counts.size(), 0);
    std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), 0);
    return offsets;
  }

  // MPI counts are ints: a larger buffer goes in pieces (the same pieces on every rank).
  void all_reduce(void* data, size_t count, MPI_Datatype type, size_t element_bytes) {
    const Timer timer(totals_, element_bytes * count);
    constexpr size_t kPiece = size_t{1} << 30;
    for (size_t done = 0; done < count; done += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, count - done));
      MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + done * element_bytes, piece, type, MPI_SUM, MPI_COMM_WORLD);
    }
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Comm local_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace enhanced
