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
