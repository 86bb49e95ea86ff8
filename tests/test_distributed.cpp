// Data-parallel training (docs/distributed.md) as users run it: enhanced-train under
// `mpirun --allow-run-as-root --oversubscribe -np N` against the same command in one process.
// Every test that launches ranks is SKIPPED, with the reason, in a build without MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "app_runner.h"
#include "enhanced/checkpoint.h"
#include "enhanced/common.h"
#include "enhanced/demo.h"
#include "enhanced/train_options.h"
#include "train/run_options.h"

namespace enhanced {
namespace {

namespace fs = std::filesystem;
using testing::AppResult;
using testing::run_command;

#ifdef ENHANCED_HAVE_MPI
#define SKIP_WITHOUT_MPI()
#else
#define SKIP_WITHOUT_MPI() GTEST_SKIP() << "this build has no MPI (ENHANCED_MPI=OFF, or libopenmpi-dev not installed)"
#define ENHANCED_MPIEXEC "mpirun"
#endif

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(ENHANCED_TEST_TMP) / "distributed" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// enhanced-train with `flags`, alone (ranks 1: no launcher at all) or as `ranks` MPI ranks.
AppResult train(int ranks, const std::string& flags) {
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-train " + flags;
  if (ranks == 1) return run_command(app);
  return run_command(cat(ENHANCED_MPIEXEC, " --allow-run-as-root --oversubscribe -np ", ranks, " ", app));
}

// The largest |a - b| over every parameter of two checkpoints of the same model, and the
// largest |a| (the scale of the weights' float32 rounding).
struct Difference {
  double worst = 0;
  double largest = 0;
};

Difference max_difference(const fs::path& a, const fs::path& b) {
  const ParameterBuffer<float> x = load_checkpoint(a.string()), y = load_checkpoint(b.string());
  EXPECT_EQ(x.size(), y.size());
  Difference out;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    out.worst = std::max(out.worst, std::abs(static_cast<double>(x.data[i]) - y.data[i]));
    out.largest = std::max(out.largest, std::abs(static_cast<double>(x.data[i])));
  }
  return out;
}

// How far N ranks may end from one process after `steps` steps. The two compute the same
// arithmetic on the same weights except for the order of float32 additions: each gradient
// element is a sum over the batch's samples or positions, which the ranks form as partial sums
// added in rank order (the loss's denominators are the whole batch's, computed as one process
// does). Reordering a sum moves it by a few units in the last place of its terms' scale; the
// update inherits that relative change, far below half an ulp of a weight at these learning
// rates, and each step rounds every weight once (half an ulp). So each step may put the two
// runs at most an ulp or two apart, and over S steps (too few for the differences to grow by
// feedback through later gradients) they stay within S * 2 ulps of the largest weight:
// S * 2 * 2^-23 * max|w|.
double tolerance(int steps, double largest_weight) { return steps * 2.0 * std::ldexp(1.0, -23) * largest_weight; }

// The small demo set (80 samples, T = 16) and a tiny model; batches of 11 split unevenly over 2
// and 3 ranks (6 + 5, 4 + 4 + 3), the epoch's last batch of 3 too.
struct RunSetup {
  fs::path dir;
  std::string flags;
};

RunSetup setup(const std::string& name) {
  const fs::path dir = scratch(name);
  const DemoFiles files = testing::write_small_demo(dir / "data");
  return {dir, "--data " + files.train_ebin + " --valid " + files.valid_ebin + " --pretrained " + files.embeddings +
                   " --embedding-dim 8 --hidden 6 --batch-size 11 --threads 1 --quiet --seed 5 --log-every 5 "};
}

struct Case {
  const char* name;
  const char* flags;
};

TEST(Distributed, TwentyStepsMatchOneProcess) {
  SKIP_WITHOUT_MPI();
  const Case cases[] = {
      {"sgd-momentum-dense-feature", "--optimizer sgd --lr 0.1 --momentum 0.9"},
      {"sgd-momentum-lazy-time", "--optimizer sgd --lr 0.1 --momentum 0.9 --lazy-embedding-updates --pool time"},
      {"sgd-momentum-dense-time-weighted-clipped",
       "--optimizer sgd --lr 0.1 --momentum 0.9 --pool time --class-weights balanced --clip-norm 0.05"},
      {"sgd-momentum-lazy-feature", "--optimizer sgd --lr 0.1 --momentum 0.9 --lazy-embedding-updates"},
      {"adam-dense-feature", "--optimizer adam --lr 0.01"},
      {"adam-lazy-time", "--optimizer adam --lr 0.01 --lazy-embedding-updates --pool time"},
      {"adam-dense-time", "--optimizer adam --lr 0.01 --pool time"},
      {"adam-lazy-feature-weighted-clipped",
       "--optimizer adam --lr 0.01 --lazy-embedding-updates --class-weights balanced --clip-norm 0.05"},
  };
  const RunSetup s = setup("match");
  for (const Case& c : cases) {
    const std::string flags = s.flags + c.flags + " --steps 20 --valid-every 10 ";
    const fs::path one = s.dir / c.name / "one";
    const AppResult alone = train(1, flags + "--out " + one.string());
    ASSERT_EQ(alone.exit_code, 0) << c.name << "\n" << alone.output;
    for (const int ranks : {2, 3}) {
      const fs::path out = s.dir / c.name / std::to_string(ranks);
      const AppResult run = train(ranks, flags + "--out " + out.string());
      ASSERT_EQ(run.exit_code, 0) << c.name << " on " << ranks << " ranks\n" << run.output;
      const Difference d = max_difference(one / "last.safetensors", out / "last.safetensors");
      EXPECT_LE(d.worst, tolerance(20, d.largest)) << c.name << " on " << ranks << " ranks";
      EXPECT_GT(d.largest, 0.0);
    }
  }
}

// The same command with the same N gives the same bits; a run of 2 ranks resumed with 3 ends
// where one process ends (within the tolerance), and a rerun of that resume gives its bits again.
TEST(Distributed, RerunsAreBitIdenticalAndResumeTakesAnyN) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("rerun");
  const std::string flags = s.flags + "--optimizer adam --lr 0.01 --lazy-embedding-updates --pool time ";
  for (const char* run : {"a", "b"}) {
    const AppResult r = train(3, flags + "--steps 20 --out " + (s.dir / run).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_EQ(testing::read_bytes(s.dir / "a" / "last.safetensors"), testing::read_bytes(s.dir / "b" / "last.safetensors"));
  EXPECT_EQ(testing::read_bytes(s.dir / "a" / "optimizer.safetensors"),
            testing::read_bytes(s.dir / "b" / "optimizer.safetensors"));
  const AppResult one = train(1, flags + "--steps 20 --out " + (s.dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // Rank 0 alone writes the metrics: the lines of one process, none twice.
  const auto lines = [](const fs::path& path) {
    const std::string text = testing::read_bytes(path);
    return std::count(text.begin(), text.end(), '\n');
  };
  EXPECT_EQ(lines(s.dir / "a" / "metrics.jsonl"), lines(s.dir / "one" / "metrics.jsonl"));
  for (const char* run : {"c", "d"}) {
    const std::string out = (s.dir / run).string();
    const AppResult first = train(2, flags + "--steps 10 --out " + out);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const AppResult resumed = train(3, "--resume --steps 20 --quiet --out " + out);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resuming"), std::string::npos) << resumed.output;
  }
  EXPECT_EQ(testing::read_bytes(s.dir / "c" / "last.safetensors"), testing::read_bytes(s.dir / "d" / "last.safetensors"));
  const Difference d = max_difference(s.dir / "one" / "last.safetensors", s.dir / "c" / "last.safetensors");
  EXPECT_LE(d.worst, tolerance(20, d.largest));
}

// Batches of 2 over 3 ranks: the third computes nothing and still takes part in every exchange
// (and in the sharded validation); the weights are those of one process.
TEST(Distributed, ARankWithoutSamplesInItsPartStillTrains) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("empty-part");
  std::string flags = s.flags + "--optimizer adam --lr 0.01 --steps 20 --valid-every 10 ";
  flags.replace(flags.find("--batch-size 11"), 15, "--batch-size 2");
  const AppResult one = train(1, flags + "--out " + (s.dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const AppResult three = train(3, flags + "--out " + (s.dir / "three").string());
  ASSERT_EQ(three.exit_code, 0) << three.output;
  const Difference d = max_difference(s.dir / "one" / "last.safetensors", s.dir / "three" / "last.safetensors");
  EXPECT_LE(d.worst, tolerance(20, d.largest));
}

// A rank whose data file differs from rank 0's: one line naming that rank, its host and the
// file, and the whole job ends with a non-zero exit, having written no checkpoint.
TEST(Distributed, ADifferentFileOnOneRankIsOneError) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("bad-file");
  DemoOptions other;
  other.train_samples = 81;  // another file of the same kind
  other.valid_samples = 24;
  other.test_samples = 24;
  other.seq_len = 16;
  other.vocab_size = 128;
  other.embedding_dim = 8;
  const DemoFiles files = write_demo((s.dir / "other").string(), other);
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-train ";
  const std::string flags = "--pretrained " + (s.dir / "data" / "emb.bin").string() +
                            " --embedding-dim 8 --hidden 6 --batch-size 11 --threads 1 --quiet --steps 5 --out " +
                            (s.dir / "run").string();
  // MPMD: rank 0 reads the demo's training set, rank 1 the other one.
  const AppResult r = run_command(cat(ENHANCED_MPIEXEC, " --allow-run-as-root --oversubscribe -np 1 ", app, flags,
                                      " --data ", (s.dir / "data" / "train.ebin").string(), " : -np 1 ", app, flags,
                                      " --data ", files.train_ebin));
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string line = "error: rank 1 (";
  ASSERT_NE(r.output.find(line), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(line), r.output.rfind(line)) << "one error line\n" << r.output;
  EXPECT_NE(r.output.find(files.train_ebin + " is not the file rank 0 reads"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(s.dir / "run" / "last.safetensors"));
}

// What check_same_run compares needs no MPI: every recorded option but the data paths (compared
// by content) and the thread count (per host), then --check-every, --device and --resume; a flag
// reads "on" when it moves its default.
TEST(Distributed, TheRanksCompareEveryRecordedOptionButThePerRankOnes) {
  TrainOptions o;
  o.data_path = "a.ebin";
  o.valid_path = "v.ebin";
  o.engine.threads = 3;
  o.shuffle = false;
  o.steps = 30;
  o.class_weights = "balanced";
  const std::vector<std::pair<std::string, std::string>> shared = shared_options(o);
  const auto value_of = [&](const std::string& flag) {
    for (const auto& [name, value] : shared)
      if (name == flag) return value;
    return std::string("<absent>");
  };
  EXPECT_EQ(value_of("--steps"), "30");
  EXPECT_EQ(value_of("--no-shuffle"), "on");
  EXPECT_EQ(value_of("--drop-last"), "off");
  EXPECT_EQ(value_of("--class-weights"), "balanced");
  EXPECT_EQ(value_of("--resume"), "off");
  for (const char* per_rank : {"--data", "--valid", "--threads"}) EXPECT_EQ(value_of(per_rank), "<absent>") << per_rank;
  // The recorded fields but the 3 per-rank ones, label_names (recorded only when there are names,
  // but always compared), and the 3 not recorded.
  EXPECT_EQ(value_of("--label-names"), "[]");
  EXPECT_EQ(shared.size(), nlohmann::json::parse(run_options_text(o)).size() - 3 + 1 + 3);
}

// Two ranks started apart (MPMD: `mpirun -np 1 A : -np 1 B`), under a timeout that a deadlock
// would run into; how long the job took.
struct TimedResult {
  AppResult result;
  double seconds = 0;
};

TimedResult train_apart(const std::string& rank0_flags, const std::string& rank1_flags) {
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-train ";
  const auto start = std::chrono::steady_clock::now();
  TimedResult out;
  out.result = run_command(cat("timeout 120 ", ENHANCED_MPIEXEC, " --allow-run-as-root --oversubscribe -np 1 ", app,
                               rank0_flags, " : -np 1 ", app, rank1_flags));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// The job ends within a bounded time (the ranks' abort, not the timeout nor fail_as's minute)
// with a non-zero exit and rank 1's one line naming `what`, and no checkpoint.
void expect_rank_one_refused(const TimedResult& r, const std::string& what, const fs::path& out) {
  EXPECT_NE(r.result.exit_code, 0) << r.result.output;
  EXPECT_LT(r.seconds, 45.0) << r.result.output;
  const std::string line = "error: rank 1 (";
  const size_t at = r.result.output.find(line);
  ASSERT_NE(at, std::string::npos) << r.result.output;
  EXPECT_EQ(at, r.result.output.rfind(line)) << "one error line\n" << r.result.output;
  const size_t end = r.result.output.find('\n', at);
  EXPECT_NE(r.result.output.substr(at, end - at).find(what), std::string::npos) << r.result.output;
  EXPECT_FALSE(fs::exists(out)) << "a run that fails before writing anything leaves no directory\n" << r.result.output;
}

// Ranks given different options stop at the start, naming the first option that differs and
// both values: a different length would deadlock, a different model or batch end in MPI's
// truncation error, a different data order or loss train without a word.
TEST(Distributed, RanksWithDifferentOptionsAreOneError) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("options-differ");
  const std::string rank0 = s.flags + "--steps 30 ";
  std::string other_model = rank0;
  other_model.replace(other_model.find("--hidden 6"), 10, "--hidden 7");
  const struct {
    std::string rank1_flags;
    const char* says;
  } cases[] = {
      {s.flags + "--steps 60 ", "--steps is 60, rank 0 has 30"},
      {other_model, "--hidden is 7, rank 0 has 6"},
      {rank0 + "--no-shuffle ", "--no-shuffle is on, rank 0 has off"},
      {rank0 + "--class-weights balanced ", "--class-weights is balanced, rank 0 has (none)"},
  };
  int index = 0;
  for (const auto& c : cases) {
    const fs::path out = s.dir / std::to_string(index++);
    const std::string to = "--out " + out.string();
    expect_rank_one_refused(train_apart(rank0 + to, c.rank1_flags + to), c.says, out);
  }
}

// A rank that resumes another state than rank 0's (a stale state file on its host) stops at the
// start, naming the two positions, or the file's bytes when the positions agree.
TEST(Distributed, RanksResumingDifferentStatesAreOneError) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("state-differs");
  const fs::path ahead = s.dir / "ahead", behind = s.dir / "behind";
  ASSERT_EQ(train(1, s.flags + "--steps 10 --out " + ahead.string()).exit_code, 0);
  ASSERT_EQ(train(1, s.flags + "--steps 5 --out " + behind.string()).exit_code, 0);
  const std::string last = testing::read_bytes(ahead / "last.safetensors");
  // Both resumed to the same length: the merged options agree, the positions do not.
  const TimedResult r = train_apart("--resume --steps 30 --quiet --out " + ahead.string(),
                                    "--resume --steps 30 --quiet --out " + behind.string());
  EXPECT_NE(r.result.exit_code, 0) << r.result.output;
  EXPECT_LT(r.seconds, 45.0) << r.result.output;
  EXPECT_NE(r.result.output.find("the resumed run's position is step 5 (epoch 1, batch 5), rank 0 has step 10"),
            std::string::npos) << r.result.output;
  EXPECT_NE(r.result.output.find("error: rank 1 ("), std::string::npos) << r.result.output;
  EXPECT_EQ(testing::read_bytes(ahead / "last.safetensors"), last) << "the refused run wrote nothing";
  // The same position from other bytes: the last float's lowest mantissa byte changed.
  const fs::path other = s.dir / "other";
  fs::copy(ahead, other);
  std::string state = testing::read_bytes(other / "optimizer.safetensors");
  state[state.size() - 4] ^= 1;
  std::ofstream(other / "optimizer.safetensors", std::ios::binary | std::ios::trunc) << state;
  const TimedResult same_step = train_apart("--resume --steps 30 --quiet --out " + ahead.string(),
                                            "--resume --steps 30 --quiet --out " + other.string());
  EXPECT_NE(same_step.result.exit_code, 0) << same_step.result.output;
  EXPECT_NE(same_step.result.output.find("error: rank 1 ("), std::string::npos) << same_step.result.output;
  EXPECT_NE(same_step.result.output.find("--out's optimizer.safetensors is "), std::string::npos) << same_step.result.output;
}

// A run that diverges stops every rank at the same step (the ranks' sums are the same), and the
// one line that says so comes from rank 0 alone, whether a non-finite loss (exit 3) or a
// non-finite gradient with a finite loss (exit 1, reported through fail_as) stopped it.
TEST(Distributed, DivergenceIsReportedOnceByRankZero) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("diverge");
  const AppResult r = train(2, s.flags + "--optimizer sgd --lr 1e38 --epochs 3 --out " + (s.dir / "run").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  // "error: non-finite loss ..." or "error: rank 0 (host): non-finite gradient ...".
  const bool loss = r.output.find("error: non-finite loss") != std::string::npos;
  const bool gradient = r.output.find("error: rank 0 (") != std::string::npos &&
                        r.output.find("non-finite gradient") != std::string::npos;
  EXPECT_TRUE(loss || gradient) << r.output;
  EXPECT_EQ(r.output.find("non-finite"), r.output.rfind("non-finite")) << "one error line\n" << r.output;
  EXPECT_EQ(r.output.find("error: rank 1"), std::string::npos) << r.output;
}

// kill -9 of one rank brings the whole job down within a bounded time (measured: about a
// second here; 30 s is the bound asserted), the last checkpoint stays loadable, and --resume
// with the same N ends with the bits of the uninterrupted run.
TEST(Distributed, AKilledRankEndsTheJobAndTheRunResumes) {
  SKIP_WITHOUT_MPI();
  const RunSetup s = setup("kill");
  const std::string flags = s.flags + "--optimizer sgd --lr 0.05 --momentum 0.9 --checkpoint-every 10 --steps 300 ";
  const AppResult whole = train(2, flags + "--out " + (s.dir / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const fs::path run = s.dir / "killed", pid = s.dir / "rank1.pid";
  const std::string app = std::string(ENHANCED_APP_DIR) + "/enhanced-train " + flags + "--out " + run.string();
  // Rank 1 records its pid (exec keeps it); the script kills it once a checkpoint exists and
  // reports how long the job took to end after the kill.
  const std::string script = cat(
      "(", ENHANCED_MPIEXEC, " --allow-run-as-root --oversubscribe -np 1 ", app, " : -np 1 sh -c 'echo $$ > ", pid.string(),
      "; exec ", app, "' > ", (s.dir / "job.log").string(), " 2>&1; echo $? > ", (s.dir / "job.exit").string(), ") & job=$!; ",
      "for i in $(seq 600); do [ -f ", (run / "optimizer.safetensors").string(), " ] && [ -f ", pid.string(),
      " ] && break; sleep 0.05; done; kill -9 $(cat ", pid.string(), "); start=$(date +%s%N); wait $job; ",
      "echo seconds $(( ($(date +%s%N) - start) / 1000000 ))ms");
  const AppResult killed = run_command(script);
  std::printf("job down after the kill: %s", killed.output.c_str());
  const std::string exit_text = testing::read_bytes(s.dir / "job.exit");
  EXPECT_NE(std::atoi(exit_text.c_str()), 0) << testing::read_bytes(s.dir / "job.log");
  const size_t at = killed.output.find("seconds ");
  ASSERT_NE(at, std::string::npos) << killed.output;
  EXPECT_LT(std::atol(killed.output.c_str() + at + 8), 30000) << killed.output;
  EXPECT_GT(load_checkpoint((run / "last.safetensors").string()).size(), 0u);
  const AppResult resumed = train(2, "--resume --quiet --out " + run.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(testing::read_bytes(run / "last.safetensors"), testing::read_bytes(s.dir / "whole" / "last.safetensors"));
}

}  // namespace
}  // namespace enhanced
