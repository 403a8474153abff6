# Extra registrations of the train tests: `cpattn train` run as a program. Error cases must end
# with one line and the exit status of their ErrorCode (10 + code: io 18, invalid_argument 11);
# short runs check the JSON summary, metrics file and plot, in-process and under mpirun.
set(CPATTN_TRAIN_DATA ${CMAKE_CURRENT_BINARY_DIR}/train_data)
file(WRITE ${CPATTN_TRAIN_DATA}/empty.txt "")
file(WRITE ${CPATTN_TRAIN_DATA}/short.txt "a short text")
set(CPATTN_TRAIN_CLI $<TARGET_FILE:cpattn_cli> train)

add_test(NAME train.cli_missing_text
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 18 --one-line
                 "^cpattn: error \\(io\\): text file '/nonexistent/gpl.txt': cannot open: No such file"
                 ${CPATTN_TRAIN_CLI} --text /nonexistent/gpl.txt)
add_test(NAME train.cli_empty_text
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line "^cpattn: error \\(invalid_argument\\): .*is empty"
                 ${CPATTN_TRAIN_CLI} --text ${CPATTN_TRAIN_DATA}/empty.txt)
add_test(NAME train.cli_text_shorter_than_seq
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): .*has 12 bytes; need at least seq_len \\+ 1 = 65"
                 ${CPATTN_TRAIN_CLI} --text ${CPATTN_TRAIN_DATA}/short.txt --seq 64)
add_test(NAME train.cli_cp_zero
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): --cp must be >= 1, got 0$"
                 ${CPATTN_TRAIN_CLI} --cp 0)
add_test(NAME train.cli_heads_not_dividing
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): --heads \\(5\\) must divide --d-model \\(64\\)$"
                 ${CPATTN_TRAIN_CLI} --d-model 64 --heads 5)
set_tests_properties(train.cli_missing_text train.cli_empty_text train.cli_text_shorter_than_seq
                     train.cli_cp_zero train.cli_heads_not_dividing
                     PROPERTIES LABELS "train;cli" TIMEOUT 30)

set(CPATTN_TRAIN_TINY --steps 6 --layers 2 --d-model 16 --heads 2 --kv-heads 1 --seq 48
    --batch 2 --warmup 2)
add_test(NAME train.cli_tiny_run
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_run.sh ${CMAKE_CURRENT_BINARY_DIR}/train_run 6
                 ${CPATTN_TRAIN_CLI} --cp 3 --layout striped ${CPATTN_TRAIN_TINY})
set_tests_properties(train.cli_tiny_run PROPERTIES LABELS "train;cli" TIMEOUT 60)
# bf16 attention activations (fp32 master weights): the same run, --check at bf16's bound.
add_test(NAME train.cli_bf16_run
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_run.sh ${CMAKE_CURRENT_BINARY_DIR}/train_bf16 6
                 ${CPATTN_TRAIN_CLI} --cp 2 --dtype bf16 ${CPATTN_TRAIN_TINY})
set_tests_properties(train.cli_bf16_run PROPERTIES LABELS "train;cli" TIMEOUT 60)
add_test(NAME train.cli_bf16_needs_the_ring
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): --dtype bf16: strategy ulysses takes fp32 tensors only, got bf16"
                 ${CPATTN_TRAIN_CLI} --cp 2 --strategy ulysses --dtype bf16)
set_tests_properties(train.cli_bf16_needs_the_ring PROPERTIES LABELS "train;cli" TIMEOUT 30)

if(CPATTN_HAVE_MPI)
  add_test(NAME train.cli_mpi_run
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/cli_run.sh ${CMAKE_CURRENT_BINARY_DIR}/train_mpi 6
                   ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2 ${CPATTN_TRAIN_CLI} --backend mpi ${CPATTN_TRAIN_TINY})
  set_tests_properties(train.cli_mpi_run PROPERTIES LABELS "train;cli;mpi" TIMEOUT 60
                       PROCESSORS 2)
