// The training job's file rules, in one place: inputs are regular files of bounded size (a FIFO or
// a device never blocks or floods the job), outputs are written to a temporary file, fsynced and
// renamed (a crash leaves the previous version intact), and an output never overwrites an input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cpattn::train {

/// Reads the whole file `path` as bytes. `what` names it in errors (e.g. "--text"). The file is
/// opened non-blocking and must be a regular file (a FIFO, directory or device is refused before
/// any read, so nothing blocks) of at most max_bytes.
/// Throws Error(kIo) "<what> '<path>': cannot open: <strerror>" or a read error;
/// Error(kInvalidArgument) "<what> '<path>' is not a regular file (a FIFO)" and
/// "<what> '<path>' has N bytes, more than the limit of M".
std::vector<uint8_t> read_regular_file(const std::string& path, int64_t max_bytes,
                                       const std::string& what);

/// The temporary sibling an atomic write goes through: "<path>.tmp".
std::string temporary_path(const std::string& path);

/// Removes whatever is at temporary_path(path) (a file a crashed run left, or a link placed
/// there: removed, never written through), so the write that follows creates a new file.
/// Throws Error(kIo) naming it when it cannot be removed.
void clear_temporary(const std::string& path);

/// Writes `bytes` to a new temporary_path(path) (clear_temporary first, then created
/// exclusively, not following links), fsyncs it, renames it over `path` and fsyncs the
/// directory, so `path` holds either its previous contents or all of `bytes`, never a mix.
/// Every write is checked (a full disk is an error). Throws Error(kIo) naming the file, the step
/// that failed and strerror; the temporary file is removed on failure.
void write_file_atomically(const std::string& path, std::span<const std::byte> bytes);

/// Renames the finished file `from` over `to` and fsyncs the directory of `to` (the last step of
/// an atomic write whose data another program wrote, e.g. gnuplot). Throws Error(kIo).
void commit_file(const std::string& from, const std::string& to);

/// True when both paths exist and name the same file (same device and inode; links and
/// different spellings of one path included).
bool same_file(const std::string& a, const std::string& b);

/// Throws Error(kInvalidArgument) "<output_what> '<output>' is the <input_what> file: refusing to
/// overwrite an input" when same_file(output, input), or when the two spellings are equal (an
/// input that does not exist yet cannot be confused with an output, but the same name is still
/// refused). Empty paths are never compared.
void check_not_input(const std::string& output, const std::string& output_what,
                     const std::string& input, const std::string& input_what);

/// Throws Error(kIo) unless the job may write its output `path` (`what` names the option): it
/// does not exist or is a regular file (never a directory, device, FIFO or socket, which an output
/// would replace or block on: `--plot /dev/full` used to replace the device with a PNG), and a
/// file can really be created in its directory: a probe file is created there (O_EXCL) and
/// removed at once, so a directory that refuses files (/proc, a read-only mount, one root may
/// "access" but not write) fails now, before any training. Touches nothing at `path`.
void check_creatable(const std::string& path, const std::string& what);

}  // namespace cpattn::train
