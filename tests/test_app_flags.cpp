// Every numeric flag of every app is checked by one of the rules in apps/app.h before any
// work: each bad value is one line "error: --flag must be ..., got X" and exit 1, never CLI11's
// range with a 300-digit bound, a crash or an unbounded allocation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app_runner.h"
#include "data_test_util.h"
#include "app.h"

namespace enhanced {
namespace {

using test_util::line_starting;
using testing::run_app;

struct FlagCase {
  std::string app, arguments, line;  // line: the whole "error: " line of the output
};

void expect_refused(const FlagCase& c) {
  const auto result = run_app(c.app, c.arguments);
  EXPECT_EQ(result.exit_code, 1) << c.app << " " << c.arguments << ": " << result.output;
  EXPECT_EQ(line_starting(result.output, "error: "), c.line) << c.app << " " << c.arguments;
}

const std::string kTrain = "--data x.ebin --out " ENHANCED_TEST_TMP "/flags-run --device cpu ";

TEST(AppFlags, TrainRefusesEachBadNumberWithASentence) {
  const std::vector<FlagCase> cases = {
      {"enhanced-train", kTrain + "--epochs 0", "error: --epochs must be at least 1, got 0"},
      {"enhanced-train", kTrain + "--epochs 1.5", "error: --epochs must be a whole number at least 1, got '1.5'"},
      {"enhanced-train", kTrain + "--steps ten", "error: --steps must be a whole number at least 1, got 'ten'"},
      {"enhanced-train", kTrain + "--batch-size 0", "error: --batch-size must be at least 1, got 0"},
      {"enhanced-train", kTrain + "--hidden 3000000000", "error: --hidden must be in [1, 16777216], got 3000000000"},
      // Wider would overflow the layers' int row sizes before the memory check could refuse it.
      {"enhanced-train", kTrain + "--hidden 268435456", "error: --hidden must be in [1, 16777216], got 268435456"},
      {"enhanced-train", kTrain + "--num-labels 2147483647",
       "error: --num-labels must be in [1, 16777216], got 2147483647"},
      {"enhanced-train", kTrain + "--embedding-dim 16777217",
       "error: --embedding-dim must be in [1, 16777216], got 16777217"},
      {"enhanced-train", kTrain + "--embedding-dim -2", "error: --embedding-dim must be in [1, 16777216], got -2"},
      {"enhanced-train", kTrain + "--vocab-size 0", "error: --vocab-size must be at least 1, got 0"},
      {"enhanced-train", kTrain + "--num-labels 0", "error: --num-labels must be in [1, 16777216], got 0"},
      {"enhanced-train", kTrain + "--lr 0", "error: --lr must be greater than 0, got 0"},
      {"enhanced-train", kTrain + "--lr nan", "error: --lr must be a finite number greater than 0, got 'nan'"},
      {"enhanced-train", kTrain + "--momentum 1", "error: --momentum must be in [0, 1), got 1"},
      {"enhanced-train", kTrain + "--beta1 nan", "error: --beta1 must be a finite number in [0, 1), got 'nan'"},
      {"enhanced-train", kTrain + "--beta2 -0.5", "error: --beta2 must be in [0, 1), got -0.5"},
      {"enhanced-train", kTrain + "--epsilon 0", "error: --epsilon must be greater than 0, got 0"},
      {"enhanced-train", kTrain + "--clip-norm -1", "error: --clip-norm must be at least 0, got -1"},
      {"enhanced-train", kTrain + "--clip-norm inf", "error: --clip-norm must be a finite number at least 0, got 'inf'"},
      {"enhanced-train", kTrain + "--threads -1", "error: --threads must be in [0, 4096], got -1"},
      {"enhanced-train", kTrain + "--threads 2147483647", "error: --threads must be in [0, 4096], got 2147483647"},
      // A float flag's value must fit a float: 1e300 would be recorded as inf, 1e-50 would be 0.
      {"enhanced-train", kTrain + "--clip-norm 1e300",
       "error: --clip-norm must be at least 0 and fit a float (at most 3.40282e+38), got 1e300"},
      {"enhanced-train", kTrain + "--weight-decay -1e39",
       "error: --weight-decay must be at least 0 and fit a float (at most 3.40282e+38), got -1e39"},
      {"enhanced-train", kTrain + "--lr 1e-50", "error: --lr must be greater than 0, got 1e-50"},
      {"enhanced-train", kTrain + "--beta2 0.99999999", "error: --beta2 must be in [0, 1), got 0.99999999"},
      {"enhanced-train", kTrain + "--log-every 0", "error: --log-every must be at least 1, got 0"},
      // A factor that lowers the rate: 1 would never reduce it.
      {"enhanced-train", kTrain + "--lr-factor 1", "error: --lr-factor must be in (0, 1), got 1"},
      // An int64_t flag takes more than an int, and says so beyond its own type.
      {"enhanced-train", kTrain + "--steps 3000000000", "error: x.ebin: cannot open: No such file or directory"},
      {"enhanced-train", kTrain + "--steps 9223372036854775808",
       "error: --steps must be at least 1 and at most 9223372036854775807, got 9223372036854775808"},
      {"enhanced-train", kTrain + "--checkpoint-every -1", "error: --checkpoint-every must be at least 0, got -1"},
  };
  for (const FlagCase& c : cases) expect_refused(c);
}

TEST(AppFlags, EvalAndDataRefuseEachBadNumberWithASentence) {
  const std::string eval = "--data x.ebin --checkpoint x.safetensors --device cpu ";
  const std::vector<FlagCase> cases = {
      {"enhanced-eval", eval + "--batch-size 0", "error: --batch-size must be at least 1, got 0"},
      {"enhanced-eval", eval + "--threads -3", "error: --threads must be in [0, 4096], got -3"},
      {"enhanced-eval", eval + "--threads 2147483647", "error: --threads must be in [0, 4096], got 2147483647"},
      {"enhanced-predict", "--data x.ebin --checkpoint x.safetensors --threads 4097",
       "error: --threads must be in [0, 4096], got 4097"},
      {"enhanced-data", "convert a.jsonl b.ebin --seq-len 0", "error: --seq-len must be at least 1, got 0"},
      {"enhanced-data", "demo " ENHANCED_TEST_TMP "/flags-demo --train 0", "error: --train must be at least 1, got 0"},
      {"enhanced-data", "demo " ENHANCED_TEST_TMP "/flags-demo -T 1", "error: --seq-len must be at least 2, got 1"},
      {"enhanced-data", "demo " ENHANCED_TEST_TMP "/flags-demo --dim x", "error: --dim must be a whole number at least 1, got 'x'"},
      {"enhanced-data", "split a.ebin p --fractions 0.5,x", "error: --fractions must be a finite number greater than 0, got 'x'"},
      {"enhanced-predict", "--data x.ebin --checkpoint x.safetensors --top-k 0", "error: --top-k must be at least 1, got 0"},
      {"enhanced-predict", "--data x.ebin --checkpoint x.safetensors --batch-size 0",
       "error: --batch-size must be at least 1, got 0"},
      {"enhanced-predict", "--data x.ebin --checkpoint x.safetensors --pool max", "error: --pool: max not in {feature,time} (see --help)"},
  };
  for (const FlagCase& c : cases) expect_refused(c);
}

// -B 0 used to crash the bench, and -B -1, --max-identifier -1, --zipf nan or
// --empty-probability 2 were taken as they were.
TEST(AppFlags, BenchRefusesEachBadNumberWithASentence) {
  const std::string bench = "--device cpu --no-loader -T 8 -D 4 -H 3 -V 50 -L 3 --repeats 1 --warmup 0 ";
  const std::vector<FlagCase> cases = {
      {"enhanced-bench", bench + "-B 0", "error: --batch-size must be at least 1, got 0"},
      {"enhanced-bench", bench + "-B -1", "error: --batch-size must be at least 1, got -1"},
      {"enhanced-bench", bench + "-T 0", "error: --seq-len must be at least 1, got 0"},
      {"enhanced-bench", bench + "-V 0", "error: --vocab-size must be at least 1, got 0"},
      {"enhanced-bench", bench + "-L 0", "error: --num-labels must be in [1, 16777216], got 0"},
      {"enhanced-bench", bench + "-H 268435456", "error: --hidden must be in [1, 16777216], got 268435456"},
      {"enhanced-bench", bench + "--max-identifier -1", "error: --max-identifier must be at least 1, got -1"},
      {"enhanced-bench", bench + "--max-identifier 0", "error: --max-identifier must be at least 1, got 0"},
      {"enhanced-bench", bench + "--zipf nan", "error: --zipf must be a finite number at least 0, got 'nan'"},
      {"enhanced-bench", bench + "--zipf -1", "error: --zipf must be at least 0, got -1"},
      {"enhanced-bench", bench + "--empty-probability 2", "error: --empty-probability must be in [0, 1], got 2"},
      {"enhanced-bench", bench + "--empty-probability nan",
       "error: --empty-probability must be a finite number in [0, 1], got 'nan'"},
      {"enhanced-bench", bench + "--threads -1", "error: --threads must be in [0, 4096], got -1"},
      {"enhanced-bench", bench + "--threads 2147483647", "error: --threads must be in [0, 4096], got 2147483647"},
      {"enhanced-bench", bench + "--warmup -1", "error: --warmup must be at least 0, got -1"},
      {"enhanced-bench", bench + "--repeats 0", "error: --repeats must be at least 1, got 0"},
      {"enhanced-bench", "--device cpu -B 100000 -T 100000 --max-identifier 5",
       "error: -B 100000 x -T 100000 x --max-identifier 5 identifier ids do not fit a batch's int32 offsets"},
  };
  for (const FlagCase& c : cases) expect_refused(c);
  // The edges are accepted: every identifier empty, token ids uniform.
  const auto edge = run_app("enhanced-bench", bench + "-B 1 --empty-probability 1 --zipf 0 --json");
  EXPECT_EQ(edge.exit_code, 0) << edge.output;
}

// The rules on their own: the bounds are inclusive or not as named.
TEST(AppFlags, RulesAcceptTheirEdgesAndRefuseJustBeyond) {
  const NumberRule beta{0.0, 1.0, false, true, false};
  EXPECT_EQ(beta.check("0"), "");
  EXPECT_EQ(beta.check("0.999"), "");
  EXPECT_EQ(beta.check("1"), "must be in [0, 1), got 1");
  const NumberRule positive{0.0, HUGE_VAL, true, false, false};
  EXPECT_EQ(positive.check("1e-30"), "");
  EXPECT_EQ(positive.check("-0"), "must be greater than 0, got -0");
  const NumberRule count{1, HUGE_VAL, false, false, true, INT_MAX};
  EXPECT_EQ(count.check("2147483647"), "");
  EXPECT_EQ(count.check("2147483648"), "must be at least 1 and at most 2147483647, got 2147483648");
  const NumberRule wide{1, HUGE_VAL, false, false, true};  // an int64_t flag's
  EXPECT_EQ(wide.check("3000000000"), "");
  EXPECT_EQ(wide.check("99999999999999999999"),
            "must be at least 1 and at most 9223372036854775807, got 99999999999999999999");
  EXPECT_EQ(count.check(""), "must be a whole number at least 1, got ''");
  EXPECT_EQ(count.check("1e3"), "must be a whole number at least 1, got '1e3'");
  NumberRule single{0.0, HUGE_VAL};  // a float flag's (at_least(0.0f))
  single.single = true;
  EXPECT_EQ(single.check("3.4e38"), "");
  EXPECT_EQ(single.check("3.5e38"), "must be at least 0 and fit a float (at most 3.40282e+38), got 3.5e38");
  EXPECT_EQ(single.check("1e300"), "must be at least 0 and fit a float (at most 3.40282e+38), got 1e300");
  const NumberRule wide_real{0.0, HUGE_VAL};  // a double flag's takes it
  EXPECT_EQ(wide_real.check("1e300"), "");
}

}  // namespace
}  // namespace enhanced
