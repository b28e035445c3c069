"""Fitting the built-in drafts (Medusa heads, EAGLE-1 layer) to the tiny target's greedy outputs.

Worker-side only (imports torch and transformers); harness.engine.models calls it to build.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Log = Callable[[str], None]


# --------------------------------------------------------------------------- data


@dataclass
class Group:
    """Sequences sharing one prompt length: random prompt followed by the target's greedy tokens."""

    prompt_len: int
    tokens: Tensor  # [B, L] int64
    hidden: Tensor  # [B, L, H] target hidden states after the final norm (what vLLM hands drafts)
    heldout: Tensor  # [B] bool: rows kept out of training


@dataclass
class GreedyData:
    groups: list[Group]
    embed: Tensor  # [V, H] target input embedding
    lm_head: Tensor  # [V, H] target output projection
    seconds: float


def greedy_data(target_dir: Path, params: dict[str, Any], log: Log) -> GreedyData:
    """Random prompts and the target's own greedy continuations, with its hidden states."""
    import time

    from transformers import LlamaForCausalLM

    start = time.perf_counter()
    model = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(int(params["seed"]))
    lens: list[int] = [int(n) for n in params["prompt_lens"]]
    per_group = int(params["num_prompts"]) // len(lens)
    new_tokens = int(params["new_tokens"])
    heldout_every = int(params["heldout_every"])
    first_token = int(params["first_token_id"])
    batch = int(params["gen_batch"])
    groups: list[Group] = []
    with torch.inference_mode():
        for prompt_len in lens:
            prompts = torch.randint(first_token, vocab, (per_group, prompt_len), generator=gen)
            toks: list[Tensor] = []
            hids: list[Tensor] = []
            for lo in range(0, per_group, batch):
                seq = _greedy(model, prompts[lo : lo + batch], new_tokens)
                toks.append(seq)
                hids.append(model.model(input_ids=seq).last_hidden_state)
            heldout = torch.arange(per_group) % heldout_every == 0
            groups.append(Group(prompt_len, torch.cat(toks), torch.cat(hids), heldout))
    seconds = time.perf_counter() - start
    log(
        f"  greedy data: {per_group * len(lens)} prompts (lengths {lens}) x {new_tokens} tokens "
        f"in {seconds:.1f}s"
    )
    return GreedyData(
        groups,
        model.model.embed_tokens.weight.detach().clone(),
        model.lm_head.weight.detach().clone(),
        seconds,
    )


def _greedy(model: Any, prompts: Tensor, new_tokens: int) -> Tensor:
    out = model(input_ids=prompts, use_cache=True)
    cache = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1)
    produced = [nxt]
    for _ in range(new_tokens - 1):
        out = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1)
        produced.append(nxt)
    return torch.cat([prompts, torch.stack(produced, dim=1)], dim=1)


