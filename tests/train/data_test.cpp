// Text loading errors (FIFOs, devices, size limit), sampler determinism and window contents, the
// evenly spaced held-out batch, unigram entropy.
#include "train/data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cpattn/error.h"
#include "support/errors.h"
#include "train/files.h"

namespace cpattn::train {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    path_ =
        (std::filesystem::temp_directory_path() /
         ("cpattn_train_data_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
          "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt"))
            .string();
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string error_of(const std::function<void()>& fn, ErrorCode* code) {
  const Error e = cpattn::testing::error_of(fn);
  *code = e.code();
  return e.what();
}

TEST(ReadTextFile, ReadsAllBytes) {
  const std::string text = std::string("hello\0world\n", 12) + std::string(70000, 'x');
  TempFile f(text);
  const auto bytes = read_text_file(f.path(), 8);
  ASSERT_EQ(bytes.size(), text.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), text.begin(),
                         [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); }));
}

TEST(ReadTextFile, ErrorsNameTheFileAndSizes) {
  ErrorCode code{};
  std::string msg = error_of([] { read_text_file("/nonexistent/cpattn.txt", 4); }, &code);
  EXPECT_EQ(code, ErrorCode::kIo);
  EXPECT_EQ(msg, "text file '/nonexistent/cpattn.txt': cannot open: No such file or directory");

  TempFile empty("");
  msg = error_of([&] { read_text_file(empty.path(), 4); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find(empty.path() + "' is empty (0 bytes)"), std::string::npos) << msg;

  TempFile small("abcd");
  msg = error_of([&] { read_text_file(small.path(), 4); }, &code);
  EXPECT_EQ(msg, "text file '" + small.path() + "' has 4 bytes; need at least seq_len + 1 = 5");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_EQ(read_text_file(small.path(), 3).size(), 4u);
}

// A FIFO without a writer would block an ordinary open forever; a directory or a device is no
// text either. Each is refused at once, naming what it is.
TEST(ReadTextFile, RefusesWhatIsNotARegularFileWithoutBlocking) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string fifo = dir + "/cpattn_train_data_" +
                           std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                           ".fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ErrorCode code{};
  std::string msg = error_of([&] { read_text_file(fifo, 4); }, &code);
  std::filesystem::remove(fifo);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(msg, "text file '" + fifo + "' is not a regular file (a FIFO)");
  msg = error_of([&] { read_text_file(dir, 4); }, &code);
  EXPECT_EQ(msg, "text file '" + dir + "' is not a regular file (a directory)");
  msg = error_of([&] { read_text_file("/dev/zero", 4); }, &code);
  EXPECT_EQ(msg, "text file '/dev/zero' is not a regular file (a character device)");
}

TEST(ReadTextFile, RefusesFilesAboveTheLimit) {
  TempFile f(std::string(100, 'x'));
  ErrorCode code{};
  const std::string msg = error_of([&] { read_regular_file(f.path(), 99, "--text"); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(msg, "--text '" + f.path() + "' has 100 bytes, more than the limit of 99");
  EXPECT_EQ(read_regular_file(f.path(), 100, "--text").size(), 100u);
}

TEST(EvenlySpacedBatch, CoversTheTextFromStartToEnd) {
  std::vector<uint8_t> text(100);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>(i);
  const Batch b = evenly_spaced_batch(text, 9, 4);
  // Starts 0, 30, 60, 90 (the last window ends at the last byte): floor(r * 90 / 3).
  EXPECT_EQ(b.starts, (std::vector<int64_t>{0, 30, 60, 90}));
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t s = 0; s < 9; ++s) {
      EXPECT_EQ(b.inputs[static_cast<size_t>(r * 9 + s)], b.starts[static_cast<size_t>(r)] + s);
      EXPECT_EQ(b.targets[static_cast<size_t>(r * 9 + s)],
                b.starts[static_cast<size_t>(r)] + s + 1);
    }
  }
  EXPECT_EQ(evenly_spaced_batch(text, 9, 1).starts, (std::vector<int64_t>{0}));
  ErrorCode code{};
  error_of([&] { evenly_spaced_batch(text, 100, 1); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
}

TEST(BatchSampler, DeterministicWindowsOfTheText) {
  std::vector<uint8_t> text(1000);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<uint8_t>((i * 37 + i / 7) % 256);
  const int64_t seq = 17, batch = 5;
  const BatchSampler s(text, seq, batch, 42), same(text, seq, batch, 42),
      other(text, seq, batch, 43);
  const Batch a = s.sample(3);
  EXPECT_EQ(a.starts, same.sample(3).starts);
  EXPECT_EQ(a.inputs, same.sample(3).inputs);
  EXPECT_NE(a.starts, s.sample(4).starts);
  EXPECT_NE(a.starts, other.sample(3).starts);
  ASSERT_EQ(a.inputs.size(), static_cast<size_t>(batch * seq));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = a.starts[static_cast<size_t>(b)];
    ASSERT_GE(start, 0);
    ASSERT_LE(start + seq + 1, static_cast<int64_t>(text.size()));
    for (int64_t t = 0; t < seq; ++t) {
      EXPECT_EQ(a.inputs[b * seq + t], text[start + t]);
      EXPECT_EQ(a.targets[b * seq + t], text[start + t + 1]);
    }
  }
}

TEST(BatchSampler, ExactFitAndErrors) {
  const std::vector<uint8_t> text = {1, 2, 3, 4};
  const Batch b = BatchSampler(text, 3, 2, 0).sample(0);
  EXPECT_EQ(b.starts, (std::vector<int64_t>{0, 0}));  // only one window fits
  EXPECT_EQ(b.targets, (std::vector<int32_t>{2, 3, 4, 2, 3, 4}));
  EXPECT_THROW(BatchSampler(text, 4, 1, 0), Error);
  EXPECT_THROW(BatchSampler(text, 3, 0, 0), Error);
  EXPECT_THROW(BatchSampler(text, 3, 1, 0).sample(-1), Error);
}

TEST(UnigramEntropy, KnownStrings) {
  auto h = [](const std::string& s) {
    return unigram_entropy_nats(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_DOUBLE_EQ(h("aaaa"), 0.0);
  EXPECT_NEAR(h("abab"), std::log(2.0), 1e-15);
  EXPECT_NEAR(h("abcd"), std::log(4.0), 1e-15);
  // p = {1/2, 1/4, 1/4}: H = 1.5 ln 2.
  EXPECT_NEAR(h("aabc"), 1.5 * std::log(2.0), 1e-15);
  EXPECT_THROW(h(""), Error);
}

}  // namespace
}  // namespace cpattn::train
