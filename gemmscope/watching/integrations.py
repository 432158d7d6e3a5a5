"""gemmscope.audit where a framework's trainer owns the loop: a callback that starts it as training
begins, a few lines over the same call (in_process.audit), importing its framework only when made.

    trainer = transformers.Trainer(..., callbacks=[hf_trainer_callback(every=2000)])
    lightning.Trainer(..., callbacks=[lightning_callback(every=2000)])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemmscope.watching.in_process import audit


def hf_trainer_callback(every: int | str, window: int = 3, out: str | Path = "gemmscope-audit",
                        expect: str | None = None) -> Any:
    """An HF transformers TrainerCallback that audits each process of the run from its training's start."""
    from transformers import TrainerCallback

    class GemmscopeAudit(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            audit(every, window, out, expect=expect)

    return GemmscopeAudit()


def lightning_callback(every: int | str, window: int = 3, out: str | Path = "gemmscope-audit",
                       expect: str | None = None) -> Any:
    """A Lightning Callback that audits each process of the run from its fit's start."""
    from lightning.pytorch.callbacks import Callback

    class GemmscopeAudit(Callback):
        def on_fit_start(self, trainer, pl_module):
            audit(every, window, out, expect=expect)

    return GemmscopeAudit()
