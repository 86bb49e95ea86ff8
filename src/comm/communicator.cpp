// The null communicator (one process), the launcher check, and the hashes the ranks compare.
#include "enhanced/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "enhanced/common.h"

namespace enhanced {

#ifdef ENHANCED_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator();  // comm/mpi_communicator.cpp
bool built_with_mpi() { return true; }
#else
bool built_with_mpi() { return false; }
#endif

const std::string& Communicator::host() const {
  static const std::string name = [] {
    char buffer[256] = {};
    if (::gethostname(buffer, sizeof buffer - 1) != 0) return std::string("unknown host");
    return std::string(buffer);
  }();
  return name;
}

std::string Communicator::name() const { return cat("rank ", rank(), " (", host(), ")"); }

void Communicator::sum(float*, size_t) {}
void Communicator::sum(double*, size_t) {}

void Communicator::gather(uint64_t* out, const uint64_t* mine, int count) { std::copy_n(mine, count, out); }

void Communicator::gather(std::vector<int32_t>& out, std::vector<int>& counts, const int32_t* mine, int count) {
  out.assign(mine, mine + count);
  counts.assign(1, count);
}

void Communicator::gather(std::vector<float>& out, const std::vector<int>& counts, const float* mine) {
  out.assign(mine, mine + counts.at(0));
}

void Communicator::abort(int exit_code) {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

void Communicator::fail_as(int reporter, const std::string& message) {
  if (rank() == reporter) throw Error(message);
  // The reporter's error aborts the job; a rank still here after a minute ends it itself.
  ::sleep(60);
  abort(1);
  std::_Exit(1);  // abort does not return; the compiler cannot see that through the virtual call
}

namespace {

// A launcher's environment: Open MPI's mpirun, a PMIx server (srun --mpi=pmix, prterun), PMI-1/2
// (MPICH's hydra, srun --mpi=pmi2). Without one the process is alone and never calls MPI, which
// would otherwise start a singleton (about half a second, and nothing to talk to).
const char* launcher_size() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"})
    if (const char* value = std::getenv(variable)) return value;
  return nullptr;
}

}  // namespace

std::unique_ptr<Communicator> make_communicator() {
  const char* launched = launcher_size();
  if (!launched) return std::make_unique<Communicator>();
#ifdef ENHANCED_HAVE_MPI
  return make_mpi_communicator();
#else
  // PMIX_RANK holds a rank, not a size: only a size above 1 proves several processes.
  if (std::getenv("PMIX_RANK") == launched || std::atoll(launched) <= 1) return std::make_unique<Communicator>();
  fail("started by an MPI launcher as one of ", launched, " processes, but this build has no MPI (configure with "
       "ENHANCED_MPI=ON and libopenmpi-dev installed): each process would train alone into the same files");
#endif
}

FileFingerprint file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open it to compare it across the ranks");
  FileFingerprint out;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over 8-byte words, the tail zero-padded
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    std::fill(buffer.begin() + static_cast<std::ptrdiff_t>(got), buffer.begin() + static_cast<std::ptrdiff_t>((got + 7) / 8 * 8), '\0');
    for (size_t i = 0; i < got; i += 8) {
      uint64_t word;
      std::memcpy(&word, buffer.data() + i, 8);
      hash = (hash ^ word) * 1099511628211ull;
    }
    out.size += got;
  }
  if (in.bad()) fail(path, ": cannot read it to compare it across the ranks");
  out.hash = hash ^ out.size;
  return out;
}

uint64_t hash_floats(const float* data, size_t count) {
  // Four independent FNV-1a lanes (a pass over a large table is memory bound, not hash bound).
  uint64_t lanes[4] = {1469598103934665603ull, 2, 3, 4};
  size_t i = 0;
  for (; i + 4 <= count; i += 4)
    for (int lane = 0; lane < 4; ++lane) {
      uint32_t bits;
      std::memcpy(&bits, data + i + lane, 4);
      lanes[lane] = (lanes[lane] ^ bits) * 1099511628211ull;
    }
  for (; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    lanes[0] = (lanes[0] ^ bits) * 1099511628211ull;
  }
  return lanes[0] ^ (lanes[1] * 31) ^ (lanes[2] * 961) ^ (lanes[3] * 29791) ^ count;
}

}  // namespace enhanced
