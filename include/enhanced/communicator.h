// The processes of a data-parallel run (docs/distributed.md) and the few collectives a training
// step needs, behind one interface: the trainer and the engine call these and never MPI itself.
// A run of one process (started without a launcher, or a build without MPI) has the null
// communicator: size 1, every collective a copy, no MPI call at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace enhanced {

// What a rank has given to collectives (payload bytes, not the transport's) and the wall time
// spent in them, summed since the start.
struct CommunicationTotals {
  uint64_t bytes = 0;
  double seconds = 0;
  int64_t calls = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  virtual int local_size() const { return 1; }  // ranks on this host
  virtual int local_rank() const { return 0; }  // this rank's index among them (a GPU per rank)
  const std::string& host() const;              // this host's name, for messages
  // "rank R (host)": how messages name this rank.
  std::string name() const;

  // data (count) = the sum over the ranks of their `data`; the same bits on every rank.
  virtual void sum(float* data, size_t count);
  virtual void sum(double* data, size_t count);
  // out (size() * count) = each rank's `mine` (count values, the same count on every rank), in rank order.
  virtual void gather(uint64_t* out, const uint64_t* mine, int count);
  // out = each rank's `mine` concatenated in rank order; counts (size()) = how many each gave.
  virtual void gather(std::vector<int32_t>& out, std::vector<int>& counts, const int32_t* mine, int count);
  // out = each rank's `mine` concatenated in rank order, rank r giving counts[r] (all ranks know them).
  virtual void gather(std::vector<float>& out, const std::vector<int>& counts, const float* mine);
  // Ends every rank of the job with `exit_code` (one process: this one).
  [[noreturn]] virtual void abort(int exit_code);

  // An error every rank has found alike (from collective results): `reporter` throws it as
  // Error, so that one line names it; the others wait for the abort that follows.
  [[noreturn]] void fail_as(int reporter, const std::string& message);

  const CommunicationTotals& totals() const { return totals_; }

 protected:
  CommunicationTotals totals_;
};

// The communicator of this process: MPI's world when a launcher (mpirun, srun) started it and
// the build has MPI; the null one otherwise. A job of several processes in a build without MPI
// is refused (each would train alone, all writing the same files). Finalizes MPI when destroyed.
std::unique_ptr<Communicator> make_communicator();

// Whether this build has MPI (ENHANCED_MPI): for --version and the tests.
bool built_with_mpi();

// A file's size and a 64-bit hash of its bytes, to prove the ranks read the same data.
struct FileFingerprint {
  uint64_t size = 0;
  uint64_t hash = 0;
};
FileFingerprint file_fingerprint(const std::string& path);

// A 64-bit hash of `count` floats' bits (the ranks' replicas of the parameters must agree).
uint64_t hash_floats(const float* data, size_t count);

}  // namespace enhanced
