# Runs of the `cpattn` program itself: the verify sweep must pass (text and JSON, 1 and 2
# threads), and bad options must be rejected with a message instead of running.
add_test(NAME cli.verify COMMAND cpattn_cli verify)
add_test(NAME cli.verify_two_threads_json COMMAND cpattn_cli verify --threads 2 --json)
set_tests_properties(cli.verify PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "16 cases: 16 passed, 0 failed")
set_tests_properties(cli.verify_two_threads_json PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "\"failed\": 0,[ \n]*\"pass\": true")
add_test(NAME cli.verify_rejects_zero_threads COMMAND cpattn_cli verify --threads 0)
set_tests_properties(cli.verify_rejects_zero_threads PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "--threads: Value 0 not in range 1 to 1024")

# `verify --cp`: every CP strategy (ring, allgather, ulysses, hybrid grids) over in-process ranks against the reference and the single-rank kernel,
# and (with MPI) over mpirun processes, rank 0 printing. Ring options without --cp are refused.
add_test(NAME cli.verify_ring_threads
         COMMAND cpattn_cli verify --cp 3 --layout zigzag --causal --dropout 0.1)
set_tests_properties(cli.verify_ring_threads PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "4 cases: 4 passed, 0 failed")
# Every strategy one option picks: ring and allgather at P = 3 above (8 query heads cannot split
# over 3), a hybrid grid with packed documents here; an impossible grid is refused.
add_test(NAME cli.verify_hybrid_threads
         COMMAND cpattn_cli verify --cp 4 --strategy hybrid:2x2 --layout striped --docs --causal
                 --seq 301)
set_tests_properties(cli.verify_hybrid_threads PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "2 cases: 2 passed, 0 failed")
add_test(NAME cli.verify_rejects_impossible_grid
         COMMAND cpattn_cli verify --cp 4 --strategy hybrid:3x2 --causal)
set_tests_properties(cli.verify_rejects_impossible_grid PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "U x R must cover the group of 4 ranks")
add_test(NAME cli.verify_ring_options_need_cp COMMAND cpattn_cli verify --layout zigzag)
set_tests_properties(cli.verify_ring_options_need_cp PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "need --cp P, --varlen or --backend mpi")
if(CPATTN_HAVE_MPI)
  add_test(NAME cli.verify_ring_mpi_np2
           COMMAND ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:cpattn_cli> verify
                   --backend mpi --cp 2)
  set_tests_properties(cli.verify_ring_mpi_np2 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
    PROCESSORS 2 PASS_REGULAR_EXPRESSION "40 cases: 40 passed, 0 failed")
endif()

# `verify --varlen`: a varlen call (flash-attn's cu_seqlens; 1-token and empty documents) on the
# document-balanced layout, every strategy at P = 4, against the reference, the kernel and each
# document run alone; on one rank without --cp (with dropout: no per-document row); --docs with it
# and a bad length are refused.
add_test(NAME cli.verify_varlen
         COMMAND cpattn_cli verify --varlen 1,7,300,0,5,1025 --cp 4 --causal --window-left 200
                 --heads-q 4 --heads-kv 2 --dqk 32 --dv 32)
set_tests_properties(cli.verify_varlen PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "varlen \\(6 documents, 1338 tokens\\).*Varlen6_CausalWindow_GQA4x2_S1338_D32x32_p0_W200xinf_doc_zigzag_cp4_vs_documents .*12 cases: 12 passed, 0 failed")
add_test(NAME cli.verify_varlen_one_rank
         COMMAND cpattn_cli verify --varlen 3,0,1,40 --causal --dropout 0.1)
set_tests_properties(cli.verify_varlen_one_rank PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "Varlen4_Causal_GQA8x2_S44_D64x64_p0p1_doc_zigzag_cp1 .*6 cases: 6 passed, 0 failed")
add_test(NAME cli.verify_varlen_refuses_docs COMMAND cpattn_cli verify --varlen 3,4 --docs --cp 2)
set_tests_properties(cli.verify_varlen_refuses_docs PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "--varlen gives the documents; --docs goes without it")
add_test(NAME cli.verify_varlen_rejects_bad_length COMMAND cpattn_cli verify --varlen 3,x)
set_tests_properties(cli.verify_varlen_rejects_bad_length PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "--varlen: 'x' is not a document length in \\[0, 2\\^40\\]")

