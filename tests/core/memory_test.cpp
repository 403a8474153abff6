// MemoryCounter: live and peak bytes and objects, parents, reset, concurrency, shared ownership.
#include "cpattn/memory.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace cpattn {
namespace {

TEST(MemoryCounter, LiveAndPeakWithReset) {
  const auto c = MemoryCounter::create();
  c->add_bytes(100);
  c->add_bytes(50);
  c->add_bytes(-120);
  EXPECT_EQ(c->stats().live_bytes, 30);
  EXPECT_EQ(c->stats().peak_bytes, 150);
  c->reset_peak();
  EXPECT_EQ(c->stats().peak_bytes, 30);
  c->add_objects(2);
  c->add_objects(-1);
  EXPECT_EQ(c->stats().live_objects, 1);
  EXPECT_EQ(c->stats().peak_objects, 2);
}

TEST(MemoryCounter, ChildrenCountIntoEveryParent) {
  const auto root = MemoryCounter::create();
  const auto mid = MemoryCounter::create(root.get());
  const auto leaf = MemoryCounter::create(mid.get());
  const auto sibling = MemoryCounter::create(mid.get());
  leaf->add_bytes(10);
  sibling->add_bytes(5);
  leaf->add_objects(1);
  EXPECT_EQ(leaf->stats().live_bytes, 10);
  EXPECT_EQ(sibling->stats().live_bytes, 5);
  EXPECT_EQ(mid->stats().live_bytes, 15);
  EXPECT_EQ(root->stats().live_bytes, 15);
  EXPECT_EQ(root->stats().live_objects, 1);
  EXPECT_EQ(sibling->stats().live_objects, 0);
}

TEST(MemoryCounter, ChildKeepsItsParentAlive) {
  std::shared_ptr<MemoryCounter> child;
  std::weak_ptr<MemoryCounter> parent_watch;
  {
    const auto parent = MemoryCounter::create();
    parent_watch = parent;
    child = MemoryCounter::create(parent.get());
  }
  ASSERT_FALSE(parent_watch.expired());
  child->add_bytes(8);
  EXPECT_EQ(parent_watch.lock()->stats().live_bytes, 8);
  child.reset();
  EXPECT_TRUE(parent_watch.expired());
}

TEST(MemoryCounter, ConcurrentUpdatesAreExact) {
  const auto root = MemoryCounter::create();
  const auto c = MemoryCounter::create(root.get());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c->add_bytes(3);
        c->add_bytes(-1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->stats().live_bytes, 4 * 100000 * 2);
  EXPECT_EQ(root->stats().live_bytes, 4 * 100000 * 2);
  EXPECT_GE(root->stats().peak_bytes, root->stats().live_bytes);
}

TEST(MemoryCounter, ProcessCounterIsOneObject) {
  EXPECT_EQ(&process_memory(), &process_memory());
  const int64_t before = process_memory().stats().live_bytes;
  const auto child = MemoryCounter::create(&process_memory());
  child->add_bytes(4096);
  EXPECT_EQ(process_memory().stats().live_bytes, before + 4096);
  child->add_bytes(-4096);
}

}  // namespace
}  // namespace cpattn
