// Checkpoint directories: preparing and locking one before training, atomic saves, bounded
// loads.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "cpattn/error.h"
#include "train/checkpoint.h"
#include "train/files.h"

namespace cpattn::train {

std::string checkpoint_path(const std::string& dir) {
  return (std::filesystem::path(dir) / kCheckpointFileName).string();
}

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)) {}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

CheckpointDirLock prepare_checkpoint_dir(const std::string& dir, bool may_replace) {
  CPATTN_CHECK(!dir.empty(), ErrorCode::kInvalidArgument, "--save needs a directory");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CPATTN_CHECK(!ec, ErrorCode::kIo, "--save '", dir,
               "': cannot create the directory: ", ec.message());
  CPATTN_CHECK(std::filesystem::is_directory(dir, ec), ErrorCode::kIo, "--save '", dir,
               "' is not a directory");
  // The lock is on a file of its own, opened for writing: NFS emulates flock with POSIX locks,
  // whose exclusive kind needs a descriptor open for writing, which a directory's cannot be.
  const std::string lock_path = (std::filesystem::path(dir) / kCheckpointLockName).string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  CPATTN_CHECK(fd >= 0, ErrorCode::kIo, "--save '", dir, "': cannot open its lock file '",
               lock_path, "': ", std::strerror(errno));
  CheckpointDirLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    CPATTN_CHECK(errno != EWOULDBLOCK, ErrorCode::kInvalidArgument, "--save '", dir,
                 "' is in use by another running cpattn train: two runs saving into one "
                 "directory would replace each other's checkpoints");
    // Any other error is a file system without locks (ENOLCK, EOPNOTSUPP...): the run saves
    // unlocked, as runs did before there was a lock.
  }
  CPATTN_CHECK(may_replace || !std::filesystem::exists(
                                  std::filesystem::symlink_status(checkpoint_path(dir), ec)),
               ErrorCode::kInvalidArgument, "--save '", dir, "' holds a checkpoint already (",
               checkpoint_path(dir),
               "): refusing to replace another run's checkpoint; pass --overwrite to replace it, "
               "or --resume '",
               dir, "' to continue that run");
  check_creatable(checkpoint_path(dir), "--save");
  check_creatable(temporary_path(checkpoint_path(dir)), "--save");
  return lock;
}

bool same_checkpoint(const std::string& save_dir, const std::string& resume_dir) {
  if (save_dir.empty() || resume_dir.empty()) return false;
  std::error_code ec;
  return std::filesystem::equivalent(checkpoint_path(save_dir), checkpoint_path(resume_dir), ec);
}

void save_checkpoint(const std::string& dir, const Checkpoint& checkpoint) {
  write_file_atomically(checkpoint_path(dir), encode_checkpoint(checkpoint));
}

std::vector<std::byte> read_checkpoint_bytes(const std::string& dir) {
  const std::vector<uint8_t> bytes =
      read_regular_file(checkpoint_path(dir), kMaxCheckpointBytes, "--resume checkpoint");
  const auto* p = reinterpret_cast<const std::byte*>(bytes.data());
  return {p, p + bytes.size()};
}

Checkpoint load_checkpoint(const std::string& dir) {
  return decode_checkpoint(read_checkpoint_bytes(dir), checkpoint_path(dir));
}

}  // namespace cpattn::train
