"""A toy architecture written outside bertctl in the shape of bertctl's own (model/<name>/):
config.py, modeling.py, and here its `Architecture` entry. bertctl's packages call `register`
when imported; the tests register this one for their own length
(tests/model/test_architecture_plugin.py), so the rest of the suite never sees it."""

from bertctl.model.architectures import Architecture

from toy_architecture.config import ToyConfig

_MODELING = "toy_architecture.modeling:"

TOY = Architecture(
    name="toy", model_type="toy", config_class=ToyConfig, description="a test's",
    heads={"encoder": f"{_MODELING}ToyModel", "masked_lm": f"{_MODELING}ToyMaskedLMHead",
           "sequence_classification": f"{_MODELING}ToySequenceClassificationHead"},
    encoder_name="toy", bare_prefixes=("embeddings.", "blocks.", "norm."))
