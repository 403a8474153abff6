"""Misuse raises cpattn.Error with a clear message (never a crash or a wrong number): wrong
dtype, shapes, layout, window, a sharding the group does not match, bad doc_ids."""

import time

import pytest
import torch

import cpattn
from helpers import run_processes


def _qkv(S=16, Hq=2, Hkv=1, D=8):
    return torch.randn(1, S, Hq, D), torch.randn(1, S, Hkv, D), torch.randn(1, S, Hkv, D)


@pytest.mark.parametrize("make,code,needle", [
    (lambda q, k, v: (q.double(), k, v), "invalid_argument",
     "q must be float32, bfloat16 or float16, got Double"),
    (lambda q, k, v: (q, k.half(), v), "invalid_argument",
     "q, k and v must have one dtype, got q fp32, k fp16, v fp32"),
    (lambda q, k, v: (q[0], k, v), "shape_mismatch", "q must be a 4-dimensional tensor"),
    (lambda q, k, v: (q, k[:, :, :, :4], v), "shape_mismatch", "k must have shape"),
    (lambda q, k, v: (torch.randn(1, 16, 3, 8), torch.randn(1, 16, 2, 8),
                      torch.randn(1, 16, 2, 8)), "shape_mismatch", "Hq must be a multiple of Hkv"),
])
def test_bad_tensors(make, code, needle):
    q, k, v = make(*_qkv())
    with pytest.raises(cpattn.Error, match=needle) as info:
        cpattn.attention(q, k, v)
    assert info.value.code == code
    assert isinstance(info.value, RuntimeError)


def test_bad_parameters():
    q, k, v = _qkv()
    with pytest.raises(cpattn.Error, match="dropout_p must be in"):
        cpattn.attention(q, k, v, dropout_p=1.0)
    with pytest.raises(cpattn.Error, match="window_left must be >= -1"):
        cpattn.attention(q, k, v, window_size=(-2, 0))
    for window in (3, (-0.5, -1), (2.9, -1), ("3", -1), (1, 2, 3)):
        with pytest.raises(cpattn.Error, match="window_size must be a pair of integers"):
            cpattn.attention(q, k, v, window_size=window)
    with pytest.raises(cpattn.Error, match="softmax_scale must be finite"):
        cpattn.attention(q, k, v, softmax_scale=float("inf"))
    with pytest.raises(cpattn.Error, match="doc_ids must be an int64 tensor of the whole"):
        cpattn.attention(q, k, v, doc_ids=torch.zeros(15, dtype=torch.int64))
    with pytest.raises(cpattn.Error, match="causal must be a bool, got 'no'"):
        cpattn.attention(q, k, v, causal="no")  # bool("no") would be a causal mask
    with pytest.raises(cpattn.Error, match="k must be a 4-dimensional tensor"):
        cpattn.attention(q, None, v)


def test_out_changed_after_the_forward_is_refused_by_backward():
    """An in-place change to out before backward would give the gradients of the changed values:
    autograd refuses one it sees (the version counter), and cpattn refuses the ones autograd
    cannot see (through .data), by the digest of out and lse its forward recorded."""
    q, k, v = (t.requires_grad_() for t in _qkv())
    out = cpattn.attention(q, k, v, causal=True)
    out.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    for change in (lambda o: o.data.add_(1e-3), lambda o: o.data[0, 3, 1, 5].neg_()):
        out = cpattn.attention(q, k, v, causal=True)
        change(out)
        with pytest.raises(cpattn.Error, match="out or lse changed after its forward") as info:
            out.sum().backward()
        assert info.value.code == "state_mismatch"
    cpattn.attention(q, k, v, causal=True).sum().backward()  # an unchanged out still runs


