# Extra registrations of the cp tests: the ring and the other strategies under mpirun with 2, 3
# and 4 processes (one rank per process, MpiCommunicator), compared with the reference and with in-process ranks bitwise.
# Included by tests/CMakeLists.txt after tests/comm/tests.cmake.
if(CPATTN_HAVE_MPI)
  add_executable(test_cp_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi_ring_main.cpp)
  target_link_libraries(test_cp_mpi PRIVATE cpattn_test_support cpattn_flags GTest::gtest)
  # The cp tests' include root (made by cpattn_test_area(cp)): ring_harness.h reads the ring's
  # private block skip (cp/ring_detail.h).
  target_include_directories(test_cp_mpi PRIVATE ${CMAKE_BINARY_DIR}/include_roots/test_cp)
  foreach(np 2 3 4)
    add_test(NAME cp.mpi_ring_np${np}
             COMMAND ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:test_cp_mpi>)
    set_tests_properties(cp.mpi_ring_np${np} PROPERTIES LABELS "cp;mpi" TIMEOUT 120
                         PROCESSORS ${np})
  endforeach()
endif()