endif()

# The fault matrix (docs/reliability.md): one injected fault per test, each asserting detection on
# every rank, the exit status, the time bound (deadline 5 s) and what was kept. Label `faults`.
set(CPATTN_FAULTS sh ${CMAKE_CURRENT_LIST_DIR}/faults.sh)
set(CPATTN_FAULT_CASES nan_loss full_disk metrics_is_text plot_is_text plot_unwritable
    plot_onto_special_files fifo_text
    sigint_resume sigterm_resume sigterm_inside_step corrupted_checkpoint save_onto_another_checkpoint stdout_closed)
# Out of memory is provoked with `ulimit -v`, which a sanitizer's shadow memory cannot live under.
if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  list(APPEND CPATTN_FAULT_CASES out_of_memory rank_threads_refused)
endif()
set(CPATTN_MPI_FAULT_CASES mismatch_text mismatch_layout mismatch_dropout mismatch_seed
    mismatch_lr mismatch_steps mismatch_layers mismatch_causal missing_text_one_rank stopped_rank
    stopped_rank_check killed_rank sigterm_one_rank mpirun_without_backend)
foreach(fault ${CPATTN_FAULT_CASES})
  add_test(NAME train.faults.${fault}
           COMMAND ${CPATTN_FAULTS} ${fault} ${CMAKE_CURRENT_BINARY_DIR}/faults/${fault}
                   $<TARGET_FILE:cpattn_cli>)
  set_tests_properties(train.faults.${fault} PROPERTIES LABELS "train;faults" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "faults: OK: ${fault}")
endforeach()
if(CPATTN_HAVE_MPI)
  foreach(fault ${CPATTN_MPI_FAULT_CASES})
    add_test(NAME train.faults.${fault}
             COMMAND ${CPATTN_FAULTS} ${fault} ${CMAKE_CURRENT_BINARY_DIR}/faults/${fault}
                     $<TARGET_FILE:cpattn_cli> ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG})
    set_tests_properties(train.faults.${fault} PROPERTIES LABELS "train;faults;mpi" TIMEOUT 120
                         PROCESSORS 2 PASS_REGULAR_EXPRESSION "faults: OK: ${fault}")
  endforeach()
endif()

# `cpattn generate` from a trained checkpoint: prompt + tokens, deterministic for a seed.
add_test(NAME train.cli_generate
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/generate_run.sh ${CMAKE_CURRENT_BINARY_DIR}/generate
                 $<TARGET_FILE:cpattn_cli>)
set_tests_properties(train.cli_generate PROPERTIES LABELS "train;cli" TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "generate_run: OK")
add_test(NAME train.cli_bad_timeout
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): --timeout must be in \\[0.001, 1e\\+06\\] seconds \\(every wait on another rank has a deadline\\), got 0$"
                 ${CPATTN_TRAIN_CLI} --timeout 0)
set_tests_properties(train.cli_bad_timeout PROPERTIES LABELS "train;cli" TIMEOUT 30)
# --seed is read as text: CLI11 alone reads "-1" and values past 2^64 - 1 as 2^64 - 1.
foreach(seed_case "neg;-1" "big;18446744073709551616" "empty;")
  list(GET seed_case 0 name)
  list(LENGTH seed_case n)
  set(seed_text "")
  if(n GREATER 1)
    list(GET seed_case 1 seed_text)
  endif()
  add_test(NAME train.cli_bad_seed_${name}
           COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                   "^cpattn: error \\(invalid_argument\\): --seed: must be a whole number in \\[0, 2\\^64 - 1\\], got '${seed_text}'"
                   ${CPATTN_TRAIN_CLI} --seed "${seed_text}")
  set_tests_properties(train.cli_bad_seed_${name} PROPERTIES LABELS "train;cli" TIMEOUT 30)
endforeach()