def test_forward_mode_ad_is_refused_not_a_silent_zero():
    """The ops have a backward formula only: torch would drop a jvp's tangent (a tangent of 0,
    no error). A dual tensor is refused, naming the argument."""
    q, k, v = _qkv()
    tangent = torch.ones_like(q)
    with pytest.raises(cpattn.Error, match="q carries a forward-mode AD tangent") as info:
        torch.func.jvp(lambda x: cpattn.attention(x, k, v, causal=True), (q,), (tangent,))
    assert info.value.code == "invalid_argument"
    with pytest.raises(cpattn.Error, match="v carries a forward-mode AD tangent"):
        torch.func.jacfwd(lambda x: cpattn.attention(q, k, x))(v)
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level(), pytest.raises(cpattn.Error, match="k carries a forward-mode"):
        cpattn.attention(q, fwAD.make_dual(k, torch.ones_like(k)), v)
    # Autograd's reverse mode is what cpattn differentiates.
    leaf = q.clone().requires_grad_()
    grad, = torch.autograd.grad(cpattn.attention(leaf, k, v, causal=True).sum(), leaf)
    assert grad.abs().sum() > 0


_BAD_TIMEOUTS = (float("inf"), 1e300, 1.5e6, 0.0, -1.0, float("nan"), None, True, "30")


def _bad_timeouts(rank, world):
    q = torch.randn(1, 4, 2, 8)
    outcomes = []
    for timeout in _BAD_TIMEOUTS:
        try:
            cpattn.ring_attention(q, q, q, timeout=timeout)
            outcomes.append((None, ""))
        except cpattn.Error as e:
            outcomes.append((e.code, str(e)))
    return outcomes


def test_every_call_has_a_deadline():
    # Infinity is refused like 0: every wait on another rank has a deadline, in [1 ms, 1e6 s]
    # (1e300 s once overflowed the deadline's clock arithmetic into a timeout at once).
    outcomes, = run_processes(1, _bad_timeouts)
    for timeout, (code, message) in zip(_BAD_TIMEOUTS, outcomes):
        assert code == "invalid_argument", (timeout, code, message)
        if isinstance(timeout, float):
            assert "timeout must be in [0.001, 1e+06] seconds" in message, (timeout, message)
        else:
            assert f"timeout must be a number of seconds, got {timeout!r}" in message, message


def test_ring_attention_without_a_group():
    q, k, v = _qkv()
    with pytest.raises(cpattn.Error, match="needs torch.distributed"):
        cpattn.ring_attention(q, k, v)


def _backward_after_the_group_is_destroyed(rank, world):
    import torch.distributed as dist
    group = dist.new_group([0, 1])
    q, k, v = (t.requires_grad_() for t in _qkv(S=8))
    out = cpattn.ring_attention(q, k, v, group=group, timeout=20)
    dist.destroy_process_group(group)
    out.sum().backward()


def _wrong_layout(rank, world):
    q, k, v = _qkv(S=8)
    cpattn.ring_attention(q, k, v, layout="diagonal")


def _group_does_not_match_sharding(rank, world):
    # The caller says the whole sequence has 40 tokens, but each rank holds 8 (a group of 2
    # splits 40 into 20 + 20): the shapes name the mismatch.
    q, k, v = _qkv(S=8)
    cpattn.ring_attention(q, k, v, seq_len=40, layout="contiguous")


def _seq_len_contradicts_doc_ids(rank, world):
    # doc_ids number the whole sequence's 16 tokens; seq_len says 18.
    q, k, v = _qkv(S=8)
    cpattn.ring_attention(q, k, v, doc_ids=torch.zeros(16, dtype=torch.int64), seq_len=18)


@pytest.mark.parametrize("fn,needle", [
    (_backward_after_the_group_is_destroyed, "of this call no longer exists (destroyed before "
                                             "the backward"),
    (_seq_len_contradicts_doc_ids, "seq_len 18 contradicts doc_ids, which number 16 tokens"),
    (_wrong_layout, "layout: expected contiguous | zigzag | striped | doc_zigzag, got 'diagonal'"),
    (_group_does_not_match_sharding, "q must have shape [B, Sq_local, Hq, Dqk] = [1, 20, 2, 8], "
                                     "got [1, 8, 2, 8]"),
])
def test_ring_misuse(fn, needle):
    for status, message in run_processes(2, fn, expect_errors=True):
        assert status == "error" and needle in message, message


