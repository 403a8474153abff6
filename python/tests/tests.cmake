# The Python package's pytest suites, one ctest per file (so ctest -j runs them side by side),
# run by CPATTN_PYTHON (the project's virtual environment) against the package assembled in the
# build tree.
#
# torch.compile's caches do not notice a custom op's changed autograd formula (pytorch/pytorch
# issue 144344) or the changed output size of its fake: a compiled backward traced from an older
# python/cpattn/_ops.py would be reused, calling the ops with their old arguments, and a graph
# traced with another FINGERPRINT_BYTES (include/cpattn/fingerprint.h's field list) asserts the
# old size of the forward's fingerprint output. The tests' inductor cache therefore lives in the
# build tree under a hash of both files (a change to either re-runs the configure step).
set(cpattn_ops_hash "")
foreach(f python/cpattn/_ops.py include/cpattn/fingerprint.h)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${f})
  file(SHA256 ${PROJECT_SOURCE_DIR}/${f} file_hash)
  string(SHA256 cpattn_ops_hash "${cpattn_ops_hash}${file_hash}")
endforeach()
string(SUBSTRING ${cpattn_ops_hash} 0 16 cpattn_ops_hash)
set(cpattn_pytest_env "PYTHONPATH=${CPATTN_PYTHON_DIR}"
    "TORCHINDUCTOR_CACHE_DIR=${CMAKE_BINARY_DIR}/torchinductor/${cpattn_ops_hash}")
file(GLOB CPATTN_PYTESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
foreach(t ${CPATTN_PYTESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME python.${name}
           COMMAND ${CPATTN_PYTHON} -m pytest -q -p no:cacheprovider ${t})
  set_tests_properties(python.${name} PROPERTIES LABELS python TIMEOUT 900
    ENVIRONMENT "${cpattn_pytest_env};OMP_NUM_THREADS=1")
endforeach()

# The PyTorch example runs (a few steps on 2 processes, and the math-attention baseline under
# torch.utils.checkpoint, the work of `cpattn train`'s default).
add_test(NAME python.example_torch_train
         COMMAND ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}/examples/torch_train.py --procs 2
                 --steps 4 --seq 64 --batch 2 --print-every 2)
add_test(NAME python.example_torch_train_math
         COMMAND ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}/examples/torch_train.py
                 --attention torch --recompute --steps 4 --seq 64 --batch 2 --print-every 2)
set_tests_properties(python.example_torch_train python.example_torch_train_math PROPERTIES
  LABELS python TIMEOUT 300 ENVIRONMENT "${cpattn_pytest_env}"
  PASS_REGULAR_EXPRESSION "final loss [0-9.]+ .*live ForwardResults 0")

# The Hugging Face transformers example (examples/hf_train.py): a tiny Qwen2-style model (its
# second layer a sliding window) with packed documents, attention dropout and gradient
# checkpointing at CP=4 on gloo processes; --check first compares step 0's loss and gradients
# with one process (1e-5, "ok"), then 3 AdamW steps.
add_test(NAME python.example_hf_train
         COMMAND ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}/examples/hf_train.py --model qwen2
                 --packed --procs 4 --steps 3 --seq 64 --batch 2 --print-every 1 --check
                 --timeout 120)
set_tests_properties(python.example_hf_train PROPERTIES
  LABELS python TIMEOUT 300 ENVIRONMENT "${cpattn_pytest_env};OMP_NUM_THREADS=1"
  PASS_REGULAR_EXPRESSION
    "check: cp=4 vs cp=1 at step 0: loss rel [^ ]+, grad rel [^ ]+ \\(limit 1e-5\\): ok.*final loss [0-9.]+ .*live ForwardResults 0"
  FAIL_REGULAR_EXPRESSION "FAILED;Traceback")

# The wheel a user installs (pip wheel --no-build-isolation, installed into a fresh virtual
# environment, imported from outside the tree): python/tests/check_wheel.sh.
add_test(NAME python.wheel
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_wheel.sh ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR}/wheel ${PROJECT_VERSION})
set_tests_properties(python.wheel PROPERTIES LABELS python TIMEOUT 1200
  PASS_REGULAR_EXPRESSION "wheel: ok")

