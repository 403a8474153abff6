"""cpattn.checkpoint: torch.utils.checkpoint plus a guard that the recompute replays what the
first forward did.

Every cpattn attention call inside the checkpointed function records, in the first forward, the
RngState it drew, the digest of its q/k/v and its fingerprint. When autograd recomputes the
function, call i must draw the same RngState, see the same inputs and be made with the same
arguments (softcap, scale, mask, dropout_p, ...) as the first forward's call i, or the recompute
raises cpattn.Error("recompute diverged: ...") instead of producing gradients of other dropout
masks than the ones the loss was computed with. The record belongs to the one checkpoint call
that made it: a context variable points to it only while that call's function runs (first
forward and recompute), so nested checkpoints, other threads and other calls never see it.
"""

import contextvars

import torch.utils.checkpoint

from . import _cpattn
from ._errors import error

# The record of the checkpointed function that is running now, if any (set and reset around
# each run of that function; it holds no state between runs).
_running = contextvars.ContextVar("cpattn_checkpoint_running", default=None)


def active_record():
    """The _Record of the checkpointed function running in this context, or None."""
    return _running.get()


def _rng_text(seed, offset):
    return f"{{seed={seed}, offset={offset}}}"


class _Record:
    """The attention calls of one checkpointed function: recorded by the first forward, replayed
    (and checked) by every recompute."""

    def __init__(self):
        # (seed, offset, inputs_digest, fingerprint) per attention call, in call order
        self.calls = []
        self.replaying = False
        self.cursor = 0

    def on_call(self, seed, offset, inputs_digest, fingerprint):
        if not self.replaying:
            self.calls.append((seed, offset, inputs_digest, fingerprint))
            return
        i = self.cursor
        self.cursor += 1
        if i >= len(self.calls):
            raise error("recompute_diverged",
                        f"recompute diverged: the recompute made attention call {i + 1}, the "
                        f"first forward made only {len(self.calls)}")
        want_seed, want_offset, want_digest, want_fingerprint = self.calls[i]
        if (seed, offset) != (want_seed, want_offset):
            raise error("recompute_diverged",
                        f"recompute diverged: attention call {i + 1} of the checkpointed function "
                        f"drew RngState {_rng_text(seed, offset)}, the first forward drew "
                        f"{_rng_text(want_seed, want_offset)} (is the checkpoint's "
                        f"preserve_rng_state off, or did the function draw other random numbers "
                        f"the second time?)")
        if inputs_digest != want_digest:
            raise error("recompute_diverged",
                        f"recompute diverged: attention call {i + 1} of the checkpointed function "
                        f"got other q/k/v than in the first forward (digest "
                        f"{inputs_digest:016x}, first {want_digest:016x})")
        differences = _cpattn.recompute_differences(want_fingerprint, fingerprint)
        if differences:
            raise error("recompute_diverged",
                        f"recompute diverged: attention call {i + 1} of the checkpointed function "
                        f"was made with other arguments than in the first forward: {differences}")

    def finish_replay(self):
        if self.replaying and self.cursor != len(self.calls):
            raise error("recompute_diverged",
                        f"recompute diverged: the recompute made {self.cursor} attention calls, "
                        f"the first forward {len(self.calls)}")


def checkpoint(fn, *args, use_reentrant=False, **kwargs):
    """torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=use_reentrant, **kwargs) with
    the replay guard of this module: the recompute of fn must draw, in every cpattn attention
    call, the RngState the first forward drew, on the same inputs and with the same arguments,
    or backward raises
    cpattn.Error (code "recompute_diverged"). Other keyword arguments (preserve_rng_state, ...)
    go to torch.utils.checkpoint."""
    record = _Record()
    runs = [0]

    def run(*a, **kw):
        record.replaying = runs[0] > 0
        record.cursor = 0
        runs[0] += 1
        token = _running.set(record)
        try:
            result = fn(*a, **kw)
            record.finish_replay()
            return result
        finally:
            _running.reset(token)

    return torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=use_reentrant, **kwargs)