def _one_rank_refuses(rank, world, strategy):
    q = torch.randn(1, 8, 4, 8)
    dropout_p = 1.0 if rank == 1 else 0.1  # rank 1's own arguments are invalid
    torch.manual_seed(0)
    try:
        cpattn.ring_attention(q, q, q, causal=True, dropout_p=dropout_p, strategy=strategy,
                              timeout=30)
    except cpattn.Error as e:
        return {"code": e.code, "message": str(e)}
    return {"code": None, "message": ""}


def _one_rank_on_the_meta_device(rank, world, arg):
    q, k, v = _qkv(S=8)
    tensors = {"q": q, "k": k, "v": v}
    if rank == 1:  # a shape-only tensor, as from a model built on the meta device
        tensors[arg] = tensors[arg].to("meta")
    start = time.monotonic()
    try:
        cpattn.ring_attention(tensors["q"], tensors["k"], tensors["v"], causal=True, timeout=30)
    except cpattn.Error as e:
        return e.code, str(e), time.monotonic() - start
    return None, "", time.monotonic() - start


@pytest.mark.parametrize("arg", ["q", "v"])
def test_a_rank_with_a_meta_tensor_fails_every_rank_at_once(arg):
    """The op's meta implementation computes shapes only and sends nothing: a rank calling it
    would leave the others waiting for their deadline. It is refused, on every rank at once."""
    (code0, message0, seconds0), (code1, message1, seconds1) = \
        run_processes(2, _one_rank_on_the_meta_device, arg)
    assert code1 == "invalid_argument", message1
    assert f"{arg} is on meta: a call over a group runs on CPU tensors" in message1
    assert code0 == "rank_disagreement", message0
    assert f"{arg} is on meta" in message0
    assert max(seconds0, seconds1) < 10, (seconds0, seconds1)


@pytest.mark.parametrize("strategy", ["ring", "allgather", "ulysses"])
def test_a_rank_that_refuses_its_arguments_fails_every_rank_at_once(strategy):
    outcomes = run_processes(2, _one_rank_refuses, strategy)
    assert outcomes[1]["code"] == "invalid_argument", outcomes[1]
    assert "dropout_p must be in" in outcomes[1]["message"], outcomes[1]
    assert outcomes[0]["code"] == "rank_disagreement", outcomes[0]
    assert "rank 1 refuses the call (invalid_argument: " in outcomes[0]["message"], outcomes[0]


def _one_rank_fails_the_wrappers_checks(rank, world, bad):
    # Rank 1's arguments fail the Python wrapper's or the binding's own checks, before the C++
    # call: it still joins the agreement, so rank 0 raises at once instead of at the deadline.
    kv = torch.randn(1, 8, 4, 8)
    q = kv
    kwargs = dict(causal=True, timeout=30)
    if bad == "doc_ids":
        kwargs["doc_ids"] = torch.zeros(16, dtype=torch.int64)
    if bad == "q rank":
        kwargs["seq_len"] = 16
    k = kv
    if rank == 1:
        if bad == "window_size":
            kwargs["window_size"] = "wide"
        elif bad == "k None":
            k = None
        elif bad == "causal":
            kwargs["causal"] = "yes"
        elif bad == "timeout":  # rank 0's is 30 s: rank 1 refuses under the default deadline
            kwargs["timeout"] = float("inf")
        elif bad == "timeout past float":  # float() raises OverflowError
            kwargs["timeout"] = 10**400
        elif bad == "window past int":  # int() raises OverflowError
            kwargs["window_size"] = (float("inf"), 1)
        elif bad == "seq_len past int64":  # the op's schema would raise before the op
            kwargs["seq_len"] = 2**70
        elif bad == "k 1-D":  # k.shape[1] raises IndexError inside the op, before the count
            k = torch.randn(8)
        elif bad == "doc_ids":  # rank 0 passes them as a tensor
            kwargs["doc_ids"] = [0] * 16
        elif bad == "layout":
            kwargs["layout"] = "diagonal"
        elif bad.startswith("q rank"):
            q = torch.randn(8, 4, 8)
        elif bad == "q dtype":
            q = kv.to(torch.int32)
    try:
        cpattn.ring_attention(q, k, kv, **kwargs)
    except cpattn.Error as e:
        return {"code": e.code, "message": str(e)}
    return {"code": None, "message": ""}