def _snapshot(module: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# --------------------------------------------------------------------------- Medusa


def fit_medusa(
    data: GreedyData, params: dict[str, Any], log: Log
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Residual-block Medusa heads (vLLM layout, no bias) trained on the token 2+k ahead."""
    torch.manual_seed(int(params["seed"]))
    heads = int(params["num_heads"])
    feats: dict[bool, list[Tensor]] = {False: [], True: []}
    labels: dict[bool, list[Tensor]] = {False: [], True: []}
    for g in data.groups:
        length = g.tokens.shape[1]
        # hidden at t is where the target sampled t+1; head k drafts t+2+k. Only positions whose
        # labels are all greedy tokens (t >= prompt_len - 1) teach the target's behaviour.
        pos = torch.arange(g.prompt_len - 1, length - 1 - heads)
        lab = torch.stack([g.tokens[:, pos + 2 + k] for k in range(heads)], dim=-1)  # [B,T,K]
        for held in (False, True):
            rows = g.heldout == held
            feats[held].append(g.hidden[rows][:, pos].reshape(-1, g.hidden.shape[-1]))
            labels[held].append(lab[rows].reshape(-1, heads))
    x_train, y_train = torch.cat(feats[False]), torch.cat(labels[False])
    x_test, y_test = torch.cat(feats[True]), torch.cat(labels[True])

    hidden = x_train.shape[1]
    blocks = [nn.Linear(hidden, hidden, bias=False) for _ in range(heads)]
    lm_heads = [nn.Linear(hidden, data.lm_head.shape[0], bias=False) for _ in range(heads)]
    with torch.no_grad():
        for k in range(heads):
            blocks[k].weight.zero_()
            lm_heads[k].weight.copy_(data.lm_head)
    module = nn.ModuleDict({"blocks": nn.ModuleList(blocks), "lm_heads": nn.ModuleList(lm_heads)})

    def logits(x: Tensor) -> list[Tensor]:
        return [lm_heads[k](x + F.silu(blocks[k](x))) for k in range(heads)]

    def evaluate(x: Tensor, y: Tensor) -> tuple[list[float], list[float], float]:
        with torch.no_grad():
            correct = torch.stack(
                [out.argmax(-1) == y[:, k] for k, out in enumerate(logits(x))], dim=-1
            )
            chain = correct.cumprod(dim=-1)
            loss = float(
                torch.stack(
                    [F.cross_entropy(out, y[:, k]) for k, out in enumerate(logits(x))]
                ).mean()
            )
        return (correct.float().mean(0).tolist(), chain.float().mean(0).tolist(), loss)

    steps, batch = int(params["steps"]), int(params["batch"])
    opt = torch.optim.Adam(
        module.parameters(), lr=float(params["lr"]), weight_decay=float(params["weight_decay"])
    )
    best: tuple[float, int, dict[str, Tensor]] = (-1.0, 0, {})
    gen = torch.Generator().manual_seed(int(params["seed"]))
    train_loss = math.nan
    for step in range(1, steps + 1):
        idx = torch.randint(0, x_train.shape[0], (batch,), generator=gen)
        outs = logits(x_train[idx])
        loss = torch.stack([F.cross_entropy(out, y_train[idx, k]) for k, out in enumerate(outs)])
        loss = loss.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        train_loss = float(loss.detach())
        if step % int(params["eval_every"]) == 0 or step == steps:
            acc, _, _ = evaluate(x_test, y_test)
            score = sum(acc) / heads
            if score > best[0]:
                best = (score, step, _snapshot(module))
            log(
                f"  medusa step {step}: train loss {train_loss:.3f}, held-out top-1 "
                + ", ".join(f"{a:.3f}" for a in acc)
            )
    module.load_state_dict(best[2])
    acc, chain, test_loss = evaluate(x_test, y_test)
    sub = torch.randperm(x_train.shape[0], generator=gen)[: x_test.shape[0]]
    train_acc, _, final_train_loss = evaluate(x_train[sub], y_train[sub])
    stats: dict[str, Any] = {
        "train_positions": int(x_train.shape[0]),
        "heldout_positions": int(x_test.shape[0]),
        "best_step": best[1],
        "last_step_train_loss": train_loss,
        "train_loss": final_train_loss,
        "heldout_loss": test_loss,
        "train_top1_per_head": train_acc,
        "heldout_top1_per_head": acc,
        # What vLLM's per-position acceptance approximates: heads 0..k all right.
        "heldout_accept_per_position": chain,
    }
    weights = {
        **{
            f"blocks.{k}.layers.0.weight": blocks[k].weight.detach().contiguous()
            for k in range(heads)
        },
        **{f"lm_heads.{k}.weight": lm_heads[k].weight.detach().contiguous() for k in range(heads)},
    }
    return weights, stats


# --------------------------------------------------------------------------- EAGLE-1


class EagleDraft(nn.Module):
    """vLLM 0.32 llama_eagle forward: fc(cat(embed(token t+1), target hidden t)) -> one Llama
    decoder layer without input_layernorm -> output (no final norm) that feeds both the shared
    target lm_head and the next draft step as its hidden state."""

    def __init__(self, cfg: dict[str, Any], embed: Tensor, lm_head: Tensor) -> None:
        super().__init__()
        hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.kv_heads = int(cfg["num_key_value_heads"])
        self.head_dim = hidden // self.heads
        self.eps = float(cfg["rms_norm_eps"])
        inter = int(cfg["intermediate_size"])
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(hidden))
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.embed: Tensor
        self.lm_head: Tensor
        self.inv_freq: Tensor
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)
        theta = float(cfg["rope_theta"])
        exps = torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim
        self.register_buffer("inv_freq", 1.0 / theta**exps, persistent=False)

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        # x [B, heads, T, d], positions [T]; neox style (rotate halves), as vLLM and HF Llama.
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def unrolled(self, tokens: Tensor, hidden: Tensor, steps: int) -> list[Tensor]:
        """Draft outputs for every base position i (0..L-2) and draft step s < steps.

        Step s at base i runs at position i+s on token i+1+s (the true token: acceptance only
        continues when the draft was right) and the previous step's output, attending to
        the teacher-forced keys at positions <= i and its own earlier steps at base i — what
        vLLM's draft KV cache holds when it drafts after position i."""
        batch, length = tokens.shape
        n = length - 1
        base = torch.arange(n)
        keys: list[Tensor] = []
        values: list[Tensor] = []
        outs: list[Tensor] = []
        prev = hidden[:, :n]
        for s in range(steps):
            tok = tokens[:, (base + 1 + s).clamp(max=length - 1)]
            x = self.fc(torch.cat([F.embedding(tok, self.embed), prev], dim=-1))
            pos = base + s
            q = self._rope(self._split(self.q_proj(x), self.heads), pos)
            keys.append(self._rope(self._split(self.k_proj(x), self.kv_heads), pos))
            values.append(self._split(self.v_proj(x), self.kv_heads))
            k_all = torch.cat(keys, dim=2).repeat_interleave(self.heads // self.kv_heads, dim=1)
            v_all = torch.cat(values, dim=2).repeat_interleave(self.heads // self.kv_heads, dim=1)
            mask = torch.cat(
                [base[:, None] >= base[None, :]]
                + [base[:, None] == base[None, :] for _ in range(s)],
                dim=1,
            )
            att = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
            att = att.transpose(1, 2).reshape(batch, n, -1)
            residual = x + self.o_proj(att)
            normed = residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + self.eps)
            normed = normed * self.post_attention_layernorm
            out = residual + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
            outs.append(out)
            prev = out
        return outs

    def _split(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)

    def vllm_weights(self) -> dict[str, Tensor]:
        """Checkpoint names vLLM's EagleLlamaForCausalLM loads (it adds the `model.` prefix).

        No embed_tokens, lm_head, norm or input_layernorm: vLLM shares the target's embedding
        and lm_head and has no norm there."""
        layer = "layers.0."
        names = {
            "fc.weight": self.fc.weight,
            layer + "self_attn.q_proj.weight": self.q_proj.weight,
            layer + "self_attn.k_proj.weight": self.k_proj.weight,
            layer + "self_attn.v_proj.weight": self.v_proj.weight,
            layer + "self_attn.o_proj.weight": self.o_proj.weight,
            layer + "post_attention_layernorm.weight": self.post_attention_layernorm,
            layer + "mlp.gate_proj.weight": self.gate_proj.weight,
            layer + "mlp.up_proj.weight": self.up_proj.weight,
            layer + "mlp.down_proj.weight": self.down_proj.weight,
        }
        return {k: v.detach().clone().contiguous() for k, v in names.items()}


def fit_eagle(
    data: GreedyData,
    cfg: dict[str, Any],
    target_layer: dict[str, Tensor],
    params: dict[str, Any],
    log: Log,
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """EAGLE-1 layer: cross-entropy on the greedy token plus feature regression, unrolled."""
    torch.manual_seed(int(params["seed"]))
    draft = EagleDraft(cfg, data.embed, data.lm_head)
    hidden = int(cfg["hidden_size"])
    with torch.no_grad():
        # Start from the target's last decoder layer and an fc that passes the hidden through.
        for name, tensor in target_layer.items():
            dest = {
                "self_attn.q_proj.weight": draft.q_proj.weight,
                "self_attn.k_proj.weight": draft.k_proj.weight,
                "self_attn.v_proj.weight": draft.v_proj.weight,
                "self_attn.o_proj.weight": draft.o_proj.weight,
                "post_attention_layernorm.weight": draft.post_attention_layernorm,
                "mlp.gate_proj.weight": draft.gate_proj.weight,
                "mlp.up_proj.weight": draft.up_proj.weight,
                "mlp.down_proj.weight": draft.down_proj.weight,
            }.get(name)
            if dest is not None:
                dest.copy_(tensor)
        draft.fc.weight.normal_(0.0, float(params["fc_init_std"]))
        draft.fc.weight[:, hidden:] += torch.eye(hidden)
    steps_unroll = int(params["unroll"])
    weights_ce = [float(w) for w in params["ce_weights"]][:steps_unroll]
    feat_weight = float(params["feature_weight"])

    def losses(g: Group, rows: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        tokens, hid = g.tokens[rows], g.hidden[rows]
        length = tokens.shape[1]
        outs = draft.unrolled(tokens, hid, steps_unroll)
        base = torch.arange(length - 1)
        total = torch.zeros(())
        correct: list[Tensor] = []
        valid: list[Tensor] = []
        for s, out in enumerate(outs):
            lab_idx = base + 2 + s
            ok = (lab_idx <= length - 1) & (lab_idx >= g.prompt_len)
            lab = tokens[:, lab_idx.clamp(max=length - 1)]
            logits = out @ draft.lm_head.T
            ce = F.cross_entropy(
                logits[:, ok].reshape(-1, logits.shape[-1]), lab[:, ok].reshape(-1)
            )
            feat_idx = base + 1 + s
            fok = feat_idx <= length - 1
            feat = F.smooth_l1_loss(out[:, fok], hid[:, feat_idx[fok]])
            total = total + weights_ce[s] * ce + feat_weight * feat
            correct.append(logits.argmax(-1) == lab)
            valid.append(ok)
        return total, correct, valid

    def evaluate(heldout: bool) -> tuple[list[float], list[float], float]:
        right = [0] * steps_unroll
        chain_right = [0] * steps_unroll
        count = [0] * steps_unroll
        denom = 0
        loss_sum, batches = 0.0, 0
        with torch.no_grad():
            for g in data.groups:
                rows = torch.nonzero(g.heldout == heldout).flatten()
                if not heldout:
                    rows = rows[: int(torch.count_nonzero(g.heldout))]
                total, correct, valid = losses(g, rows)
                loss_sum += float(total)
                batches += 1
                chain = torch.ones_like(correct[0])
                all_valid = valid[-1]
                for s in range(steps_unroll):
                    chain = chain & correct[s]
                    right[s] += int(correct[s][:, valid[s]].sum())
                    count[s] += int(valid[s].sum()) * correct[s].shape[0]
                    chain_right[s] += int(chain[:, all_valid].sum())
                denom += int(all_valid.sum()) * correct[0].shape[0]
        acc = [r / max(c, 1) for r, c in zip(right, count, strict=True)]
        # Per-position acceptance if drafting at every position: steps 0..s all right.
        chain_acc = [r / max(denom, 1) for r in chain_right]
        return acc, chain_acc, loss_sum / max(batches, 1)

    opt = torch.optim.Adam(draft.parameters(), lr=float(params["lr"]))
    steps, batch = int(params["steps"]), int(params["batch_seqs"])
    gen = torch.Generator().manual_seed(int(params["seed"]))
    train_rows = [torch.nonzero(~g.heldout).flatten() for g in data.groups]
    best: tuple[float, int, dict[str, Tensor]] = (-1.0, 0, {})
    train_loss = math.nan
    for step in range(1, steps + 1):
        gi = step % len(data.groups)
        rows = train_rows[gi][torch.randint(0, len(train_rows[gi]), (batch,), generator=gen)]
        total, _, _ = losses(data.groups[gi], rows)
        opt.zero_grad()
        total.backward()
        opt.step()
        train_loss = float(total.detach())
        if step % int(params["eval_every"]) == 0 or step == steps:
            acc, chain, _ = evaluate(True)
            score = sum(chain) / len(chain)
            if score > best[0]:
                best = (score, step, _snapshot(draft))
            log(
                f"  eagle step {step}: train loss {train_loss:.3f}, held-out top-1 "
                + ", ".join(f"{a:.3f}" for a in acc)
                + " | chain "
                + ", ".join(f"{a:.3f}" for a in chain)
            )
    draft.load_state_dict(best[2])
    acc, chain, test_loss = evaluate(True)
    train_acc, train_chain, final_train_loss = evaluate(False)
    stats: dict[str, Any] = {
        "loss": "sum over unrolled steps s of ce_weights[s] * CE(greedy token) "
        "+ feature_weight * SmoothL1(output, target hidden)",
        "train_sequences": int(sum(len(r) for r in train_rows)),
        "heldout_sequences": int(sum(int(torch.count_nonzero(g.heldout)) for g in data.groups)),
        "best_step": best[1],
        "last_step_train_loss": train_loss,
        "train_loss": final_train_loss,
        "heldout_loss": test_loss,
        "train_top1_per_step": train_acc,
        "heldout_top1_per_step": acc,
        "train_accept_per_position": train_chain,
        "heldout_accept_per_position": chain,
    }
    return draft.vllm_weights(), stats
