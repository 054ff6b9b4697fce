"""Credit metrics of `OARTrainer`, logged every step (a mixin: the trainer stays glue).

- `oar/ess_ratio`, `oar/top10_mass` (paper Eq. 27-28), `oar/boosted_frac`, `oar/probe_fallback_frac` and
  `oar/importance_seconds`: per-rank sums gathered (equal-size tensors) before the global means over
  rows with A_i != 0, so an N-process run logs what a one-process run would.
- With `token_roles` (a labeller, `oar_rl.roles`): the ground-truth metrics `oar/pivot_frac`,
  `oar/pivot_adv_share`, `oar/pivot_recall@10|20` and `oar/roles_unknown_frac`.
"""

from __future__ import annotations

from typing import Any

import torch

from oar_rl.metrics import ess_ratio, top_advantage_mass

BOOST_EPS = 1e-6  # a weight counts as boosted when > 1 + BOOST_EPS (uniform weights can round to 1 + ulp)


class CreditLogging:
    """The credit-metric logging of `OARTrainer` (needs TRL's `accelerator`, `_metrics`, `args`, `state`)."""

    def _log_credit(self, mode: str, credit: Any, mask: torch.Tensor, seconds: float) -> None:
        """Gather per-rank sums (equal-size tensors) and log global means over rows with A_i != 0."""
        active = credit.active  # (B,)
        valid = mask & active[:, None]  # (B, C)
        if active.any():
            ess = ess_ratio(credit.weights[active], mask[active]).sum()
            top = top_advantage_mass(credit.advantages[active], mask[active], fraction=0.1).sum()
        else:
            ess = top = torch.zeros((), device=mask.device)
        local = torch.stack(
            [
                ess.float(),
                top.float(),
                active.sum().float(),
                ((credit.weights > 1.0 + BOOST_EPS) & valid).sum().float(),
                valid.sum().float(),
                (credit.fallback & active).sum().float(),
                torch.tensor(float(seconds), device=mask.device),
            ]
        )  # (7,)
        stats = self.accelerator.gather(local).view(-1, local.numel())  # (world, 7)
        ess_sum, top_sum, rows, boosted, tokens, fallback, _ = stats.sum(dim=0).tolist()
        metrics = self._metrics[mode]
        if rows > 0:
            metrics["oar/ess_ratio"].append(ess_sum / rows)
            metrics["oar/top10_mass"].append(top_sum / rows)
            metrics["oar/probe_fallback_frac"].append(fallback / rows)
            self._warn_fallback(fallback / rows, int(rows))
        if tokens > 0:
            metrics["oar/boosted_frac"].append(boosted / tokens)
        metrics["oar/importance_seconds"].append(stats[:, 6].mean().item())

    FALLBACK_WARN_FRAC = 0.5
    """Warn (once per run) when more than this share of a step's scored rows has no answer span."""

    def _warn_fallback(self, frac: float, rows: int) -> None:
        """A loud warning when most rows fall back from an answer-span probe (or GRAIL) to LT-Logits."""
        if frac <= self.FALLBACK_WARN_FRAC or self._oar_fallback_warned:
            return
        self._oar_fallback_warned = True
        if not self.accelerator.is_main_process:
            return
        import warnings

        pattern = self.args.answer_pattern or "rewarded"
        what = (
            "GRAIL leaves them at weight 1"
            if self.args.credit == "grail"
            else f"probe={self.args.probe!r} scored them with LT-Logits instead"
        )
        warnings.warn(
            f"step {self.state.global_step}: {frac:.0%} of {rows} scored completions have no answer span "
            f"(answer_pattern={pattern!r}), so {what} (logged as oar/probe_fallback_frac). Check that "
            "completions end in an answer the pattern finds (\\boxed{...}, <answer>...</answer> or "
            "'the final answer is ...' for 'rewarded'), raise max_completion_length if they are clipped, "
            "or set answer_pattern / probe='lt-logits'",
            UserWarning,
            stacklevel=1,
        )

    def _warn_zero_weights(self, scores: torch.Tensor, scored: torch.Tensor) -> None:
        """Once per run: a ``reshape="weights"`` rule scored whole rows 0 on every scored token, which
        takes their gradient away there (`oar_rl.rule_calls.zero_weight_rows`); named with the rule."""
        if self._oar_zero_weights_warned:  # warned once: nothing to compute in later steps
            return
        from oar_rl.rule_calls import zero_weight_rows, zero_weights_message

        silent = zero_weight_rows(scores, scored)
        if not silent:
            return
        self._oar_zero_weights_warned = True
        import warnings

        step = self.state.global_step + 1
        warnings.warn(zero_weights_message(self.args.credit, silent, scores.shape[0], step), stacklevel=1)

    # ------------------------------------------------------------------------------------------------
    # token_roles (oar-rl): ground-truth credit metrics (begin)
    # ------------------------------------------------------------------------------------------------
    ROLE_RECALL_KS: tuple[float, ...] = (0.1, 0.2)

    def _log_roles(self, mode: str, credit: Any, mask: torch.Tensor, output: dict[str, Any]) -> None:
        """Log the share of |A_t| on ground-truth pivots and the signal's pivot recall@K%.

        Completions the labeller cannot parse are left out and counted (oar/roles_unknown_frac). The
        means run over rows with A_i != 0 and at least one reasoning token (recall: at least one pivot).
        """
        from oar_rl.metrics import pivot_advantage_share, pivot_fraction, pivot_recall_at_k
        from oar_rl.roles import role_masks

        pivot, filler, known = role_masks(
            output["completion_ids"], output["completion_mask"], self.processing_class, self._oar_token_roles
        )  # (B, C), (B, C), (B,)
        pivot, filler = pivot & mask, filler & mask
        has_tokens = mask.any(dim=1)  # (B,)
        rows = credit.active & known & (pivot | filler).any(dim=1)  # (B,)
        sums = [
            (has_tokens & ~known).sum().float(),
            has_tokens.sum().float(),
            rows.sum().float(),
            pivot_fraction(pivot, filler)[rows].sum(),
            pivot_advantage_share(credit.advantages, pivot, filler)[rows].sum(),
        ]
        recall_rows = rows & pivot.any(dim=1)  # (B,)
        sums.append(recall_rows.sum().float())
        for k in self.ROLE_RECALL_KS:
            if credit.importance is None:
                sums.append(torch.zeros((), device=mask.device))
            else:
                sums.append(pivot_recall_at_k(credit.importance, pivot, filler, k)[recall_rows].sum())
        local = torch.stack([x.float().to(mask.device) for x in sums])  # (6 + len(KS),)
        stats = self.accelerator.gather(local).view(-1, local.numel()).sum(dim=0).tolist()
        unknown, completions, n_rows, frac, share, n_recall, *recalls = stats
        metrics = self._metrics[mode]
        if completions > 0:
            metrics["oar/roles_unknown_frac"].append(unknown / completions)
        if n_rows > 0:
            metrics["oar/pivot_frac"].append(frac / n_rows)
            metrics["oar/pivot_adv_share"].append(share / n_rows)
        if n_recall > 0 and credit.importance is not None:
            for k, r in zip(self.ROLE_RECALL_KS, recalls, strict=True):
                metrics[f"oar/pivot_recall@{round(100 * k)}"].append(r / n_recall)

    # token_roles (oar-rl): ground-truth credit metrics (end)
