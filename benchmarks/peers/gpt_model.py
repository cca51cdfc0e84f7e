"""The PyTorch twin of examples/gpt's decoder, shared by the GPT peers (torch_train.py gpt,
torch_ddp.py, torch_gpt_parity.py).

Token and position embeddings, pre-LayerNorm blocks (causal self-attention through
F.scaled_dot_product_attention, a GELU(tanh) MLP), a final LayerNorm and an LM head tied to
the token embedding. The parameter names are the ones stoker_gpt writes with --parity-dir:
wte, wpe, blocks.<l>.{ln1, qkv, proj, ln2, fc, fc2}, lnf (head.weight is wte.weight), with
nn.Embedding's [num, dim] and nn.Linear's [out, in] layouts; LayerNorm eps 1e-5, qkv split
into q | k | v along the last dimension, heads the consecutive slices of each.

Importing this file needs torch; it runs nothing.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    """x + proj(attention(ln1(x))), then + fc2(gelu(fc(ln2(x))))."""

    def __init__(self, width, heads):
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def attention(self, x):
        batch, seq, width = x.shape
        # [B, T, 3C] -> three [B, heads, T, C / heads]
        q, k, v = (t.reshape(batch, seq, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """forward(ids, targets) -> the mean cross-entropy (computed in fp32) of the next-token
    logits. checkpoint=True recomputes each block in backward (per-block activation
    checkpointing, as stoker_gpt --activation-checkpoint-every 1)."""

    def __init__(self, vocab=50304, context=1024, width=768, layers=12, heads=12,
                 checkpoint_blocks=False):
        super().__init__()
        self.checkpoint_blocks = checkpoint_blocks
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied: one tensor, two uses

    def forward(self, ids, targets):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint_blocks else block(x)
        logits = self.head(self.lnf(x)).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def parameter_count(model):
    """Parameters counted once each (the tied head is the token embedding)."""
    return sum(p.numel() for p in model.parameters())


def flops_per_token(model, layers, width, context):
    """The FLOP model stoker_gpt prints with: 6 N per token for the matrix products of forward
    and backward, plus 12 L C T for attention's two batched products."""
    return 6 * parameter_count(model) + 12 * layers * width * context
