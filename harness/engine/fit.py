"""Fitting the built-in drafts (Medusa heads, EAGLE-1 and EAGLE-3 layers, a small draft Llama) to
the tiny target's greedy outputs.

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
    # [B, L, A*H] the target's residual stream at its layer boundaries 0..num_layers (0: the
    # embedding, k: after decoder layer k-1, before the final norm), concatenated in that order:
    # what vLLM hands an EAGLE-3 draft for aux layer ids 0..num_layers.
    aux: Tensor


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
    # The residual stream at each layer boundary, recorded by hooks during the hidden-state pass.
    boundary: list[Tensor] = []

    def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
        boundary.append(output[0] if isinstance(output, tuple) else output)

    hooks = [model.model.embed_tokens.register_forward_hook(record)]
    hooks += [layer.register_forward_hook(record) for layer in model.model.layers]
    with torch.inference_mode():
        for prompt_len in lens:
            prompts = torch.randint(first_token, vocab, (per_group, prompt_len), generator=gen)
            toks: list[Tensor] = []
            hids: list[Tensor] = []
            auxs: list[Tensor] = []
            for lo in range(0, per_group, batch):
                seq = _greedy(model, prompts[lo : lo + batch], new_tokens)
                toks.append(seq)
                boundary.clear()  # the hooks also fired while generating
                hids.append(model.model(input_ids=seq).last_hidden_state)
                auxs.append(torch.cat(boundary, dim=-1))
            heldout = torch.arange(per_group) % heldout_every == 0
            groups.append(
                Group(prompt_len, torch.cat(toks), torch.cat(hids), heldout, torch.cat(auxs))
            )
    for hook in hooks:
        hook.remove()
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


# --------------------------------------------------------------------------- EAGLE layers


class _UnrolledLayer(nn.Module):
    """One Llama decoder layer drafting the way vLLM runs an EAGLE head, unrolled over the draft
    steps; EAGLE-1 and EAGLE-3 differ only in what enters and leaves the layer (subclasses).

    Weights are created in one order for both (fc first), so a fit's seed fixes them."""

    def __init__(
        self,
        cfg: dict[str, Any],
        embed: Tensor,
        lm_head: Tensor,
        *,
        fc_in: int,
        qkv_in: int,
        heads: int,
        kv_heads: int,
    ) -> None:
        super().__init__()
        hidden = int(cfg["hidden_size"])
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = hidden // self.heads
        self.eps = float(cfg["rms_norm_eps"])
        inter = int(cfg["intermediate_size"])
        self.fc = nn.Linear(fc_in, hidden, bias=False)
        self.q_proj = nn.Linear(qkv_in, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(qkv_in, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(qkv_in, self.kv_heads * self.head_dim, bias=False)
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

    # What a subclass defines: the hidden state of draft step 0 from the target's features; the
    # attention input and residual from the token's embedding and the previous hidden state;
    # what feeds the lm_head and the next step from the layer's output.
    def first(self, features: Tensor) -> Tensor:
        raise NotImplementedError

    def enter(self, embedded: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def leave(self, out: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _rms(self, x: Tensor, weight: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        # x [B, heads, T, d], positions [T]; neox style (rotate halves), as vLLM and HF Llama.
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def unrolled(self, tokens: Tensor, features: Tensor, steps: int) -> list[Tensor]:
        """What feeds the lm_head for every base position i (0..L-2) and draft step s < steps.

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
        prev = self.first(features[:, :n])
        for s in range(steps):
            tok = tokens[:, (base + 1 + s).clamp(max=length - 1)]
            x, residual = self.enter(F.embedding(tok, self.embed), prev)
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
            residual = residual + self.o_proj(att)
            normed = self._rms(residual, self.post_attention_layernorm)
            out = residual + self.down_proj(F.silu(self.gate_proj(normed)) * self.up_proj(normed))
            logits_in, prev = self.leave(out)
            outs.append(logits_in)
        return outs

    def _split(self, x: Tensor, heads: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)

    def _layer_weights(self) -> dict[str, Tensor]:
        layer = "layers.0."
        return {
            layer + "self_attn.q_proj.weight": self.q_proj.weight,
            layer + "self_attn.k_proj.weight": self.k_proj.weight,
            layer + "self_attn.v_proj.weight": self.v_proj.weight,
            layer + "self_attn.o_proj.weight": self.o_proj.weight,
            layer + "post_attention_layernorm.weight": self.post_attention_layernorm,
            layer + "mlp.gate_proj.weight": self.gate_proj.weight,
            layer + "mlp.up_proj.weight": self.up_proj.weight,
            layer + "mlp.down_proj.weight": self.down_proj.weight,
        }

    def vllm_weights(self) -> dict[str, Tensor]:
        """Checkpoint names vLLM loads (it adds the `model.` prefix). No embed_tokens or lm_head:
        vLLM shares the target's when a draft's checkpoint has none."""
        names = {"fc.weight": self.fc.weight, **self._layer_weights(), **self._extra_weights()}
        return {k: v.detach().clone().contiguous() for k, v in names.items()}

    def _extra_weights(self) -> dict[str, Tensor]:
        return {}


class EagleDraft(_UnrolledLayer):
    """vLLM 0.32 llama_eagle forward: fc(cat(embed(token t+1), target hidden t)) -> one Llama
    decoder layer without input_layernorm -> output (no final norm) that feeds both the shared
    target lm_head and the next draft step as its hidden state."""

    def __init__(self, cfg: dict[str, Any], embed: Tensor, lm_head: Tensor) -> None:
        hidden = int(cfg["hidden_size"])
        super().__init__(
            cfg,
            embed,
            lm_head,
            fc_in=2 * hidden,
            qkv_in=hidden,
            heads=int(cfg["num_attention_heads"]),
            kv_heads=int(cfg["num_key_value_heads"]),
        )

    def first(self, features: Tensor) -> Tensor:
        return features

    def enter(self, embedded: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        x = self.fc(torch.cat([embedded, prev], dim=-1))
        return x, x

    def leave(self, out: Tensor) -> tuple[Tensor, Tensor]:
        return out, out


class Eagle3Draft(_UnrolledLayer):
    """vLLM 0.32 llama_eagle3 forward (norm_before_residual off, no fc_norm, no input_norm):
    step 0's hidden is fc(cat(the target's aux hidden states)); the layer's attention reads
    cat(input_layernorm(embed(token)), hidden_norm(hidden)) with the un-normed hidden as its
    residual; the output's final norm feeds the shared lm_head and its pre-norm sum the next
    step."""

    def __init__(
        self, cfg: dict[str, Any], embed: Tensor, lm_head: Tensor, *, aux: int, heads: int
    ) -> None:
        hidden = int(cfg["hidden_size"])
        super().__init__(
            cfg,
            embed,
            lm_head,
            fc_in=aux * hidden,
            qkv_in=2 * hidden,
            heads=heads,
            kv_heads=heads,
        )
        self.input_layernorm = nn.Parameter(torch.ones(hidden))
        self.hidden_norm = nn.Parameter(torch.ones(hidden))
        self.norm = nn.Parameter(torch.ones(hidden))

    def first(self, features: Tensor) -> Tensor:
        return self.fc(features)

    def enter(self, embedded: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        x = torch.cat(
            [self._rms(embedded, self.input_layernorm), self._rms(prev, self.hidden_norm)], dim=-1
        )
        return x, prev

    def leave(self, out: Tensor) -> tuple[Tensor, Tensor]:
        return self._rms(out, self.norm), out

    def _extra_weights(self) -> dict[str, Tensor]:
        return {
            "layers.0.input_layernorm.weight": self.input_layernorm,
            "layers.0.hidden_norm.weight": self.hidden_norm,
            "norm.weight": self.norm,
        }


class MtpDraft(_UnrolledLayer):
    """vLLM 0.32 mimo_mtp forward (one MTP layer, one token): input_proj(cat(hidden_layernorm(
    target's pre-norm hidden t), token_layernorm(embed(token t+1), zero at position 0))) -> a
    Qwen2 decoder layer (with its input_layernorm; q/k/v biases kept at zero) -> final_layernorm
    -> the shared lm_head."""

    def __init__(self, cfg: dict[str, Any], embed: Tensor, lm_head: Tensor) -> None:
        hidden = int(cfg["hidden_size"])
        super().__init__(
            cfg,
            embed,
            lm_head,
            fc_in=2 * hidden,
            qkv_in=hidden,
            heads=int(cfg["num_attention_heads"]),
            kv_heads=int(cfg["num_key_value_heads"]),
        )
        self.token_layernorm = nn.Parameter(torch.ones(hidden))
        self.hidden_layernorm = nn.Parameter(torch.ones(hidden))
        self.input_layernorm = nn.Parameter(torch.ones(hidden))
        self.final_layernorm = nn.Parameter(torch.ones(hidden))

    def first(self, features: Tensor) -> Tensor:
        return features

    def enter(self, embedded: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        # Step 0 at base 0 runs at position 0, where vLLM zeroes the token's embedding.
        embedded = torch.cat([torch.zeros_like(embedded[:, :1]), embedded[:, 1:]], dim=1)
        x = self.fc(
            torch.cat(
                [self._rms(prev, self.hidden_layernorm), self._rms(embedded, self.token_layernorm)],
                dim=-1,
            )
        )
        return self._rms(x, self.input_layernorm), x

    def leave(self, out: Tensor) -> tuple[Tensor, Tensor]:
        normed = self._rms(out, self.final_layernorm)
        return normed, normed

    def checkpoint_weights(self, prefix: str) -> dict[str, Tensor]:
        """The MTP layer under the target checkpoint's names (MiMo: model.mtp_layers.0.)."""
        names = {
            "input_proj.weight": self.fc.weight,
            "token_layernorm.weight": self.token_layernorm,
            "hidden_layernorm.weight": self.hidden_layernorm,
            "input_layernorm.weight": self.input_layernorm,
            "final_layernorm.weight": self.final_layernorm,
            **{k.removeprefix("layers.0."): v for k, v in self._layer_weights().items()},
        }
        out = {prefix + k: v.detach().clone().contiguous() for k, v in names.items()}
        for proj, size in (
            ("q_proj", self.heads * self.head_dim),
            ("k_proj", self.kv_heads * self.head_dim),
            ("v_proj", self.kv_heads * self.head_dim),
        ):
            out[f"{prefix}self_attn.{proj}.bias"] = torch.zeros(size)
        return out


# --------------------------------------------------------------------------- shared fitting

# A model's losses on some rows of a group: total, and per draft step s whether the draft is
# right at each base position i ([B, L-1]) and which positions count ([L-1]).
Losses = Callable[[Group, Tensor], tuple[Tensor, list[Tensor], list[Tensor]]]


def _evaluate(
    data: GreedyData, losses: Losses, steps: int, heldout: bool
) -> tuple[list[float], list[float], float]:
    """Top-1 per draft step, per-position acceptance (steps 0..s all right, drafting at every
    position) and the mean loss, over the held-out rows or as many training rows."""
    right = [0] * steps
    chain_right = [0] * steps
    count = [0] * steps
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
            for s in range(steps):
                chain = chain & correct[s]
                right[s] += int(correct[s][:, valid[s]].sum())
                count[s] += int(valid[s].sum()) * correct[s].shape[0]
                chain_right[s] += int(chain[:, all_valid].sum())
            denom += int(all_valid.sum()) * correct[0].shape[0]
    acc = [r / max(c, 1) for r, c in zip(right, count, strict=True)]
    chain_acc = [r / max(denom, 1) for r in chain_right]
    return acc, chain_acc, loss_sum / max(batches, 1)


def _fit_on_sequences(
    module: nn.Module,
    data: GreedyData,
    losses: Losses,
    draft_steps: int,
    params: dict[str, Any],
    log: Log,
    label: str,
) -> dict[str, Any]:
    """Adam on batches of whole sequences, one prompt-length group per step in turn; keeps the
    step with the best held-out mean acceptance. Returns the fit's figures."""
    opt = torch.optim.Adam(module.parameters(), lr=float(params["lr"]))
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
            acc, chain, _ = _evaluate(data, losses, draft_steps, True)
            score = sum(chain) / len(chain)
            if score > best[0]:
                best = (score, step, _snapshot(module))
            log(
                f"  {label} step {step}: train loss {train_loss:.3f}, held-out top-1 "
                + ", ".join(f"{a:.3f}" for a in acc)
                + " | chain "
                + ", ".join(f"{a:.3f}" for a in chain)
            )
    module.load_state_dict(best[2])
    acc, chain, test_loss = _evaluate(data, losses, draft_steps, True)
    train_acc, train_chain, final_train_loss = _evaluate(data, losses, draft_steps, False)
    return {
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


def _unrolled_losses(
    draft: _UnrolledLayer,
    params: dict[str, Any],
    features: Callable[[Group], Tensor],
) -> Losses:
    """Cross-entropy on the greedy token per unrolled step (weighted), plus, where
    feature_weight > 0, SmoothL1 between the step's output and the target's next hidden state."""
    steps_unroll = int(params["unroll"])
    weights_ce = [float(w) for w in params["ce_weights"]][:steps_unroll]
    feat_weight = float(params["feature_weight"])

    def losses(g: Group, rows: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        tokens, hid = g.tokens[rows], g.hidden[rows]
        length = tokens.shape[1]
        outs = draft.unrolled(tokens, features(g)[rows], steps_unroll)
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
            total = total + weights_ce[s] * ce
            if feat_weight > 0:
                feat_idx = base + 1 + s
                fok = feat_idx <= length - 1
                feat = F.smooth_l1_loss(out[:, fok], hid[:, feat_idx[fok]])
                total = total + feat_weight * feat
            correct.append(logits.argmax(-1) == lab)
            valid.append(ok)
        return total, correct, valid

    return losses


def _copy_target_layer(draft: _UnrolledLayer, target_layer: dict[str, Tensor]) -> None:
    """Start the draft's decoder layer from the target's last one where the shapes agree."""
    dest = {
        "self_attn.q_proj.weight": draft.q_proj.weight,
        "self_attn.k_proj.weight": draft.k_proj.weight,
        "self_attn.v_proj.weight": draft.v_proj.weight,
        "self_attn.o_proj.weight": draft.o_proj.weight,
        "post_attention_layernorm.weight": draft.post_attention_layernorm,
        "mlp.gate_proj.weight": draft.gate_proj.weight,
        "mlp.up_proj.weight": draft.up_proj.weight,
        "mlp.down_proj.weight": draft.down_proj.weight,
    }
    with torch.no_grad():
        for name, tensor in target_layer.items():
            if name in dest and dest[name].shape == tensor.shape:
                dest[name].copy_(tensor)


# --------------------------------------------------------------------------- EAGLE-1


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
    # Start from the target's last decoder layer and an fc that passes the hidden through.
    _copy_target_layer(draft, target_layer)
    with torch.no_grad():
        draft.fc.weight.normal_(0.0, float(params["fc_init_std"]))
        draft.fc.weight[:, hidden:] += torch.eye(hidden)
    losses = _unrolled_losses(draft, params, lambda g: g.hidden)
    stats = _fit_on_sequences(draft, data, losses, int(params["unroll"]), params, log, "eagle")
    stats = {
        "loss": "sum over unrolled steps s of ce_weights[s] * CE(greedy token) "
        "+ feature_weight * SmoothL1(output, target hidden)",
        **stats,
    }
    return draft.vllm_weights(), stats


# --------------------------------------------------------------------------- EAGLE-3


def fit_eagle3(
    data: GreedyData,
    cfg: dict[str, Any],
    target_layer: dict[str, Tensor],
    params: dict[str, Any],
    log: Log,
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """EAGLE-3 layer over the target's aux hidden states: cross-entropy on the greedy token per
    unrolled step (EAGLE-3's training-time test: each step feeds on the previous output), no
    feature regression."""
    torch.manual_seed(int(params["seed"]))
    aux = len(params["aux_layer_ids"])
    draft = Eagle3Draft(cfg, data.embed, data.lm_head, aux=aux, heads=int(params["heads"]))
    hidden = int(cfg["hidden_size"])
    # Start from the target's last layer where shapes agree (its MLP) and an fc that passes
    # the last aux state (the target's pre-norm residual stream) through.
    _copy_target_layer(draft, target_layer)
    with torch.no_grad():
        draft.fc.weight.normal_(0.0, float(params["fc_init_std"]))
        draft.fc.weight[:, (aux - 1) * hidden :] += torch.eye(hidden)
    width = aux * hidden
    ids = [int(i) for i in params["aux_layer_ids"]]

    def features(g: Group) -> Tensor:
        per = g.aux.shape[-1] // hidden
        if sorted(ids) != ids or ids[-1] >= per:
            raise ValueError(f"aux layer ids {ids} outside the target's 0..{per - 1}")
        chunks = [g.aux[..., i * hidden : (i + 1) * hidden] for i in ids]
        out = torch.cat(chunks, dim=-1)
        assert out.shape[-1] == width
        return out

    losses = _unrolled_losses(draft, params, features)
    stats = _fit_on_sequences(draft, data, losses, int(params["unroll"]), params, log, "eagle3")
    stats = {"loss": "sum over unrolled steps s of ce_weights[s] * CE(greedy token)", **stats}
    return draft.vllm_weights(), stats


# --------------------------------------------------------------------------- draft model


def fit_draft_model(
    data: GreedyData,
    config: Any,
    params: dict[str, Any],
    log: Log,
) -> tuple[Any, dict[str, Any]]:
    """A small LlamaForCausalLM (config) distilled from the target's greedy tokens:
    teacher-forced cross-entropy on every greedy position. Its embedding and lm_head start from
    the target's. Returns the fitted model and the fit's figures.

    A draft model's step s after position i reads the true tokens up to i+1+s whenever steps
    0..s-1 were right, so teacher-forced accuracy chained over s is its acceptance exactly."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(int(params["seed"]))
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(int(params["seed"]))
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            if name.endswith("norm.weight"):
                tensor.fill_(1.0)
            elif name == "model.embed_tokens.weight":
                tensor.copy_(data.embed)
            elif name == "lm_head.weight":
                tensor.copy_(data.lm_head)
            else:
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * float(params["init_std"]))
    model.train()
    draft_steps = int(params["draft_steps"])

    def losses(g: Group, rows: Tensor) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        tokens = g.tokens[rows]
        length = tokens.shape[1]
        logits = model(input_ids=tokens).logits  # [B, L, V]: position p predicts p+1
        first = g.prompt_len - 1  # the first position whose next token is greedy
        total = F.cross_entropy(
            logits[:, first:-1].reshape(-1, logits.shape[-1]), tokens[:, first + 1 :].reshape(-1)
        )
        hit = logits[:, :-1].argmax(-1) == tokens[:, 1:]  # [B, L-1]: at p, token p+1 right
        base = torch.arange(length - 1)
        correct: list[Tensor] = []
        valid: list[Tensor] = []
        for s in range(draft_steps):
            # Step s after base i predicts token i+2+s from position i+1+s.
            lab_idx = base + 2 + s
            correct.append(hit[:, (base + 1 + s).clamp(max=length - 2)])
            valid.append((lab_idx <= length - 1) & (lab_idx >= g.prompt_len))
        return total, correct, valid

    stats = _fit_on_sequences(model, data, losses, draft_steps, params, log, "draft")
    model.eval()
    return model, {"loss": "CE(greedy token), teacher-forced", **stats}


# --------------------------------------------------------------------------- MTP


def fit_mtp(
    data: GreedyData,
    cfg: dict[str, Any],
    target_layer: dict[str, Tensor],
    params: dict[str, Any],
    log: Log,
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """One MiMo MTP layer over the target's pre-norm last hidden state (aux boundary
    num_layers): cross-entropy on the greedy token after next, one draft step."""
    torch.manual_seed(int(params["seed"]))
    draft = MtpDraft(cfg, data.embed, data.lm_head)
    hidden = int(cfg["hidden_size"])
    _copy_target_layer(draft, target_layer)
    with torch.no_grad():
        draft.fc.weight.normal_(0.0, float(params["fc_init_std"]))
        draft.fc.weight[:, :hidden] += torch.eye(hidden)
    last = int(cfg["num_hidden_layers"])
    losses = _unrolled_losses(
        draft, params, lambda g: g.aux[..., last * hidden : (last + 1) * hidden]
    )
    stats = _fit_on_sequences(draft, data, losses, int(params["unroll"]), params, log, "mtp")
    stats = {"loss": "CE(greedy token after next)", **stats}
    return draft.checkpoint_weights(str(params["prefix"])), stats
