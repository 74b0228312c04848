"""What the clients saw: every action's outcome, the goal violations with examples, and the
well-behaved requests' latencies. One OutcomeLog per phase; the sampler reads it each interval."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MAX_EXAMPLES_PER_KIND = 5


@dataclass
class OutcomeLog:
    counts: Counter = field(default_factory=Counter)  # (role, variant, outcome) -> n
    violations: Counter = field(default_factory=Counter)  # (role, variant, outcome) -> n
    examples: dict = field(default_factory=dict)  # "role/variant/outcome" -> [detail, ...]
    ttft_ms: list[float] = field(default_factory=list)  # well-behaved requests served with content
    e2e_ms: list[float] = field(default_factory=list)
    _reported_counts: Counter = field(default_factory=Counter)
    _reported_ttft: int = 0

    def record(self, role: str, variant: str, outcome: str, violation: str | None = None) -> None:
        """`violation` says which goal the outcome breaks and how (None: it breaks none)."""
        key = (role, variant, outcome)
        self.counts[key] += 1
        if violation is None:
            return
        self.violations[key] += 1
        examples = self.examples.setdefault("/".join(key), [])
        if len(examples) < MAX_EXAMPLES_PER_KIND:
            examples.append(violation)

    def record_latency(self, ttft_ms: float | None, e2e_ms: float) -> None:
        if ttft_ms is not None:
            self.ttft_ms.append(ttft_ms)
        self.e2e_ms.append(e2e_ms)

    def interval(self) -> dict:
        """Outcomes ("role/outcome" -> n) and TTFTs since the last call, for a raw sample."""
        by_role_outcome = Counter()
        for (role, _variant, outcome), n in self.counts.items():
            by_role_outcome[f"{role}/{outcome}"] += n
        delta = by_role_outcome - self._reported_counts
        self._reported_counts = by_role_outcome
        new_ttft = self.ttft_ms[self._reported_ttft:]
        self._reported_ttft = len(self.ttft_ms)
        return {"outcomes": dict(sorted(delta.items())), "ttft_ms": [round(t, 1) for t in new_ttft]}

    def total(self, role: str | None = None, outcome_prefix: str = "") -> int:
        return sum(n for (r, _v, o), n in self.counts.items()
                   if (role is None or r == role) and o.startswith(outcome_prefix))

    def violation_total(self) -> int:
        return sum(self.violations.values())

    def nested_counts(self) -> dict:
        """{role: {variant: {outcome: n}}}"""
        out: dict = {}
        for (role, variant, outcome), n in sorted(self.counts.items()):
            out.setdefault(role, {}).setdefault(variant, {})[outcome] = n
        return out

    def by_outcome(self, role: str) -> dict:
        out = Counter()
        for (r, _variant, outcome), n in self.counts.items():
            if r == role:
                out[outcome] += n
        return dict(sorted(out.items()))
