// The checkpoint format (train/checkpoint.h): a round trip keeps every bit; a truncated,
// corrupted, foreign or inconsistent file is refused with a message saying which; a checkpoint of
// other settings is refused naming each differing one; saves are atomic (a failed save leaves
// the previous checkpoint intact) and leave no temporary file.
#include "train/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cpattn/error.h"
#include "support/errors.h"
#include "train/files.h"
#include "train/model_params.h"

namespace cpattn::train {
namespace {

using cpattn::testing::error_of;

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.model.layers = 1;
  c.model.d_model = 8;
  c.model.heads = 2;
  c.model.kv_heads = 1;
  c.model.vocab = 16;
  c.model.seed = 5;
  c.seq_len = 12;
  c.config_text = "--lr\t0.003\n--seed\t5\n";
  c.step = 3;
  c.data_position = 3;
  c.generator = {5, 6};
  c.skipped_steps = 1;
  c.losses = {2.5, std::nan(""), 2.25};
  c.evals = {{2, 2.75}};
  c.adam_steps = 2;
  const auto numel = static_cast<size_t>(ModelParams(c.model).numel());
  for (size_t i = 0; i < numel; ++i) {
    c.weights.push_back(static_cast<float>(i) * 0.5f - 3.0f);
    c.adam_m.push_back(-0.0f);
    c.adam_v.push_back(static_cast<float>(i) * 1e-7f);
  }
  return c;
}

// Bitwise equality of floats (NaN and -0 included).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("cpattn_ckpt_" + name + "_" +
                            std::to_string(::testing::UnitTest::GetInstance()->random_seed())))
                              .string();
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CheckpointFormat, RoundTripKeepsEveryBit) {
  const Checkpoint c = sample_checkpoint();
  const std::vector<std::byte> bytes = encode_checkpoint(c);
  const Checkpoint d = decode_checkpoint(bytes, "mem");
  EXPECT_EQ(d.model.layers, 1);
  EXPECT_EQ(d.model.d_model, 8);
  EXPECT_EQ(d.model.vocab, 16);
  EXPECT_EQ(d.model.seed, 5u);
  EXPECT_EQ(d.seq_len, 12);
  EXPECT_EQ(d.config_text, c.config_text);
  EXPECT_EQ(d.step, 3);
  EXPECT_EQ(d.data_position, 3);
  EXPECT_EQ(d.generator, c.generator);
  EXPECT_EQ(d.skipped_steps, 1);
  EXPECT_TRUE(same_bits(d.losses, c.losses));
  EXPECT_EQ(d.evals, c.evals);
  EXPECT_EQ(d.adam_steps, 2);
  EXPECT_TRUE(same_bits(d.weights, c.weights));
  EXPECT_TRUE(same_bits(d.adam_m, c.adam_m));  // -0.0f stays -0.0f
  EXPECT_TRUE(same_bits(d.adam_v, c.adam_v));
  EXPECT_EQ(encode_checkpoint(d), bytes);
}

TEST(CheckpointFormat, TruncatedCorruptedOrForeignFilesAreRefused) {
  const std::vector<std::byte> good = encode_checkpoint(sample_checkpoint());
  const auto message = [](std::vector<std::byte> bytes) {
    const Error e = error_of([&] { decode_checkpoint(bytes, "ck.bin"); });
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    return std::string(e.what());
  };
  std::vector<std::byte> cut(good.begin(), good.end() - 100);
  EXPECT_EQ(message(cut), "ck.bin is truncated: " + std::to_string(cut.size()) +
                              " bytes, its header says " + std::to_string(good.size()));
  EXPECT_EQ(message({good.begin(), good.begin() + 10}),
            "ck.bin is not a cpattn checkpoint (10 bytes, shorter than the header)");
  for (const size_t at : {good.size() / 2, size_t{40}, good.size() - 1}) {
    std::vector<std::byte> flipped = good;
    flipped[at] ^= std::byte{0x10};
    EXPECT_NE(message(flipped).find("ck.bin is corrupted: checksum "), std::string::npos) << at;
  }
  std::vector<std::byte> foreign = good;
  foreign[0] = std::byte{'X'};
  EXPECT_EQ(message(foreign), "ck.bin is not a cpattn checkpoint (no CPATTNCK magic)");
  std::vector<std::byte> future = good;
  future[8] = std::byte{2};
  EXPECT_EQ(message(future), "ck.bin has format version 2; this cpattn reads version 1");
  std::vector<std::byte> reserved = good;  // header word 12..15 (fuzz_checkpoint found it unread)
  reserved[12] = std::byte{1};
  EXPECT_EQ(message(reserved),
            "ck.bin is not a version 1 checkpoint: its reserved header word is 1, not 0");
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  EXPECT_NE(message(longer).find("has trailing bytes"), std::string::npos);
}

