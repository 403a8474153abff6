// The gloo declarations that torch's ProcessGroupGloo.hpp needs, for compiling the C++ test of
// ProcessGroupCommunicator (../../process_group_conformance_main.cpp): torch's wheel ships that
// header but not gloo's, and the test builds a ProcessGroupGloo in C++. gloo itself stays inside
// libtorch_cpu; nothing here is defined, and the test never calls a gloo function: it calls
// c10d's exported ProcessGroupGloo functions only.
//
// Why this is enough: ProcessGroupGloo holds gloo objects only through pointers (shared_ptr,
// unique_ptr), so its size and layout do not depend on gloo's definitions; the one class of gloo
// it derives from (rendezvous::Store, the base of c10d's GlooStore) is declared with the virtual
// functions GlooStore overrides, and the test never makes a GlooStore. A torch whose header used
// a gloo type by value or called another gloo function would fail to compile here (an incomplete
// type, an undeclared name), not build a wrong layout. Used only where the torch being built
// against has no gloo headers of its own (python/tests/tests.cmake).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo {

// Called by ProcessGroupGloo::setTimeout (an inline virtual that libtorch compiles, not the test).
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};

namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport

namespace rendezvous {
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace rendezvous

}  // namespace gloo