# A word that is no subcommand is named, with the subcommands there are (exit 11).
add_test(NAME cli.unknown_subcommand COMMAND cpattn_cli bogus)
set_tests_properties(cli.unknown_subcommand PROPERTIES LABELS cli WILL_FAIL TRUE)
# A flag the parser refuses, its value holding a newline: cpattn's one error line, exit 11.
add_test(NAME cli.unknown_flag_one_line
         COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                 "^cpattn: error \\(invalid_argument\\): The following arguments were not expected: .*ring\\\\nx.* \\(cpattn plan --help\\)$"
                 $<TARGET_FILE:cpattn_cli> plan --cp 4 --strategy "ring\nx")
set_tests_properties(cli.unknown_flag_one_line PROPERTIES LABELS cli
                     PASS_REGULAR_EXPRESSION "expect_failure: OK")
# An empty value of a numeric flag is refused, naming the flag (CLI11 would read it as 0: --lr ''
# trained nothing, --dropout '' turned dropout off), on every subcommand.
foreach(cmd_flag IN ITEMS "train;--lr" "train;--dropout" "generate;--temperature" "generate;--tokens")
  list(GET cmd_flag 0 cmd)
  list(GET cmd_flag 1 flag)
  add_test(NAME cli.empty_value_refused_${cmd}${flag}
           COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                   "^cpattn: error \\(invalid_argument\\): ${flag}: an empty string is not a number \\(cpattn ${cmd} --help\\)$"
                   $<TARGET_FILE:cpattn_cli> ${cmd} ${flag} "")
  set_tests_properties(cli.empty_value_refused_${cmd}${flag} PROPERTIES LABELS cli
                       PASS_REGULAR_EXPRESSION "expect_failure: OK")
endforeach()
add_test(NAME cli.unknown_subcommand_named COMMAND cpattn_cli bogus)
set_tests_properties(cli.unknown_subcommand_named PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "^cpattn: error \\(invalid_argument\\): unknown subcommand 'bogus'; the subcommands are [a-z, ]*train")

# `cpattn --version` names the version of the program and of the library it runs on.
add_test(NAME cli.version COMMAND cpattn_cli --version)
set_tests_properties(cli.version PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "^cpattn ${PROJECT_VERSION} \\(library ${PROJECT_VERSION}, built ")

# The kernel ISA: `verify` names the path it ran, CPATTN_ISA forces one (generic exists on every
# CPU), and a bad value is refused naming the accepted ones.
add_test(NAME cli.verify_isa_generic COMMAND cpattn_cli verify)
set_tests_properties(cli.verify_isa_generic PROPERTIES LABELS cli ENVIRONMENT CPATTN_ISA=generic
  PASS_REGULAR_EXPRESSION "kernel ISA generic \\(CPATTN_ISA=generic; available: generic.*16 cases: 16 passed, 0 failed")
string(JOIN ", " cpattn_isa_names ${CPATTN_ISAS})
string(JOIN "|" cpattn_isa_choice ${CPATTN_ISAS})
add_test(NAME cli.verify_isa_invalid COMMAND cpattn_cli verify)
set_tests_properties(cli.verify_isa_invalid PROPERTIES LABELS cli ENVIRONMENT CPATTN_ISA=sse9
  PASS_REGULAR_EXPRESSION "cpattn: error \\(invalid_argument\\): CPATTN_ISA='sse9': expected one of auto, ${cpattn_isa_names} \\(")
add_test(NAME cli.version_names_isa COMMAND cpattn_cli --version)
set_tests_properties(cli.version_names_isa PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "; kernel ISA (${cpattn_isa_choice}) \\(available: generic")

# `cpattn plan`: the table of every strategy with a recommendation, valid JSON, and bad document
# lists refused with the accepted forms.
add_test(NAME cli.plan COMMAND cpattn_cli plan --seq 8192 --cp 4 --causal)
set_tests_properties(cli.plan PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "\\| hybrid:2x2 \\|.*recommended: [a-z:0-9]+ \\(predicted")
add_test(NAME cli.plan_json
         COMMAND cpattn_cli plan --seq 1000 --cp 8 --layout contiguous --docs mean:64 --causal --json)
