# Extra registrations of the comm tests: the shared conformance bodies, and the MPI launches
# (the conformance suite under mpirun with 1..4 processes, failure scenarios that must end
# the job with a non-zero status, and the multi-host test). Included by tests/CMakeLists.txt.
target_sources(test_comm PRIVATE ${CMAKE_CURRENT_LIST_DIR}/conformance.cpp)

if(CPATTN_HAVE_MPI)
  add_executable(test_comm_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi_conformance_main.cpp
                               ${CMAKE_CURRENT_LIST_DIR}/conformance.cpp)
  target_include_directories(test_comm_mpi PRIVATE ${CPATTN_ROOT_test_comm})
  target_link_libraries(test_comm_mpi PRIVATE cpattn_test_support cpattn_flags GTest::gtest)
  add_executable(test_comm_mpi_failure ${CMAKE_CURRENT_LIST_DIR}/mpi_failure_driver.cpp)
  target_link_libraries(test_comm_mpi_failure PRIVATE cpattn_mpi cpattn_flags)
  foreach(np 1 2 3 4)
    add_test(NAME comm.mpi_conformance_np${np}
             COMMAND ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:test_comm_mpi>)
    set_tests_properties(comm.mpi_conformance_np${np} PROPERTIES LABELS "comm;mpi" TIMEOUT 120
                         PROCESSORS ${np})
  endforeach()

  # Without single-copy shared memory a rendezvous chunk waits for its sender's progress: the
  # mid-message cancel of AReceiveCancelledMidMessage... happens every time.
  add_test(NAME comm.mpi_cancel_mid_message_no_single_copy
           COMMAND ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:test_comm_mpi>
                   --gtest_filter=MpiCommunicator.AReceiveCancelledMidMessage*)
  set_tests_properties(comm.mpi_cancel_mid_message_no_single_copy PROPERTIES LABELS "comm;mpi"
                       TIMEOUT 60 PROCESSORS 2
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")

  add_test(NAME comm.mpi_failure_throw
           COMMAND ${CPATTN_EXPECT_FAILURE} --within 20
                   "rank 1: fatal: injected failure at ring step 2"
                   ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 3
                   $<TARGET_FILE:test_comm_mpi_failure> throw)
  add_test(NAME comm.mpi_failure_early_exit
           COMMAND ${CPATTN_EXPECT_FAILURE} --within 20
                   "rank [02]: fatal: .*timed out after 2 s waiting for .*rank 1"
                   ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 3
                   $<TARGET_FILE:test_comm_mpi_failure> early-exit)
  add_test(NAME comm.mpi_failure_abandoned_send
           COMMAND ${CPATTN_EXPECT_FAILURE} --within 20
                   "rank 0: fatal: .*isend to rank 1 \\(tag 8, .*refused: an earlier isend to rank 1 \\(tag 7, 4194304 bytes\\) was given up on"
                   ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2
                   $<TARGET_FILE:test_comm_mpi_failure> abandoned-send)
  set_tests_properties(comm.mpi_failure_throw comm.mpi_failure_early_exit PROPERTIES
                       LABELS "comm;mpi" TIMEOUT 30 PROCESSORS 3)
  set_tests_properties(comm.mpi_failure_abandoned_send PROPERTIES LABELS "comm;mpi" TIMEOUT 30
                       PROCESSORS 2)

  # Two hosts on one machine: network namespaces joined by a veth pair, one rank in each, MPI
  # over TCP on that link only (ring parity, verify, train --check); skipped (exit 77) where
  # namespaces cannot be created. The script's own limits (3 x 90 s) end before TIMEOUT.
  add_test(NAME comm.multihost
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/multihost.sh ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:test_cp_mpi> $<TARGET_FILE:cpattn_cli>)
  set_tests_properties(comm.multihost PROPERTIES LABELS "comm;mpi;multihost" TIMEOUT 300
                       PROCESSORS 2 SKIP_RETURN_CODE 77)
endif()
