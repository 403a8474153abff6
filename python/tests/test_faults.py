"""Faults: a process of the group dies in the middle of a training step; the others raise
cpattn.Error (timeout or peer_failed) within the communicator's deadline instead of hanging."""

import os
import time

import torch

import cpattn
from helpers import run_processes

DEADLINE_S = 5.0


def _one_rank_dies(rank, world):
    q = torch.randn(1, 64, 2, 16, requires_grad=True)
    torch.manual_seed(0)
    out = cpattn.ring_attention(q, q, q, causal=True, dropout_p=0.1, timeout=DEADLINE_S)
    if rank == 2:
        os._exit(0)  # gone between the forward and the backward: its peers wait for it
    start = time.monotonic()
    try:
        out.sum().backward()
    except cpattn.Error as e:
        return {"code": e.code, "seconds": time.monotonic() - start, "message": str(e)}
    return {"code": None, "seconds": time.monotonic() - start, "message": ""}


def test_a_dead_rank_makes_every_other_rank_raise_within_the_deadline():
    start = time.monotonic()
    outcomes = run_processes(4, _one_rank_dies, expect_errors=True, timeout=60)
    assert time.monotonic() - start < 60
    for rank, (status, value) in enumerate(outcomes):
        if rank == 2:
            assert status == "missing"  # it exited without a word
            continue
        assert status == "ok", value
        # Which error a peer sees depends on when gloo notices: its wait times out, another peer's
        # failure reaches it, or the dead process's closed connection fails a transfer at once.
        assert value["code"] in ("timeout", "peer_failed", "communication"), value
        if value["code"] == "communication":
            assert "rank 2" in value["message"], value
        assert value["seconds"] <= DEADLINE_S + 5, value


def _one_rank_stalls(rank, world):
    q = torch.randn(1, 64, 2, 16, requires_grad=True)
    torch.manual_seed(0)
    out = cpattn.ring_attention(q, q, q, causal=True, timeout=DEADLINE_S)
    if rank == 1:
        time.sleep(3 * DEADLINE_S)  # stuck (a stopped process, a hung data loader)
        os._exit(0)
    start = time.monotonic()
    try:
        out.sum().backward()
    except cpattn.Error as e:
        return {"code": e.code, "seconds": time.monotonic() - start}
    return {"code": None, "seconds": time.monotonic() - start}


def test_a_stalled_rank_makes_every_other_rank_time_out_within_the_deadline():
    outcomes = run_processes(4, _one_rank_stalls, expect_errors=True, timeout=60)
    for rank, (status, value) in enumerate(outcomes):
        if rank == 1:
            continue
        assert status == "ok", value
        # Its neighbours time out waiting for it; the others time out or see a peer fail.
        assert value["code"] in ("timeout", "peer_failed"), value
        assert DEADLINE_S - 1 <= value["seconds"] <= DEADLINE_S + 5 or \
            value["code"] == "peer_failed", value


def _one_rank_never_calls(rank, world):
    q = torch.randn(1, 64, 4, 16)
    if rank == 3:
        time.sleep(3 * DEADLINE_S)  # never enters the call (a crashed data loader, a bug)
        os._exit(0)
    start = time.monotonic()
    try:  # no seq_len: the whole length comes from a sum over the group, under the deadline
        cpattn.ring_attention(q, q, q, causal=True, timeout=DEADLINE_S, strategy="hybrid:2x2")
    except cpattn.Error as e:
        return {"code": e.code, "seconds": time.monotonic() - start, "message": str(e)}
    return {"code": None, "seconds": time.monotonic() - start, "message": ""}


def test_a_rank_that_never_calls_makes_the_others_raise_within_the_deadline():
    outcomes = run_processes(4, _one_rank_never_calls, expect_errors=True, timeout=60)
    for rank, (status, value) in enumerate(outcomes):
        if rank == 3:
            continue
        assert status == "ok", value
        assert value["code"] in ("timeout", "peer_failed"), value
        assert value["seconds"] <= DEADLINE_S + 3, value