set_tests_properties(cli.plan_json PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "\"recommended\": \"[a-z:0-9]+\"")
add_test(NAME cli.plan_doc_zigzag
         COMMAND cpattn_cli plan --seq 4096 --cp 8 --layout doc_zigzag --docs mean:256 --causal)
set_tests_properties(cli.plan_doc_zigzag PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "doc_zigzag layout, P=8.*recommended: [a-z:0-9]+ \\(predicted")
add_test(NAME cli.plan_rejects_bad_docs COMMAND cpattn_cli plan --seq 10 --cp 2 --docs 5x,5)
set_tests_properties(cli.plan_rejects_bad_docs PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "--docs: '5x' is not a document length in \\[1, 2\\^40\\]; expected L1,L2,... or mean:N")

# `verify --dtype`: the kernel sweep and the ring in bf16 and fp16 (q, k, v, dout and the results;
# lse fp32) under the same tolerance rule; a strategy that takes fp32 only is refused.
add_test(NAME cli.verify_bf16 COMMAND cpattn_cli verify --dtype bf16)
set_tests_properties(cli.verify_bf16 PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "kernel vs float64 reference, bf16.*16 cases: 16 passed, 0 failed")
add_test(NAME cli.verify_fp16 COMMAND cpattn_cli verify --dtype fp16)
set_tests_properties(cli.verify_fp16 PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "16 cases: 16 passed, 0 failed")
add_test(NAME cli.verify_ring_bf16
         COMMAND cpattn_cli verify --cp 4 --dtype bf16 --layout zigzag)