@pytest.mark.parametrize("bad", ["window_size", "doc_ids", "layout", "q rank", "q dtype", "k None",
                                 "causal", "timeout", "timeout past float", "window past int",
                                 "seq_len past int64", "k 1-D"])
def test_a_rank_that_fails_the_wrappers_checks_fails_every_rank_at_once(bad):
    start = time.monotonic()
    outcomes = run_processes(2, _one_rank_fails_the_wrappers_checks, bad)
    assert time.monotonic() - start < 25, "rank 0 waited for the deadline"
    assert outcomes[1]["code"] in ("invalid_argument", "shape_mismatch"), outcomes[1]
    assert outcomes[0]["code"] == "rank_disagreement", outcomes[0]
    assert "rank 1 refuses the call (" in outcomes[0]["message"], outcomes[0]


def test_a_rank_without_a_length_to_count_still_counts_and_refuses():
    # Without seq_len the ranks first count the tokens; rank 1 (q not 4-d) counts as refusing,
    # so rank 0 learns from the count that a rank refuses and raises the agreement's error,
    # which quotes rank 1's reason (not an error about its own shard, which is fine).
    start = time.monotonic()
    outcomes = run_processes(2, _one_rank_fails_the_wrappers_checks, "q rank (lengths counted)")
    assert time.monotonic() - start < 25, "rank 0 waited for the deadline"
    assert outcomes[1]["code"] == "shape_mismatch", outcomes[1]
    assert outcomes[0]["code"] == "rank_disagreement", outcomes[0]
    assert "rank 1 refuses the call (shape_mismatch: q must be a 4-dimensional tensor" in \
        outcomes[0]["message"], outcomes[0]
    assert "rank 0 refuses" not in outcomes[0]["message"], outcomes[0]


def _skips_a_call(rank, world, where):
    # Rank 1 skips a call that rank 0 makes; the call that follows is otherwise identical (no
    # dropout, one generator state), so only the call sites tell the two apart.
    torch.manual_seed(0)
    x = torch.randn(1, 8, 2, 8, requires_grad=True)

    def attend(t, site=None):
        return cpattn.ring_attention(t, t, t, causal=True, seq_len=16, timeout=30,
                                     call_site=site)

    def block(t):
        t = attend(t, "layer 0")
        if rank == 0:
            t = attend(t, "layer 1")
        return attend(t, "layer 2")

    try:
        if where == "an eval of other length":  # the two calls' shards differ too
            if rank == 1:
                y = torch.randn(1, 4, 2, 8)
                cpattn.ring_attention(y, y, y, causal=True, timeout=30, call_site="eval")
            cpattn.ring_attention(x, x, x, causal=True, timeout=30, call_site="train")
        elif where == "eval forward":  # the default sites: the lines below
            with torch.no_grad():
                if rank == 0:
                    cpattn.ring_attention(x, x, x, causal=True, seq_len=16, timeout=30)
                cpattn.ring_attention(x, x, x, causal=True, seq_len=16, timeout=30)
        else:
            cpattn.checkpoint(block, x).sum().backward()
    except cpattn.Error as e:
        return {"code": e.code, "message": str(e)}
    return {"code": None, "message": ""}


