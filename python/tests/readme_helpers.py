"""Helpers shared by the README example tests: the small torch module standing in for the README's
`model: torch.nn.Module = ...`, what write_module writes for it, equality by name and bytes, and
the device the README's "cuda:0" becomes (the `in_tmp` fixture is in conftest.py)."""

import torch

DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"


class TinyNet(torch.nn.Module):
    """Stands in for `model: torch.nn.Module = ...`: parameters and buffers of several dtypes."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 8)
        self.bn = torch.nn.BatchNorm1d(8)  # running_mean, running_var, num_batches_tracked (int64)

    def forward(self, ids):
        return self.bn(self.proj(self.norm(self.embed(ids))).mean(dim=1))


def tiny_model_for_readme(seed=0):
    torch.manual_seed(seed)
    model = TinyNet()
    model.train()
    model(torch.randint(0, 100, (4, 5)))  # moves the BatchNorm running statistics off their init
    model.eval()
    return model


def assert_same_tensors(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype, name
        assert torch.equal(got[name].detach().cpu(), tensor.detach().cpu()), name


def written_tensors(model) -> dict:
    """What write_module writes: each module's own parameters and buffers (tied weights under
    every name that holds them)."""
    out = {}
    for prefix, module in model.named_modules():
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            out[f"{prefix}.{name}" if prefix else name] = tensor
    return out