set_tests_properties(cli.verify_ring_bf16 PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_bf16_zigzag_cp4.*8 cases: 8 passed, 0 failed")
add_test(NAME cli.verify_rejects_bf16_ulysses
         COMMAND cpattn_cli verify --cp 2 --dtype bf16 --strategy ulysses)
set_tests_properties(cli.verify_rejects_bf16_ulysses PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "strategy ulysses takes fp32 tensors only, got bf16")

# `verify --sink`, `--softcap X`, `--alibi`, `--slices FILE|SPEC`: each one on the kernel sweep
# and on CP cases passes and changes every case's errors (verify_changes.sh: the flag reached the
# problem that the kernel, the strategies and the reference solve); sinks add the dsink column.
# ($<SEMICOLON>: a ';' in a test's argument would split it in two.)
set(CPATTN_VERIFY_CHANGES bash ${CMAKE_CURRENT_LIST_DIR}/verify_changes.sh
    $<TARGET_FILE:cpattn_cli>)
add_test(NAME cli.verify_sink COMMAND ${CPATTN_VERIFY_CHANGES} --with --sink)
set_tests_properties(cli.verify_sink PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION " dv +dsink +ms.*_sink .*16 cases: 16 passed.*verify_changes: OK: 16 cases changed")
add_test(NAME cli.verify_softcap COMMAND ${CPATTN_VERIFY_CHANGES} --with --softcap 2.5)
set_tests_properties(cli.verify_softcap PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_cap2p5 .*verify_changes: OK: 16 cases changed")
add_test(NAME cli.verify_alibi COMMAND ${CPATTN_VERIFY_CHANGES} --with --alibi)
set_tests_properties(cli.verify_alibi PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_alibi .*verify_changes: OK: 16 cases changed")
# Every pair except keys 1 to 3 positions before or after the query: kp - qp <= -4 (causal,
# aligned bottom-right), kp = qp (bi_causal), kp - qp >= 4 (inv_causal, aligned top-left); a
# mask that moves every case of the sweep.
add_test(NAME cli.verify_slices_spec
         COMMAND ${CPATTN_VERIFY_CHANGES} --with --slices
                 "4:6000,0:5996,causal$<SEMICOLON> 0:6000,0:6000,bi_causal$<SEMICOLON>0:5996,4:6000,inv_causal")
set_tests_properties(cli.verify_slices_spec PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_slices3 .*verify_changes: OK: 16 cases changed")
# A slices file (comments, blank lines, spaces): prefix-LM on one CP shape, every strategy.
add_test(NAME cli.verify_slices_file_cp
         COMMAND ${CPATTN_VERIFY_CHANGES} --cp 2 --seq 197 --dropout 0.1 --layout zigzag
                 --with --slices ${CMAKE_CURRENT_LIST_DIR}/data/prefix_lm_slices.txt)
set_tests_properties(cli.verify_slices_file_cp PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_slices2_zigzag_cp2 .*verify_changes: OK: [1-9][0-9]* cases changed")
# softcap + ALiBi + slices through the CP strategies, with causal and dropout.
add_test(NAME cli.verify_features_cp
         COMMAND ${CPATTN_VERIFY_CHANGES} --cp 2 --seq 97 --causal --dropout 0.1
                 --with --softcap 3 --alibi --slices "0:97,0:20,full$<SEMICOLON>20:97,20:97,causal")
set_tests_properties(cli.verify_features_cp PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "_cap3_alibi_slices2_.*verify_changes: OK: [1-9][0-9]* cases changed")

# Bad values: cpattn's one error line, exit 11, before any case runs; an overlapping list gets
# the library's overlap error (resolve_params), a bad line of a file its line number.
function(cpattn_verify_rejects name regex)
  add_test(NAME cli.verify_rejects_${name}
           COMMAND ${CPATTN_EXPECT_FAILURE} --status 11 --one-line
                   "^cpattn: error \\(invalid_argument\\): ${regex}"
                   $<TARGET_FILE:cpattn_cli> verify ${ARGN})
  set_tests_properties(cli.verify_rejects_${name} PROPERTIES LABELS cli
                       PASS_REGULAR_EXPRESSION "expect_failure: OK")
endfunction()
cpattn_verify_rejects(softcap_zero "--softcap: expected a finite number > 0, got 0$" --softcap 0)
cpattn_verify_rejects(softcap_negative "--softcap: expected a finite number > 0, got -1$"
                      --softcap=-1)
cpattn_verify_rejects(softcap_text "Could not convert: --softcap = abc" --softcap abc)
cpattn_verify_rejects(slices_position
                      "--slices: slice 0 '1:2,x:4,full': k_begin 'x' is not a position"
                      --slices 1:2,x:4,full)
cpattn_verify_rejects(slices_fields
                      "--slices: slice 0 '0:4,0:4': has 2 fields separated by ','" --slices 0:4,0:4)
cpattn_verify_rejects(slices_type
                      "--slices: slice 0 '0:4,0:4,diagonal': unknown slice type 'diagonal'"
                      --slices 0:4,0:4,diagonal)
cpattn_verify_rejects(slices_no_file
                      "--slices 'no_such_slices.txt': no such file, and not slices either"
                      --slices no_such_slices.txt)
cpattn_verify_rejects(slices_reversed "--slices: slice 0 must have 0 <= q_begin <= q_end"
                      --slices 9:3,0:4,full)
cpattn_verify_rejects(slices_overlap
                      "--slices: mask slices must not overlap: slice 0 [(]q [[]0, 8[)], k [[]0, 8[)], full[)] and slice 1 "
                      --cp 2 --slices "0:8,0:8,full$<SEMICOLON>4:12,4:12,causal")
cpattn_verify_rejects(slices_none "--slices '.*no_slices.txt': no slice given \\(only blanks or comments\\)"
                      --slices ${CMAKE_CURRENT_LIST_DIR}/data/no_slices.txt)
cpattn_verify_rejects(slices_file_line
                      "--slices '.*bad_slices.txt': slice 1 [(]line 3[)] '10:20,10:20,triangular': unknown slice type"
                      --slices ${CMAKE_CURRENT_LIST_DIR}/data/bad_slices.txt)
# The features over mpirun processes: each rank reads the slices file, and the ranks agree on
# every feature before any case runs.
if(CPATTN_HAVE_MPI)
  add_test(NAME cli.verify_features_mpi_np2
           COMMAND ${CPATTN_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:cpattn_cli> verify
                   --backend mpi --cp 2 --layout zigzag --sink --softcap 3 --alibi
                   --slices ${CMAKE_CURRENT_LIST_DIR}/data/prefix_lm_slices.txt)
  set_tests_properties(cli.verify_features_mpi_np2 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
    PROCESSORS 2
    PASS_REGULAR_EXPRESSION "_sink_cap3_alibi_slices2_zigzag_cp2 .*24 cases: 24 passed, 0 failed")
endif()