@pytest.mark.parametrize("where", ["eval forward", "layer in cpattn.checkpoint",
                                   "an eval of other length"])
def test_a_skipped_call_fails_every_rank_at_the_next_call_naming_the_sites(where):
    """A rank that makes a call the others skip fails every rank at the next call, naming the
    sites: in the call agreement, or already in the token count that precedes it (where the
    ranks' shards of two different calls would add up to a wrong whole length)."""
    outcomes = run_processes(2, _skips_a_call, where)
    for o in outcomes:
        assert o["code"] == "rank_disagreement", o
        assert "the calls come from different call sites: " in o["message"], o
    if where == "eval forward":
        # The default sites: the caller's file and line.
        assert "at test_misuse.py:" in outcomes[0]["message"], outcomes[0]
    elif where == "an eval of other length":
        for o in outcomes:
            assert "rank 0 at train" in o["message"] and "rank 1 at eval" in o["message"], o
    else:
        assert "rank 1 at layer 2" in outcomes[0]["message"], outcomes[0]
        assert "rank 0 at layer 1" in outcomes[0]["message"], outcomes[0]


def _one_rank_gives_what_the_other_does_not(rank, world, what):
    # Rank 0 passes seq_len (or doc_ids), rank 1 lets the op count: both still make the same
    # exchanges (every call over a group counts its tokens first), so the calls agree (the
    # same seq_len) or the call agreement names the difference (documents on one rank only),
    # and the group works for the next call.
    q = torch.randn(1, 8, 2, 8)
    kwargs = dict(causal=True, timeout=20)
    if rank == 0:
        if what == "seq_len":
            kwargs["seq_len"] = 16
        else:
            kwargs["doc_ids"] = torch.zeros(16, dtype=torch.int64)
    start = time.monotonic()
    try:
        cpattn.ring_attention(q, q, q, **kwargs)
        first = (None, "")
    except cpattn.Error as e:
        first = (e.code, str(e))
    seconds = time.monotonic() - start
    out = cpattn.ring_attention(q, q, q, causal=True, seq_len=16, timeout=20)  # works again
    return first, seconds, tuple(out.shape)


@pytest.mark.parametrize("what", ["seq_len", "doc_ids"])
def test_an_argument_on_one_rank_only_is_named_and_the_group_stays_usable(what):
    for rank, ((code, message), seconds, shape) in enumerate(
            run_processes(2, _one_rank_gives_what_the_other_does_not, what)):
        if what == "seq_len":  # the length rank 1 counts is rank 0's seq_len: one call
            assert code is None, (rank, message)
        else:
            assert code == "rank_disagreement", (rank, message)
            assert "doc" in message, message
        assert seconds < 10, (rank, seconds)
        assert shape == (1, 8, 2, 8)


def _refusals(rank, world):
    q = torch.randn(1, 4, 2, 8)
    outcomes = []
    for kwargs in (dict(seq_len=-3), dict(seq_len=4.0),
                   dict(doc_ids=torch.tensor([0.2, 0.7, 1.5, 1.9])),
                   dict(doc_ids=torch.zeros(4, dtype=torch.int32))):
        try:
            cpattn.ring_attention(q, q, q, timeout=20, **kwargs)
            outcomes.append((None, ""))
        except cpattn.Error as e:
            outcomes.append((e.code, str(e)))
    return outcomes


def test_seq_len_must_be_a_whole_length_and_doc_ids_int64():
    (negative, float_len, float_docs, int32_docs), = run_processes(1, _refusals)
    for code, _ in (negative, float_len, float_docs, int32_docs):
        assert code == "invalid_argument"
    assert "seq_len must be None or a whole length >= 0, got -3" in negative[1]
    assert "got 4.0" in float_len[1]
    assert "doc_ids must be an int64 tensor of the whole sequence, got torch.float32" in \
        float_docs[1]
    assert "got torch.int32" in int32_docs[1]
