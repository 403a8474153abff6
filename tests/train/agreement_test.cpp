// Agreement of a group's settings (train/agreement.h): a rank started with another value fails
// every rank at once, naming the field and which ranks hold which value; start-up errors and
// rank 0's results (bytes or errors) reach every rank alike.
#include "train/agreement.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cpattn/stopwatch.h"
#include "cpattn/thread_communicator.h"
#include "support/errors.h"

namespace cpattn::train {
namespace {

using cpattn::testing::error_of;

std::vector<ConfigField> settings(const std::string& dropout, const std::string& steps) {
  return {{"--text", "100 bytes, digest 00", "/data/a.txt"},
          {"--dropout", dropout, ""},
          {"--steps", steps, "", false}};
}

// Runs agree_on_fields on `ranks` in-process ranks, rank r passing fields_of(r), and returns
// every rank's error message ("" for a rank that did not throw).
std::vector<std::string> agreement_errors(
    int ranks, const std::function<std::vector<ConfigField>(int)>& fields_of) {
  std::vector<std::string> messages(static_cast<size_t>(ranks));
  std::vector<int> codes(static_cast<size_t>(ranks), 0);
  RunRanksOptions options;
  options.timeout = std::chrono::seconds(5);
  try {
    run_ranks(
        ranks,
        [&](Communicator& comm) {
          try {
            agree_on_fields(comm, fields_of(comm.rank()), "test");
          } catch (const GroupError& e) {
            messages[static_cast<size_t>(comm.rank())] = e.what();
            codes[static_cast<size_t>(comm.rank())] = static_cast<int>(e.code());
          }
        },
        options);
  } catch (const Error& e) {
    ADD_FAILURE() << "a rank failed with something else than GroupError: " << e.what();
  }
  for (int c : codes) {
    if (c != 0) {
      EXPECT_EQ(c, static_cast<int>(ErrorCode::kRankDisagreement));
    }
  }
  return messages;
}

TEST(AgreeOnFields, EqualSettingsPass) {
  const auto messages = agreement_errors(3, [](int) { return settings("0.1", "200"); });
  for (const std::string& m : messages) EXPECT_EQ(m, "");
}

TEST(AgreeOnFields, OneRankWithAnotherValueFailsEveryRankNamingIt) {
  const Stopwatch watch;
  const auto messages = agreement_errors(
      3, [](int r) { return settings(r == 1 ? "0.2" : "0.1", r == 2 ? "7" : "200"); });
  const std::string want =
      "test: the ranks were started with different settings: ranks 0, 2 have --dropout 0.1, "
      "rank 1 has 0.2; ranks 0-1 have --steps 200, rank 2 has 7";
  for (const std::string& m : messages) EXPECT_EQ(m, want);
  EXPECT_LT(watch.seconds(), 2.5);  // one collective, well before the 5 s deadline
}

TEST(AgreeOnFields, NotesAreShownButNotCompared) {
  // The same text read from two paths agrees; another text shows both paths.
  auto messages = agreement_errors(2, [](int r) {
    std::vector<ConfigField> f = settings("0.1", "200");
    f[0].note = r == 0 ? "/a/gpl.txt" : "/b/gpl.txt";
    return f;
  });
  for (const std::string& m : messages) EXPECT_EQ(m, "");
  messages = agreement_errors(2, [](int r) {
    std::vector<ConfigField> f = settings("0.1", "200");
    if (r == 1) f[0] = {"--text", "7 bytes, digest 11", "/b/other.txt"};
    return f;
  });
  for (const std::string& m : messages) {
    EXPECT_EQ(m,
              "test: the ranks were started with different settings: rank 0 has --text "
              "/data/a.txt (100 bytes, digest 00), rank 1 has /b/other.txt (7 bytes, digest 11)");
  }
}

TEST(AgreeOnFields, AFlagOnlySomeRanksHaveIsADifference) {
  const auto messages = agreement_errors(2, [](int r) {
    std::vector<ConfigField> f = settings("0.1", "200");
    if (r == 1) f.push_back({"--extra", "1", ""});
    return f;
  });
  for (const std::string& m : messages) {
    EXPECT_EQ(m,
              "test: the ranks were started with different settings: rank 0 has --extra "
              "(absent), rank 1 has 1");
  }
}

// A field listed only when it is not its default (--strategy): the ranks without it are shown
// with the default they run (an MPMD job with --strategy ulysses on one side).
TEST(AgreeOnFields, ARankWithoutADefaultedFieldShowsTheDefault) {
  const auto messages = agreement_errors(3, [](int r) {
    std::vector<ConfigField> f = settings("0.1", "200");
    if (r == 2) f.push_back({"--strategy", "ulysses", "", true, "ring"});
    return f;
  });
  for (const std::string& m : messages) {
    EXPECT_EQ(m,
              "test: the ranks were started with different settings: ranks 0-1 have --strategy "
              "ring (the default), rank 2 has ulysses");
  }
}

TEST(FormatValue, ShortestTextThatReadsBackExactly) {
  EXPECT_EQ(format_value(0.1f), "0.1");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(3e-3), "0.003");
  EXPECT_NE(format_value(0.1), format_value(std::nextafter(0.1, 1.0)));
  EXPECT_EQ(format_value(std::nan("")), "nan");
}

TEST(ShareStartupErrors, OneFailingRankFailsEveryRankWithItsMessage) {
  std::vector<std::string> messages(3);
  std::vector<ErrorCode> codes(3, ErrorCode::kInternal);
  run_ranks(3, [&](Communicator& comm) {
    std::optional<Error> mine;
    if (comm.rank() == 2) mine = Error(ErrorCode::kIo, "text file '/x': cannot open");
    const Error e = error_of([&] { share_startup_errors(comm, mine); });
    messages[static_cast<size_t>(comm.rank())] = e.what();
    codes[static_cast<size_t>(comm.rank())] = e.code();
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(messages[r], "rank 2: text file '/x': cannot open");
    EXPECT_EQ(codes[r], ErrorCode::kIo);
  }
  run_ranks(2, [&](Communicator& comm) {
    const Error e =
        error_of([&] { share_startup_errors(comm, Error(ErrorCode::kInvalidArgument, "--cp 3")); });
    EXPECT_EQ(std::string(e.what()), "every rank: --cp 3");
  });
  run_ranks(2, [&](Communicator& comm) { share_startup_errors(comm, std::nullopt); });
}

TEST(Rank0Result, EveryRankGetsRankZerosBytesOrItsError) {
  std::atomic<int> calls{0};
  run_ranks(3, [&](Communicator& comm) {
    const std::vector<std::byte> bytes = rank0_result(comm, [&] {
      ++calls;
      std::vector<std::byte> b(100000);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 7);
      return b;
    });
    ASSERT_EQ(bytes.size(), 100000u);
    for (size_t i = 0; i < bytes.size(); i += 997)
      EXPECT_EQ(bytes[i], static_cast<std::byte>(i * 7));
  });
  EXPECT_EQ(calls.load(), 1);
  std::atomic<int> failed{0};
  run_ranks(3, [&](Communicator& comm) {
    try {
      rank0_result(comm,
                   []() -> std::vector<std::byte> { throw Error(ErrorCode::kIo, "disk full"); });
    } catch (const GroupError& e) {  // the type that lets an MPI process exit normally
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_EQ(std::string(e.what()), "disk full");
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 3);
}

}  // namespace
}  // namespace cpattn::train
