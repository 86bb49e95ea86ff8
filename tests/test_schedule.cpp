// The learning-rate schedules and the validation monitor (src/train/schedule.h) against values
// worked out by hand from torch's and Keras' definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "train/schedule.h"

namespace enhanced {
namespace {

TEST(Schedule, WarmupRisesLinearlyToTheRateWithoutAWastedStep) {
  ScheduleOptions s;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 0, 100, 0), 0.025);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 3, 100, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 4, 100, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 99, 100, 0), 0.1);
}

TEST(Schedule, StepMultipliesByTheFactorEveryStepSizeStepsAfterWarmup) {
  ScheduleOptions s;
  s.kind = ScheduleKind::step;
  s.warmup_steps = 2;
  s.step_size = 3;
  s.factor = 0.5;
  const double expected[] = {0.5, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.25};
  for (int step = 0; step < 9; ++step) EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, step, 100, 0), expected[step]) << step;
  s.min_lr = 0.3;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 8, 100, 0), 0.3);
}

TEST(Schedule, CosineAndLinearGoFromTheRateToMinLrOverTheStepsAfterWarmup) {
  ScheduleOptions s;
  s.kind = ScheduleKind::cosine;
  s.min_lr = 0.1;
  // torch CosineAnnealingLR(T_max = 10): eta_min + (base - eta_min) * (1 + cos(pi t / 10)) / 2.
  for (int t = 0; t <= 10; ++t)
    EXPECT_NEAR(learning_rate_at(s, 1.0, t, 10, 0), 0.1 + 0.9 * (1 + std::cos(M_PI * t / 10)) / 2, 1e-15) << t;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 5, 10, 0), 0.55);
  s.kind = ScheduleKind::linear;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 0, 10, 0), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 5, 10, 0), 0.55);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 10, 10, 0), 0.1);
  s.warmup_steps = 5;  // the schedule spans the 5 steps after warm-up
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 5, 10, 0), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 10, 10, 0), 0.1);
}

TEST(Schedule, PlateauMultipliesByTheFactorPerReductionDownToMinLr) {
  ScheduleOptions s;
  s.kind = ScheduleKind::plateau;
  s.factor = 0.1;
  s.min_lr = 0.0015;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 7, 10, 0), 1.0);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 7, 10, 2), 0.01, 1e-17);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 7, 10, 3), 0.0015);
  // torch's eps: a reduction of 1e-8 or less is not made.
  s.factor = 0.5;
  s.min_lr = 0;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 2e-8, 7, 10, 1), 2e-8);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 4e-8, 7, 10, 3), 2e-8);
}

std::vector<Validation> losses(std::initializer_list<double> values) {
  std::vector<Validation> out;
  int64_t step = 0;
  for (double v : values) out.push_back({++step, v, 1 - v, 0.5});
  return out;
}

TEST(Monitor, BestFollowsTheMetricAndEarlyStoppingCountsValidationsWithoutAnImprovementBeyondMinDelta) {
  MonitorOptions o;
  o.early_stopping = 2;
  o.min_delta = 0.05;
  MonitorState s = replay(losses({1.0, 0.9, 0.88, 0.87}), o);
  EXPECT_TRUE(s.last_is_best);  // 0.87 is the lowest yet ...
  EXPECT_DOUBLE_EQ(s.best, 0.87);
  EXPECT_EQ(s.wait, 2);         // ... but neither 0.88 nor 0.87 beat 0.9 by more than 0.05
  EXPECT_TRUE(s.stop);
  EXPECT_EQ(s.best_step, 4);
  s = replay(losses({1.0, 0.9, 0.88}), o);
  EXPECT_FALSE(s.stop);
  // Only the latest validation decides: a patience exhausted earlier, then an improvement (as a
  // resume with a new, smaller patience replays it) does not stop the run.
  s = replay(losses({1.0, 1.0, 1.0, 0.5}), o);
  EXPECT_FALSE(s.stop);
  EXPECT_EQ(s.wait, 0);
  // Ties: the best step is the first with the best value (the one best.safetensors holds).
  s = replay(losses({1.0, 0.5, 0.5}), o);
  EXPECT_EQ(s.best_step, 2);
  o.metric = MonitorMetric::valid_accuracy;  // accuracy 1 - loss: higher is better
  s = replay(losses({0.5, 0.2, 0.3}), o);
  EXPECT_FALSE(s.last_is_best);
  EXPECT_DOUBLE_EQ(monitored_value(losses({0.2})[0], o.metric), -0.8);
  EXPECT_DOUBLE_EQ(s.best, -0.8);
}

// torch ReduceLROnPlateau(patience=1, threshold=0, threshold_mode="abs"): a reduction when the
// bad validations exceed the patience, then the count starts again.
TEST(Monitor, PlateauReducesAfterMoreThanPatienceBadValidations) {
  MonitorOptions o;
  o.plateau = true;
  o.plateau_patience = 1;
  EXPECT_EQ(replay(losses({1.0, 1.0}), o).plateau_reductions, 0);
  EXPECT_EQ(replay(losses({1.0, 1.0, 1.0}), o).plateau_reductions, 1);
  EXPECT_EQ(replay(losses({1.0, 1.0, 1.0, 1.0}), o).plateau_reductions, 1);
  EXPECT_EQ(replay(losses({1.0, 1.0, 1.0, 1.0, 1.0}), o).plateau_reductions, 2);
  EXPECT_EQ(replay(losses({1.0, 1.0, 0.5, 1.0}), o).plateau_reductions, 0);
  EXPECT_FALSE(replay(losses({1.0, 1.0, 1.0, 1.0, 1.0}), o).stop);  // early stopping off
}

}  // namespace
}  // namespace enhanced
