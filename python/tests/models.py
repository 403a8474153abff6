"""A small residual attention model for the checkpointing tests: L layers of
x <- x + W_o attn(W_q x, W_k x, W_v x) with causal attention and dropout, the attention being
cpattn.ring_attention over the process group with a CP strategy (or cpattn.attention on one
rank)."""

import torch

import cpattn


class Layer(torch.nn.Module):
    def __init__(self, d_model, heads, kv_heads, head_dim, dropout_p, ring, strategy):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.dropout_p, self.ring, self.strategy = dropout_p, ring, strategy
        self.wq = torch.nn.Linear(d_model, heads * head_dim, bias=False)
        self.wk = torch.nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.wv = torch.nn.Linear(d_model, kv_heads * head_dim, bias=False)
        self.wo = torch.nn.Linear(heads * head_dim, d_model, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.wq(x).view(B, S, self.heads, self.head_dim)
        k = self.wk(x).view(B, S, self.kv_heads, self.head_dim)
        v = self.wv(x).view(B, S, self.kv_heads, self.head_dim)
        if self.ring:
            a = cpattn.ring_attention(q, k, v, causal=True, dropout_p=self.dropout_p, timeout=60,
                                      strategy=self.strategy)
        else:
            a = cpattn.attention(q, k, v, causal=True, dropout_p=self.dropout_p)
        return x + self.wo(a.reshape(B, S, self.heads * self.head_dim))


class Stack(torch.nn.Module):
    """`checkpoint`: None, or a function (fn, x) -> fn(x) recomputed in backward."""

    def __init__(self, layers=4, d_model=32, heads=4, kv_heads=2, dropout_p=0.1, ring=True,
                 seed=0, strategy="ring"):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Linear(8, d_model, bias=False)
        self.layers = torch.nn.ModuleList(
            [Layer(d_model, heads, kv_heads, d_model // heads, dropout_p, ring, strategy)
             for _ in range(layers)])

    def forward(self, tokens, checkpoint=None):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x) if checkpoint is None else checkpoint(layer, x)
        return x


def checkpointers():
    """The ways of checkpointing every layer that the tests compare with no checkpointing."""
    return {
        "torch_reentrant":
            lambda fn, x: torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=True),
        "torch_non_reentrant":
            lambda fn, x: torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False),
        "cpattn": lambda fn, x: cpattn.checkpoint(fn, x),
        "cpattn_reentrant": lambda fn, x: cpattn.checkpoint(fn, x, use_reentrant=True),
    }


def grads_of(model):
    return {name: p.grad.detach().clone().numpy() for name, p in model.named_parameters()}
