"""Every command's settings, one file a command (tokenize.py, pretrain.py, finetune.py, ...),
each a pydantic model whose fields are the command's flags (bertctl/settings.py says how they
resolve). The blocks several commands share are declared once and mixed in: the runtime
(bertctl/settings.py: Runtime, Threads), the training loop (train/settings.py), the
pretraining data (data/settings.py), the fine-tuning task (task.py). What the registries add
(a family's options, an objective's, the architectures' choices) is assembled.py's.

Importing the package registers every command's class: the artifact-id check reads from them
which fields each kind's ids leave out (settings.identity_exclusions). The task stages'
classes as the CLI shows them add the families' options, which are always part of the id, so
these bases say all their composed classes leave out."""

from bertctl.settings import StageConfig, register_stage_settings
from bertctl.stages.settings.audit import AuditSettings
from bertctl.stages.settings.build_pretrain_data import BuildPretrainDataSettings
from bertctl.stages.settings.choose import ChooseSettings
from bertctl.stages.settings.distill import DistillSettings
from bertctl.stages.settings.embed import EmbedSettings
from bertctl.stages.settings.eval import EvalSettings
from bertctl.stages.settings.export import ExportSettings
from bertctl.stages.settings.finetune import FinetuneSettings
from bertctl.stages.settings.glue_summary import GlueSummarySettings
from bertctl.stages.settings.index import IndexSettings
from bertctl.stages.settings.merge import MergeSettings
from bertctl.stages.settings.mine import MineSettings
from bertctl.stages.settings.pretrain import PretrainSettings
from bertctl.stages.settings.report import ReportSettings
from bertctl.stages.settings.split import SplitSettings
from bertctl.stages.settings.tokenize import TokenizeSettings

STAGE_SETTINGS: tuple[type[StageConfig], ...] = (
    TokenizeSettings, BuildPretrainDataSettings, PretrainSettings, FinetuneSettings,
    DistillSettings, EvalSettings, EmbedSettings, ExportSettings, ReportSettings,
    GlueSummarySettings, AuditSettings, MineSettings, IndexSettings, SplitSettings,
    ChooseSettings, MergeSettings)
register_stage_settings(*STAGE_SETTINGS)

__all__ = ["STAGE_SETTINGS", *(c.__name__ for c in STAGE_SETTINGS)]
