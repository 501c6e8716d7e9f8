"""Training utilities from "Attention Is All You Need" (sections 5.3-5.4).

- `TransformerSchedule`: linear warmup, then inverse-square-root decay.
- `paper_adam`: Adam with the paper's betas, epsilon and schedule.
- `MaskedSparseCategoricalCrossentropy`: label-smoothed token loss that
  skips padding.
- `MaskedAccuracy`: token accuracy that skips padding.
- `AtomicBackupAndRestore`: resumable training whose backups survive kills.
- `average_checkpoints`: the mean weights of the last checkpoints (6.1).
- `last_epoch_checkpoints`: the last epoch checkpoints of a folder, with no
  epoch missing.
- `RDropLoss`: R-Drop's consistency loss between two dropout passes.
"""

from keras_attn.training.backup import AtomicBackupAndRestore
from keras_attn.training.checkpoint_averaging import (
    average_checkpoints,
    last_epoch_checkpoints,
)
from keras_attn.training.losses import MaskedSparseCategoricalCrossentropy
from keras_attn.training.metrics import MaskedAccuracy
from keras_attn.training.optimizers import paper_adam
from keras_attn.training.r_drop import RDropLoss
from keras_attn.training.schedules import TransformerSchedule

__all__ = [
    "AtomicBackupAndRestore",
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "RDropLoss",
    "TransformerSchedule",
    "average_checkpoints",
    "last_epoch_checkpoints",
    "paper_adam",
]
