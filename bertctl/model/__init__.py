"""The shared PyTorch model core: the architectures, each a package that registers itself
(bert/, modernbert/; the contract in architectures.py), what their model files share
(shared.py), the one way a headed model is made (composed.py), the heads of the roles,
written once (roles.py), and Hugging Face checkpoint reading and writing (hf.py).

Importing the package registers the architectures without importing torch (the CLI's help
lists them). Every registered architecture's config class and model classes (its heads, by
the class names config.json carries: BertForMaskedLM, ModernBertForMaskedLM, ...) are names of
this package, read from the registry and imported when first named, so an architecture added
elsewhere exports its own as bert/ and modernbert/ do."""

import importlib
import pkgutil

from bertctl.model import architectures
from bertctl.model.architectures import ARCHITECTURES, ROLES, Architecture, build, role_of

# Each architecture is a package here that registers itself when imported: found, not listed
# (in name order, so the registry's order, the flags' choices, is the same everywhere).
for _package in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg):
    importlib.import_module(f"{__name__}.{_package}")

_LAZY = {
    "bertctl.model.composed": ("Composed", "Head"),
    "bertctl.model.hf": ("LoadReport", "load_model", "read_config", "read_config_dict",
                         "save_model"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def _registered(name: str):
    """A registered architecture's config class or model class of that name, or None."""
    for arch in ARCHITECTURES.values():
        if arch.config_class.__name__ == name:
            return arch.config_class
    return architectures.model_class(name)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    found = _registered(name)
    if found is None:
        raise AttributeError(f"module 'bertctl.model' has no attribute {name!r}")
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, *(a.config_class.__name__ for a in ARCHITECTURES.values()),
                   *(a.head_name(r) for a in ARCHITECTURES.values() for r in a.roles())})


__all__ = ["ARCHITECTURES", "ROLES", "Architecture", "architectures", "build", "role_of",
           *_WHERE]