# The Communicator conformance suite (tests/comm/conformance.cpp) and this backend's own checks
# on ProcessGroupCommunicator (python/src/), over a gloo ProcessGroup made in C++
# (process_group_conformance_main.cpp), one process per rank started by run_ranks.sh, for 1..4
# processes. Linked with the torch libraries of the module but torch_python (no Python here).
# torch's wheel has no gloo headers, which ProcessGroupGloo.hpp includes: gloo_shim/ declares
# the few gloo names it needs (see gloo_shim/gloo/cpattn_shim.h), unless that torch has them.
find_package(GTest REQUIRED)
add_executable(test_torch_communicator ${CMAKE_CURRENT_LIST_DIR}/process_group_conformance_main.cpp
               ${PROJECT_SOURCE_DIR}/tests/comm/conformance.cpp
               ${PROJECT_SOURCE_DIR}/python/src/process_group_communicator.cpp)
target_include_directories(test_torch_communicator PRIVATE ${PROJECT_SOURCE_DIR}/tests
                           ${PROJECT_SOURCE_DIR}/python/src)
set(cpattn_gloo_headers)
if(NOT EXISTS ${cpattn_torch_dir}/include/gloo/algorithm.h)
  set(cpattn_gloo_headers ${CMAKE_CURRENT_LIST_DIR}/gloo_shim)
endif()
target_include_directories(test_torch_communicator SYSTEM PRIVATE ${cpattn_gloo_headers}
  ${cpattn_torch_dir}/include ${cpattn_torch_dir}/include/torch/csrc/api/include)
target_compile_definitions(test_torch_communicator PRIVATE
  _GLIBCXX_USE_CXX11_ABI=${cpattn_torch_cxx11_abi} USE_C10D_GLOO)
foreach(lib c10 torch torch_cpu)
  target_link_libraries(test_torch_communicator PRIVATE ${CPATTN_TORCH_LIB_${lib}})
endforeach()
target_link_libraries(test_torch_communicator PRIVATE cpattn cpattn_flags GTest::gtest)
set_target_properties(test_torch_communicator PROPERTIES BUILD_RPATH "${cpattn_torch_dir}/lib")
foreach(np 1 2 3 4)
  add_test(NAME python.torch_communicator_np${np}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_ranks.sh ${np} 240
                   $<TARGET_FILE:test_torch_communicator>)
  set_tests_properties(python.torch_communicator_np${np} PROPERTIES LABELS "python;comm"
                       TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The deadline check closes its group's connections: a group of its own (1 rank: no connections;
# 3: a peer that is not the one the timed-out receive waited for).
foreach(np 1 3)
  add_test(NAME python.torch_communicator_deadline_np${np}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_ranks.sh ${np} 60
                   $<TARGET_FILE:test_torch_communicator> --gtest_filter=ProcessGroupDeadline.*)
  set_tests_properties(python.torch_communicator_deadline_np${np} PROPERTIES
                       LABELS "python;comm" TIMEOUT 90 PROCESSORS ${np})
endforeach()

# ctest -j starts the tests in descending COST. A fresh build tree has no measured times yet
# (Testing/Temporary/CTestCostData.txt), so these, the longest of the suite and declared last,
# would start last and the run would end with one of them alone on the machine. Their COST is
# their seconds under `ctest -j2` in a fresh clone on a 2-core AMD Zen 3 (scripts/test.sh), so
# they start first. A fixed COST also takes the place of the times a reused tree measured.
foreach(test_cost python.wheel:231 python.test_compile:118 python.test_transformers:72
                  python.test_faults:42 python.test_varlen:37 python.test_torch_library:35
                  python.test_sdpa:33 python.example_hf_train:25 python.test_checkpoint:23
                  python.test_features:19)
  string(REPLACE ":" ";" test_cost ${test_cost})
  list(GET test_cost 0 test)
  list(GET test_cost 1 cost)
  set_tests_properties(${test} PROPERTIES COST ${cost})
endforeach()
