// Rendering of `cpattn verify` results: a fixed-width table for people, JSON for tools.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/verify.h"

namespace cpattn::cli {

/// Prints, per case, a line of max abs errors (out, lse, dq, dk, dv, and dsink when some case
/// has sinks: "-" in a row that did not judge it), its run time and PASS/FAIL, then a line of
/// the tolerances; finally a summary line. `title` heads the table.
void print_verify_table(std::FILE* out, const std::string& title,
                        const std::vector<VerifyResult>& results);

/// The same content as JSON: {"title", "rule", "cases": [{"name", "pass", "seconds",
/// "errors": {...}, "tolerances": {...}}], "passed", "failed", "pass"}. Infinite errors are null;
/// "dsink" is in errors and tolerances of the rows that judged it (VerifyResult::dsink).
nlohmann::json verify_json(const std::string& title, const std::vector<VerifyResult>& results);

/// True when every result passed.
bool all_passed(const std::vector<VerifyResult>& results);

}  // namespace cpattn::cli