TEST(CheckpointFormat, InconsistentContentsAreRefusedEvenWithAValidChecksum) {
  Checkpoint c = sample_checkpoint();
  c.weights.pop_back();
  Error e = error_of([&] { decode_checkpoint(encode_checkpoint(c), "ck.bin"); });
  EXPECT_NE(std::string(e.what()).find("ck.bin is inconsistent: the model has"), std::string::npos)
      << e.what();
  c = sample_checkpoint();
  c.losses.push_back(1.0);
  e = error_of([&] { decode_checkpoint(encode_checkpoint(c), "ck.bin"); });
  EXPECT_EQ(std::string(e.what()), "ck.bin is inconsistent: step 3 with 4 losses");
  c = sample_checkpoint();
  c.adam_steps = 3;
  e = error_of([&] { decode_checkpoint(encode_checkpoint(c), "ck.bin"); });
  EXPECT_EQ(std::string(e.what()),
            "ck.bin is inconsistent: step 3, 1 skipped, but 3 optimizer updates");
  c = sample_checkpoint();
  c.model.heads = 3;  // does not divide d_model 8
  e = error_of([&] { decode_checkpoint(encode_checkpoint(c), "ck.bin"); });
  EXPECT_NE(std::string(e.what()).find("ck.bin is inconsistent: its model: "), std::string::npos);
}

TEST(CheckResumable, NamesEveryDifferingTrainingSetting) {
  const std::vector<ConfigField> now = {{"--lr", "0.003", ""},
                                        {"--seed", "7", ""},
                                        {"--eval-every", "5", "", false},
                                        {"--steps", "100", ""}};
  Checkpoint c;
  c.config_text = training_config_text({{"--lr", "0.003", ""}, {"--seed", "7", ""}});
  EXPECT_EQ(c.config_text, "--lr\t0.003\n--seed\t7\n");
  Error e = error_of([&] { check_resumable(c, now, "--resume 'd'"); });
  EXPECT_EQ(std::string(e.what()),
            "--resume 'd': the checkpoint was written by a run with other settings: --steps not "
            "in the checkpoint, 100 now");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  c.config_text = "--lr\t0.001\n--seed\t7\n--steps\t100\n--layers\t2\n";
  e = error_of([&] { check_resumable(c, now, "--resume 'd'"); });
  EXPECT_EQ(std::string(e.what()),
            "--resume 'd': the checkpoint was written by a run with other settings: --lr 0.001 in "
            "the checkpoint, 0.003 now; --layers 2 in the checkpoint, not set now");
  c.config_text = "--lr\t0.003\n--seed\t7\n--steps\t100\n";
  check_resumable(c, now, "--resume 'd'");  // --eval-every does not shape the weights
}

