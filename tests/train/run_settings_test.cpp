// Run settings (train/run_settings.h): what comparing a checkpoint's settings with a resumed
// run's allows with a note and what it refuses, with the messages naming the flag, both values
// and the fix; the JSON record round trip.
#include "stoker/train/training_checkpoint.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace {

using stoker::train::compare_run_settings;
using stoker::train::GlobalBatches;
using stoker::train::RunSetting;
using stoker::train::SettingChange;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const GlobalBatches kSameBatch{.then = 32, .now = 32, .world_then = 1, .world_now = 1};

TEST(RunSettings, UnchangedAndUnrecordedSettingsPass) {
  const auto c = compare_run_settings({{"--lr", "0.001"}, {"--width", "64"}},
                                      {{"--lr", "0.001", SettingChange::note},
                                       {"--width", "64", SettingChange::model_shape},
                                       {"--new-flag", "1", SettingChange::refuse}},
                                      kSameBatch);
  EXPECT_TRUE(c.notes.empty());
  EXPECT_TRUE(c.refusal.empty());
}

TEST(RunSettings, AllowedChangesAreNotedWithBothValues) {
  const auto c = compare_run_settings(
      {{"--lr", "0.001"}, {"--precision", "fp32"}},
      {{"--lr", "0.002", SettingChange::note}, {"--precision", "bf16", SettingChange::note}},
      kSameBatch);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_EQ(c.notes[0], "--lr changed 0.001 -> 0.002");
  EXPECT_EQ(c.notes[1], "--precision changed fp32 -> bf16");
  EXPECT_TRUE(c.refusal.empty());
}

TEST(RunSettings, AnotherModelShapeIsRefusedNotDamaged) {
  const auto c = compare_run_settings(
      {{"--width", "64"}, {"--lr", "1"}},
      {{"--width", "128", SettingChange::model_shape}, {"--lr", "2", SettingChange::note}},
      kSameBatch);
  EXPECT_TRUE(contains(c.refusal,
                       "the checkpoint was written for --width 64, this run has "
                       "--width 128"))
      << c.refusal;
  EXPECT_FALSE(contains(c.refusal, "damaged"));
  EXPECT_TRUE(contains(c.hint, "resume with --width 64")) << c.hint;
  EXPECT_TRUE(contains(c.hint, "another --checkpoint-dir")) << c.hint;
}

TEST(RunSettings, RefusedSettingsAreAllNamed) {
  const auto c = compare_run_settings({{"--optimizer", "sgd"}, {"--arch", "small"}},
                                      {{"--optimizer", "lars", SettingChange::refuse},
                                       {"--arch", "resnet18", SettingChange::model_shape}},
                                      kSameBatch);
  EXPECT_TRUE(contains(c.refusal, "--optimizer sgd, this run has --optimizer lars")) << c.refusal;
  EXPECT_TRUE(contains(c.refusal, "--arch small, this run has --arch resnet18")) << c.refusal;
  EXPECT_TRUE(contains(c.hint, "--optimizer sgd, --arch small")) << c.hint;
}

TEST(RunSettings, AccumChangingTheGlobalBatchIsRefused) {
  const auto c =
      compare_run_settings({{"--accum", "1"}}, {{"--accum", "2", SettingChange::global_batch}},
                           {.then = 16, .now = 32, .world_then = 1, .world_now = 1});
  EXPECT_TRUE(contains(c.refusal, "--accum changed 1 -> 2")) << c.refusal;
  EXPECT_TRUE(contains(c.refusal, "global batch")) << c.refusal;
  EXPECT_TRUE(contains(c.refusal, "32; the checkpoint's run had 16")) << c.refusal;
  EXPECT_TRUE(contains(c.hint, "resume with --accum 1")) << c.hint;
  EXPECT_TRUE(contains(c.hint, "keep the global batch at 16 on this job's 1 rank")) << c.hint;
}

TEST(RunSettings, AccumKeepingTheGlobalBatchOnAnotherWorldSizeIsNoted) {
  // 2 ranks x accum 1 -> 1 rank x accum 2: the same 32 samples per step.
  const auto c =
      compare_run_settings({{"--accum", "1"}}, {{"--accum", "2", SettingChange::global_batch}},
                           {.then = 32, .now = 32, .world_then = 2, .world_now = 1});
  EXPECT_TRUE(c.refusal.empty()) << c.refusal;
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_TRUE(contains(c.notes[0],
                       "--accum changed 1 -> 2 (the global batch stays 32 on 1 rank, "
                       "was 2 ranks)"))
      << c.notes[0];
}

TEST(RunSettings, AccumWithAnUnknownGlobalBatchIsRefused) {
  const auto c =
      compare_run_settings({{"--accum", "1"}}, {{"--accum", "4", SettingChange::global_batch}},
                           {.then = -1, .now = -1, .world_then = 1, .world_now = 1});
  EXPECT_TRUE(contains(c.refusal, "--accum changed 1 -> 4")) << c.refusal;
}

TEST(RunSettings, JsonRoundTripAndDamage) {
  const std::vector<RunSetting> s = {{"--width", "64", SettingChange::model_shape},
                                     {"--lr", "0.001", SettingChange::note}};
  const std::map<std::string, std::string> back =
      stoker::train::parse_run_settings("f", stoker::train::run_settings_json(s));
  EXPECT_EQ(back, (std::map<std::string, std::string>{{"--lr", "0.001"}, {"--width", "64"}}));
  try {
    stoker::train::parse_run_settings("ck.safetensors", "[1, 2]");
    ADD_FAILURE() << "a record that is not an object was taken";
  } catch (const stoker::Error& e) {
    EXPECT_TRUE(contains(e.what(), "ck.safetensors")) << e.what();
    EXPECT_TRUE(contains(e.what(), "stoker.settings")) << e.what();
  }
}

}  // namespace
