"""Start-up hook for the real tensorizer examples run by test_real_examples.py (on PYTHONPATH there).

It touches no tensorizer code and does nothing unless asked through the environment:
  TZ_EXAMPLE_SEED        torch.manual_seed at start-up (sampled text becomes reproducible);
  TZ_EXAMPLE_DUMP        keep the models transformers' AutoModelForCausalLM.from_pretrained /
                         from_config return, save their parameters and buffers there at exit;
  TZ_EXAMPLE_WHICH       write tensorizer.__file__ and __version__ there at exit;
  TZ_EXAMPLE_CUDA_TO_CPU "1": torch.Tensor.to maps a "cuda" device to "cpu" when no GPU exists
                         (for deserialize-simple.py, which calls .to("cuda") unconditionally).
"""

import atexit
import os
import sys

_dump = os.environ.get("TZ_EXAMPLE_DUMP")
_which = os.environ.get("TZ_EXAMPLE_WHICH")
_seed = os.environ.get("TZ_EXAMPLE_SEED")
_cuda_to_cpu = os.environ.get("TZ_EXAMPLE_CUDA_TO_CPU") == "1"

if _dump or _seed or _cuda_to_cpu:
    import torch

if _seed:
    torch.manual_seed(int(_seed))

if _cuda_to_cpu and not torch.cuda.is_available():
    _tensor_to = torch.Tensor.to

    def _cpu(device):
        if isinstance(device, str) and device.startswith("cuda"):
            return "cpu"
        if isinstance(device, torch.device) and device.type == "cuda":
            return torch.device("cpu")
        return device

    def _to(self, *args, **kwargs):
        args = tuple(_cpu(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        return _tensor_to(self, *args, **kwargs)

    torch.Tensor.to = _to

if _dump:
    import transformers

    _models = []
    _auto = transformers.AutoModelForCausalLM
    for _name in ("from_pretrained", "from_config"):

        def _wrap(*args, _orig=getattr(_auto, _name), _factory=_name, **kwargs):
            model = _orig(*args, **kwargs)
            _models.append((_factory, model))
            return model

        setattr(_auto, _name, _wrap)

    def _save():
        out = []
        for factory, model in _models:
            tensors, meta = {}, []
            named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
            for name, tensor in named:
                if tensor.is_meta:
                    meta.append(name)
                else:
                    tensors[name] = tensor.detach().to("cpu").clone()
            out.append({"factory": factory, "class": type(model).__name__, "tensors": tensors, "meta": meta})
        torch.save(out, _dump)

    atexit.register(_save)

if _which:

    def _record_which():
        module = sys.modules.get("tensorizer")
        with open(_which, "w") as f:
            if module is not None:
                f.write(f"{module.__file__}\n{getattr(module, '__version__', '?')}\n")

    atexit.register(_record_which)
