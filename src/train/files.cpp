// Bounded non-blocking reads of regular files, atomic writes (temporary file, fsync, rename, fsync
// of the directory) and the output-is-not-an-input rule.
#include "train/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cpattn/error.h"

namespace cpattn::train {

namespace {

std::string errno_text() { return std::strerror(errno); }

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a descriptor on scope exit (errors of close on a read-only descriptor do not matter).
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void fsync_directory(const std::string& dir) {
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  CPATTN_CHECK(d.fd >= 0, ErrorCode::kIo, "cannot open directory '", dir,
               "' to fsync it: ", errno_text());
  CPATTN_CHECK(::fsync(d.fd) == 0, ErrorCode::kIo, "fsync of directory '", dir,
               "' failed: ", errno_text());
}

}  // namespace

std::vector<uint8_t> read_regular_file(const std::string& path, int64_t max_bytes,
                                       const std::string& what) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block forever.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  CPATTN_CHECK(f.fd >= 0, ErrorCode::kIo, what, " '", path, "': cannot open: ", errno_text());
  struct stat st {};
  CPATTN_CHECK(::fstat(f.fd, &st) == 0, ErrorCode::kIo, what, " '", path,
               "': cannot stat: ", errno_text());
  CPATTN_CHECK(S_ISREG(st.st_mode), ErrorCode::kInvalidArgument, what, " '", path,
               "' is not a regular file (", file_kind(st.st_mode), ")");
  CPATTN_CHECK(st.st_size <= max_bytes, ErrorCode::kInvalidArgument, what, " '", path, "' has ",
               st.st_size, " bytes, more than the limit of ", max_bytes);
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    CPATTN_CHECK(n >= 0, ErrorCode::kIo, what, " '", path, "': read failed after ", done,
                 " bytes: ", errno_text());
    if (n == 0) break;  // the file shrank while being read: keep what is there
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

std::string temporary_path(const std::string& path) { return path + ".tmp"; }

void clear_temporary(const std::string& path) {
  const std::string tmp = temporary_path(path);
  CPATTN_CHECK(::unlink(tmp.c_str()) == 0 || errno == ENOENT, ErrorCode::kIo, "writing '", path,
               "': cannot remove the stale temporary file '", tmp, "': ", errno_text());
}

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  const std::string tmp = temporary_path(path);
  const auto fail = [&](const char* step) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::kIo,
                detail::str_cat("writing '", path, "': ", step, " of '", tmp, "' failed: ", why));
  };
  clear_temporary(path);
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
  if (f.fd < 0) fail("open");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // write(2) made no progress without saying why
    if (n <= 0) fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(f.fd) != 0) fail("fsync");
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) fail("close");
  commit_file(tmp, path);
}

void commit_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(from.c_str());
    throw Error(ErrorCode::kIo, detail::str_cat("cannot rename '", from, "' to '", to, "': ", why));
  }
  fsync_directory(directory_of(to));
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_not_input(const std::string& output, const std::string& output_what,
                     const std::string& input, const std::string& input_what) {
  if (output.empty() || input.empty()) return;
  CPATTN_CHECK(output != input && !same_file(output, input), ErrorCode::kInvalidArgument,
               output_what, " '", output, "' is the ", input_what,
               " file: refusing to overwrite an input");
}

void check_creatable(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    CPATTN_CHECK(!S_ISDIR(st.st_mode), ErrorCode::kIo, what, " '", path, "' is a directory");
    CPATTN_CHECK(S_ISREG(st.st_mode), ErrorCode::kIo, what, " '", path, "' is a ",
                 S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                 : S_ISFIFO(st.st_mode)                     ? "FIFO"
                                                            : "special file",
                 ", not a regular file: refusing to write over it");
  }
  const std::string dir = directory_of(path);
  CPATTN_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), ErrorCode::kIo, what, " '",
               path, "': directory '", dir, "' does not exist");
  const std::string probe = detail::str_cat(path, ".probe-", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  CPATTN_CHECK(fd >= 0, ErrorCode::kIo, what, " '", path, "': cannot create a file in directory '",
               dir, "': ", errno_text());
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace cpattn::train
