// What the ranks of a group must agree on before they work together: every process parses its own
// command line (under mpirun), so a run first exchanges its configuration, field by field, and
// fails on every rank in the first second when one rank was started differently. Also: results
// and errors of work done by rank 0 alone (reading or writing a checkpoint), shared with every
// rank so that all of them succeed or fail alike.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpattn/communicator.h"
#include "cpattn/error.h"

namespace cpattn::train {

/// An error that every rank of a group throws at the same point with the same code (after a
/// collective told each of them), so a process may end normally with its exit status instead of
/// aborting its peers (MPI_Abort). Thrown by agree_on_fields, rank0_result and train().
class GroupError : public Error {
 public:
  using Error::Error;
};

/// One setting of a run, compared by `value`. `note` is shown next to the value but not compared
/// (e.g. the --text path, when the value is the text's size and digest: two ranks may read the
/// same text from different paths). `training` marks settings that shape the trained weights
/// (a checkpoint resumes only under equal values of those).
struct ConfigField {
  std::string flag;   ///< "--dropout"; internal settings without a flag use a dotted name
  std::string value;  ///< canonical text of the value, e.g. "0.1" (format_value)
  std::string note;   ///< shown as "<note> (<value>)" when not empty
  bool training = true;
  /// The value of a run whose fields leave this one out (a field listed only when it is not its
  /// default, e.g. "ring" for --strategy): what agree_on_fields shows for such a rank.
  std::string absent_value = {};

  /// "<value>", or "<note> (<value>)".
  std::string shown() const;
};

/// The shortest text that reads back as exactly `v` ("0.1", "3e-05", "nan"): two values that
/// differ in any bit differ in text.
std::string format_value(double v);
std::string format_value(float v);

/// Every rank passes its own fields (the same flags, in the same order, on every rank when the
/// ranks run the same program). Collective: the fields of every rank are exchanged (one
/// allreduce of the sizes, one all_to_all of the encoded lists) and compared with every other
/// rank's. When any value differs, every rank throws GroupError(kInvalidArgument)
/// "<what>: the ranks were started with different settings: rank 0 has --dropout 0.1, rank 1
/// has 0.2; ..." naming each differing field and which ranks hold which value (a flag that only
/// some ranks have shows the others as "<absent_value> (the default)", or "(absent)" when the
/// field has no absent_value). Communication errors propagate
/// (kTimeout after the communicator's deadline when a rank never arrives).
void agree_on_fields(Communicator& comm, const std::vector<ConfigField>& fields,
                     const std::string& what);

/// Start-up errors shared: each rank passes the Error its own start-up (reading its files,
/// validating its settings) threw, or nullopt. Collective. When any rank failed, every rank
/// throws GroupError with the code of the lowest failing rank and "rank 1: <its message>" for
/// every failing rank ("every rank: <message>" when all failed with the same message), so a
/// rank with a bad setting fails the whole job at once instead of leaving its peers waiting.
void share_startup_errors(Communicator& comm, const std::optional<Error>& mine);

/// The bytes a rank sends for its fields in agree_on_fields and share_startup_errors: per field,
/// flag, value, note and absent_value, each as a uint32 length and its bytes.
std::vector<std::byte> encode_fields(const std::vector<ConfigField>& fields);

/// Reads encode_fields's bytes. Any bytes are accepted (they come from a peer, maybe of another
/// program): a malformed tail is dropped, so such a rank's fields differ from the others' and are
/// reported as such.
std::vector<ConfigField> decode_fields(std::span<const std::byte> bytes);

/// What agree_on_fields throws for the encoded fields of every rank (rank r's at [r]), or
/// nullopt when every rank holds the same values.
std::optional<GroupError> settings_disagreement(const std::vector<std::vector<std::byte>>& by_rank,
                                                const std::string& what);

/// What share_startup_errors throws for the encoded errors of every rank (rank r's at [r]; no
/// field: no error), or nullopt when none failed. An error code that does not read as a number
/// is reported as kPeerFailed.
std::optional<GroupError> startup_failure(const std::vector<std::vector<std::byte>>& by_rank);

/// Runs fn() on rank 0 only and hands its result to every rank: every rank returns rank 0's
/// bytes, or, when fn threw a cpattn::Error, every rank throws GroupError with its code and
/// message (other exceptions of fn propagate on rank 0 only). Collective; the bytes travel
/// point-to-point from rank 0 (bitwise, any size).
std::vector<std::byte> rank0_result(Communicator& comm,
                                    const std::function<std::vector<std::byte>()>& fn);

}  // namespace cpattn::train
