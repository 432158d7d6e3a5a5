"""The public result of a check (`gemmscope.check`, `Analysis.check`): every GEMM launch under
its public column names, with its verdict, and the state the CLI exits with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gemmscope.errors import State

if TYPE_CHECKING:
    import pandas as pd

    from gemmscope.judging.judgement import Judgement

# The GEMM tables' columns: public name <- the column of verify's frame it is. Times are ns.
GEMM_COLUMNS = {
    "trace": "trace", "rank": "rank", "kernel": "name", "precision": "precision", "pass": "te_pass",
    "module": "module", "layer": "layer", "requested": "requested", "m": "gemm_m", "n": "gemm_n", "k": "gemm_k",
    "thread": "thread", "start_ns": "start", "duration_ns": "duration_ns",
}
# What a check adds to each GEMM: the recipe it was checked against, its verdict and why.
VERDICT_COLUMNS = {"expected": "expected", "verdict": "verdict", "cause": "cause", "allowed": "allowed"}


@dataclass(eq=False)
class CheckResult:
    """A check of traces against a recipe (`check`): every GEMM launch with its verdict, and the
    state the CLI would say (its exit code: `state.exit_code`)."""

    state: State  # PASS, FAIL, NOT_CHECKED (nothing to check against) or NOT_FULLY_CHECKED (README: Exit codes)
    expected: list[str]  # the recipes GEMMs were checked against (none: each against its own recorded request)
    unreadable: list[dict]  # traces that could not be read: trace, rank, error
    # traces whose process launched no GPU kernel beside traces that did (torch.compile's
    # workers ...): trace, rank; nothing in them to check, no failure
    without_kernels: list[dict]
    gemms: pd.DataFrame = field(repr=False)  # GEMM_COLUMNS, and VERDICT_COLUMNS where something was checked
    # every verdict and what it was judged on (the CLI's reports read it); None where the run launched no GPU kernel
    judgement: Judgement | None = field(repr=False)
    note: str | None = field(default=None, repr=False)  # why nothing was checked: the run launched no GPU kernel
    # what gemmscope's hook could not patch in the run (a torch or TE release that moved an entry
    # point): what, version, why, misses; the records the traces lack (te_ranges.recorded_unpatched)
    unpatched: list[dict] = field(default_factory=list, repr=False)

    @property
    def passed(self) -> bool:
        """Every GEMM judged (or allowed) and none failed: the CLI's exit 0."""
        return self.state is State.PASS

    @property
    def mismatches(self) -> pd.DataFrame:
        """The GEMM launches that ran another precision than asked, not allowed (none where nothing
        was checked)."""
        return self._public("mismatches")

    @property
    def allowed(self) -> pd.DataFrame:
        """The mismatches an `allow` pattern accepted (still listed)."""
        return self._public("allowed")

    @property
    def unjudged(self) -> pd.DataFrame:
        """The GEMM launches that had nothing to be judged against, not allowed: they make the
        state NOT_FULLY_CHECKED (with `strict`, those of unknown precision too)."""
        return self._public("unjudged")

    def _public(self, which: str) -> pd.DataFrame:
        if self.judgement is None:
            return self.gemms
        return public_table(getattr(self.judgement, which), GEMM_COLUMNS | VERDICT_COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-able values: the mismatches and the unjudged GEMMs one record per launch."""
        from gemmscope.common.jsonable import frame_records

        return {"state": self.state.value, "passed": self.passed, "expected": self.expected,
                "unreadable": self.unreadable, "without_kernels": self.without_kernels, "note": self.note,
                "gemm_launches": len(self.gemms), "allowed_launches": len(self.allowed),
                "mismatches": frame_records(self.mismatches), "unjudged": frame_records(self.unjudged)}

def public_table(gemms: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """verify's GEMM frame under the public names, in `columns`' order (a column the check did
    not make, such as a verdict without a recipe, is left out)."""
    present = {public: own for public, own in columns.items() if own in gemms}
    return gemms[list(present.values())].set_axis(list(present), axis=1).reset_index(drop=True)