TEST(CheckpointFiles, SaveIsAtomicAndLoadsBack) {
  const std::string dir = temp_dir("save");
  const std::string nested = dir + "/nested";
  const CheckpointDirLock lock = prepare_checkpoint_dir(nested, false);
  Checkpoint c = sample_checkpoint();
  save_checkpoint(nested, c);
  EXPECT_FALSE(std::filesystem::exists(temporary_path(checkpoint_path(nested))));
  c.step = 2;
  c.losses.pop_back();
  c.adam_steps = 1;
  // A save that cannot write its temporary file fails and leaves the previous checkpoint.
  const std::string tmp = temporary_path(checkpoint_path(nested));
  std::filesystem::create_directory(tmp);
  const Error e = error_of([&] { save_checkpoint(nested, c); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_NE(std::string(e.what()).find("cannot remove the stale temporary file '" + tmp + "'"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(load_checkpoint(nested).step, 3);
  std::filesystem::remove(tmp);
  // A link left at the temporary path is replaced, never written through: the file it names
  // keeps its bytes, and the checkpoint is a file of its own.
  const std::string victim = dir + "/victim";
  write_file_atomically(victim, std::vector<std::byte>(4, std::byte{9}));
  std::filesystem::create_symlink(victim, tmp);
  save_checkpoint(nested, c);
  EXPECT_EQ(load_checkpoint(nested).step, 2);
  EXPECT_EQ(std::filesystem::file_size(victim), 4u);
  EXPECT_FALSE(std::filesystem::is_symlink(checkpoint_path(nested)));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tmp)));
  std::filesystem::remove_all(dir);
}

// A directory one run saves into is locked for that run: a second run (here a second lock in
// the same process, which flock refuses alike) is refused before it trains, until the first
// ends.
TEST(CheckpointFiles, TwoRunsNeverSaveIntoOneDirectory) {
  const std::string dir = temp_dir("locked");
  std::optional<CheckpointDirLock> first = prepare_checkpoint_dir(dir, false);
  const Error e = error_of([&] { (void)prepare_checkpoint_dir(dir, true); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(std::string(e.what()),
            "--save '" + dir +
                "' is in use by another running cpattn train: two runs saving into one "
                "directory would replace each other's checkpoints");
  first.reset();
  const CheckpointDirLock second = prepare_checkpoint_dir(dir, true);
  std::filesystem::remove_all(dir);
}

// A directory that holds a checkpoint is refused unless the run may replace it (--overwrite, or
// it resumes from that very file), and the checkpoint is left as it was.
TEST(CheckpointFiles, AnotherRunsCheckpointIsNotReplaced) {
  const std::string dir = temp_dir("taken");
  (void)prepare_checkpoint_dir(dir, false);  // the lock ends with this statement
  save_checkpoint(dir, sample_checkpoint());
  const Error e = error_of([&] { (void)prepare_checkpoint_dir(dir, false); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), ::testing::HasSubstr("holds a checkpoint already"));
  EXPECT_THAT(e.what(), ::testing::HasSubstr("pass --overwrite"));
  EXPECT_EQ(load_checkpoint(dir).step, 3);
  (void)prepare_checkpoint_dir(dir, true);
  EXPECT_TRUE(same_checkpoint(dir, dir + "/."));
  EXPECT_FALSE(same_checkpoint(dir, ""));
  EXPECT_FALSE(same_checkpoint(dir, dir + "/missing"));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFiles, ADirectoryThatCannotHoldCheckpointsIsRefusedBeforeTraining) {
  const std::string dir = temp_dir("file");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/plain";
  write_file_atomically(file, std::vector<std::byte>(3));
  Error e = error_of([&] { (void)prepare_checkpoint_dir(file, false); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_NE(std::string(e.what()).find("--save '" + file + "'"), std::string::npos) << e.what();
  e = error_of([&] { load_checkpoint(dir + "/missing"); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_NE(std::string(e.what()).find("cannot open: No such file"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Files, OutputsNeverOverwriteInputs) {
  const std::string dir = temp_dir("inputs");
  std::filesystem::create_directories(dir);
  const std::string text = dir + "/text.txt";
  write_file_atomically(text, std::vector<std::byte>(5));
  std::filesystem::create_symlink(text, dir + "/link.txt");
  const Error e =
      error_of([&] { check_not_input(dir + "/link.txt", "--metrics", text, "--text"); });
  EXPECT_EQ(std::string(e.what()), "--metrics '" + dir +
                                       "/link.txt' is the --text file: refusing to overwrite an "
                                       "input");
  error_of([&] { check_not_input(dir + "/./text.txt", "--plot", text, "--text"); });
  error_of([&] { check_not_input("new.png", "--plot", "new.png", "--metrics"); });
  check_not_input(dir + "/other.txt", "--metrics", text, "--text");
  check_not_input("", "--metrics", text, "--text");
  EXPECT_TRUE(same_file(text, dir + "/link.txt"));
  EXPECT_FALSE(same_file(text, dir + "/missing"));
  std::filesystem::remove_all(dir);
}

TEST(Files, AtomicWriteReportsAFailedWriteAndKeepsThePreviousFile) {
  // A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) fails the write part-way with EFBIG, as a
  // full disk fails it with ENOSPC (the fault matrix's full_disk case fills a tmpfs).
  const std::string dir = temp_dir("full");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/checkpoint.bin";
  write_file_atomically(path, std::vector<std::byte>(3, std::byte{7}));
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = 16;
  const auto handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Error e = error_of([&] { write_file_atomically(path, std::vector<std::byte>(64)); });
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  std::signal(SIGXFSZ, handler);
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_EQ(std::string(e.what()),
            "writing '" + path + "': write of '" + path + ".tmp' failed: File too large");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(temporary_path(path))));
  EXPECT_EQ(std::filesystem::file_size(path), 3u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpattn::train
